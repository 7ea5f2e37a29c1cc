// Request mix and rendering (see workload.h).
#include "workload.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

namespace tollgate::loadgen {
namespace {

std::string json_escape(std::string_view s) {
  std::string o;
  static const char* hex = "0123456789abcdef";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\r':
        o += "\\r";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (c < 0x20) {
          o += "\\u00";
          o += hex[c >> 4];
          o += hex[c & 15];
        } else {
          o += static_cast<char>(c);
        }
    }
  }
  return o;
}

std::string url_encode(std::string_view s) {
  std::string o;
  static const char* hex = "0123456789ABCDEF";
  for (unsigned char c : s) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      o += static_cast<char>(c);
    } else {
      o += '%';
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  }
  return o;
}

void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

// The cumulative weights of n items where item i (0-based) weighs 1 / (i + 1)^s, normalised
// so the last is 1 (s = 0: uniform).
std::vector<double> zipf_cdf(std::size_t n, double s) {
  std::vector<double> cdf;
  cdf.reserve(n);
  double acc = 0;
  for (std::size_t i = 0; i < n; i++) {
    acc += 1.0 / std::pow(static_cast<double>(i + 1), s);
    cdf.push_back(acc);
  }
  for (auto& c : cdf) {
    c /= acc;
  }
  return cdf;
}

}  // namespace

bool parse_request_spec(std::string_view text, request_spec& out, std::string& err) {
  out = request_spec{};
  std::string_view kind = text;
  std::size_t at = text.rfind('@');
  if (at != std::string_view::npos) {
    std::string_view w = text.substr(at + 1);
    unsigned weight = 0;
    auto r = std::from_chars(w.data(), w.data() + w.size(), weight);
    if (r.ec != std::errc() || r.ptr != w.data() + w.size() || weight == 0 || weight > 1000000) {
      err = "bad weight in request spec '" + std::string(text) + "' (want 1..1000000)";
      return false;
    }
    out.weight = weight;
    kind = text.substr(0, at);
  }
  if (kind == "call") {
    out.kind = req_kind::mcp_call;
  } else if (kind == "rest") {
    out.kind = req_kind::rest_search;
  } else if (kind == "init") {
    out.kind = req_kind::mcp_init;
  } else if (kind == "list") {
    out.kind = req_kind::mcp_list;
  } else if (kind.substr(0, 4) == "get:" && kind.size() > 4 && kind[4] == '/') {
    out.kind = req_kind::get;
    out.path = std::string(kind.substr(4));
    if (out.path.find_first_of(" \r\n\t") != std::string::npos) {
      err = "path in request spec '" + std::string(text) + "' has whitespace";
      return false;
    }
  } else {
    err = "unknown request spec '" + std::string(text) +
          "' (want call | rest | init | list | get:/PATH, optionally @WEIGHT)";
    return false;
  }
  return true;
}

bool workload::build(const workload_config& cfg, std::string& err) {
  if (cfg.mix.empty()) {
    err = "empty request mix";
    return false;
  }
  specs_ = cfg.mix;
  std::uint64_t sum = 0;
  spec_cdf_.clear();
  bool needs_queries = false;
  for (const auto& s : specs_) {
    sum += s.weight;
    spec_cdf_.push_back(sum);
    needs_queries |= s.kind == req_kind::mcp_call || s.kind == req_kind::rest_search;
  }
  for (const auto& k : cfg.keys) {
    if (k.empty() || k.find_first_of(" \r\n\t") != std::string::npos) {
      err = "an API key is empty or has whitespace";
      return false;
    }
    auth_lines_.push_back("Authorization: Bearer " + k + "\r\n");
  }
  key_cdf_ = zipf_cdf(auth_lines_.size(), cfg.zipf_s);
  std::vector<std::string> queries = cfg.queries;
  if (queries.empty()) {
    queries = {"rust",   "database", "io_uring", "startup",     "security",
               "python", "linux",    "compiler", "open source", "machine learning"};
  }
  if (needs_queries) {
    for (const auto& q : queries) {
      if (q.empty() || q.size() > 500) {
        err = "a query is empty or longer than 500 characters";
        return false;
      }
    }
  }
  query_cdf_.clear();
  if (cfg.query_zipf_s > 0 && queries.size() > 1) {
    query_cdf_ = zipf_cdf(queries.size(), cfg.query_zipf_s);
  }
  for (const auto& q : queries) {
    json_queries_.push_back(json_escape(q));
    url_queries_.push_back(url_encode(q));
  }
  std::string common = "Host: " + cfg.host_header + "\r\nUser-Agent: tollgate-loadgen\r\n";
  for (const auto& h : cfg.extra_headers) {
    if (h.find(':') == std::string::npos || h.find_first_of("\r\n") != std::string::npos) {
      err = "bad extra header '" + h + "' (want 'Name: value')";
      return false;
    }
    common += h + "\r\n";
  }
  get_common_ = common;
  mcp_head_ = "POST " + cfg.mcp_path + " HTTP/1.1\r\n" + common +
              "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n";
  if (!cfg.protocol_version.empty()) {
    mcp_head_ += "MCP-Protocol-Version: " + cfg.protocol_version + "\r\n";
  }
  rest_prefix_ = "GET " + cfg.rest_path + "?q=";
  init_params_ = "\"params\":{\"protocolVersion\":\"" +
                 (cfg.protocol_version.empty() ? std::string("2025-03-26") : cfg.protocol_version) +
                 "\",\"capabilities\":{},\"clientInfo\":{\"name\":\"tollgate-loadgen\","
                 "\"version\":\"0.1\"}}";
  if (cfg.limit > 0) {
    limit_arg_ = ",\"limit\":" + std::to_string(cfg.limit);
  }
  expect_status_ = cfg.expect_status;
  fixed_id_ = cfg.fixed_id;
  return true;
}

void workload::render(std::string& out, std::string& body, std::size_t spec_i, std::size_t key_i,
                      std::size_t query_i, std::int64_t id) const {
  const request_spec& s = specs_[spec_i];
  const std::string* auth = auth_lines_.empty() ? nullptr : &auth_lines_[key_i];
  switch (s.kind) {
    case req_kind::get:
      out += "GET ";
      out += s.path;
      out += " HTTP/1.1\r\n";
      out += get_common_;
      out += "\r\n";
      return;
    case req_kind::rest_search:
      out += rest_prefix_;
      out += url_queries_[query_i];
      out += " HTTP/1.1\r\n";
      out += get_common_;
      if (auth != nullptr) {
        out += *auth;
      }
      out += "\r\n";
      return;
    default:
      break;
  }
  body.clear();
  body += "{\"jsonrpc\":\"2.0\",\"id\":";
  append_int(body, id);
  switch (s.kind) {
    case req_kind::mcp_call:
      body +=
          ",\"method\":\"tools/call\",\"params\":{\"name\":\"search_stories\",\"arguments\":"
          "{\"query\":\"";
      body += json_queries_[query_i];
      body += '"';
      body += limit_arg_;
      body += "}}}";
      break;
    case req_kind::mcp_init:
      body += ",\"method\":\"initialize\",";
      body += init_params_;
      body += '}';
      break;
    case req_kind::mcp_list:
      body += ",\"method\":\"tools/list\",\"params\":{}}";
      break;
    default:
      break;
  }
  out += mcp_head_;
  if (auth != nullptr) {
    out += *auth;
  }
  out += "Content-Length: ";
  append_int(out, static_cast<std::int64_t>(body.size()));
  out += "\r\n\r\n";
  out += body;
}

std::uint64_t picker::next() noexcept {
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9;
  z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
  return z ^ (z >> 31);
}

std::size_t picker::spec() {
  const auto& cdf = w_->spec_cdf();
  if (cdf.size() == 1) {
    return 0;
  }
  std::uint64_t r = next() % cdf.back();
  return static_cast<std::size_t>(std::upper_bound(cdf.begin(), cdf.end(), r) - cdf.begin());
}

std::size_t picker::key() {
  const auto& cdf = w_->key_cdf();
  if (cdf.size() <= 1) {
    return 0;
  }
  double u = unit();
  auto it = std::upper_bound(cdf.begin(), cdf.end(), u);
  if (it == cdf.end()) {
    --it;
  }
  return static_cast<std::size_t>(it - cdf.begin());
}

std::size_t picker::query() {
  const auto& cdf = w_->query_cdf();
  if (!cdf.empty()) {
    auto it = std::upper_bound(cdf.begin(), cdf.end(), unit());
    return it == cdf.end() ? cdf.size() - 1 : static_cast<std::size_t>(it - cdf.begin());
  }
  std::size_t n = w_->query_count();
  return n <= 1 ? 0 : static_cast<std::size_t>(next() % n);
}

bool read_lines(const std::string& path, std::vector<std::string>& out, std::string& err) {
  std::ifstream in(path);
  if (!in) {
    err = "cannot read " + path;
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
      line.pop_back();
    }
    std::size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') {
      continue;
    }
    out.push_back(line.substr(b));
  }
  return true;
}

}  // namespace tollgate::loadgen
