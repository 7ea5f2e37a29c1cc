// fleet: the wire side of remote shards. The shard node answers df / search / story requests
// against its backend; the gateway's remote_query writes the request bodies, checks and copies
// the answers, and computes the global idf; remote_health marks failing nodes down.
//
// Bodies are parsed with simdjson's DOM parser (full validation, so a malformed body is
// rejected as a whole, never half-applied); a search answer is walked a second time with the
// On Demand parser only to cut each story's JSON text out of the body as received.
#include "tollgate/search/fleet.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "search/fleet_impl.h"
#include "tollgate/common/ascii.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search {

namespace {

// Bounds on numbers from a remote, far above any real corpus, so sums cannot overflow.
constexpr uint64_t max_docs = uint64_t{1} << 40;
constexpr uint64_t max_tokens = uint64_t{1} << 52;
// Longest term or id accepted (bytes): a query is at most 500 code points.
constexpr size_t max_term_bytes = 4 * max_query_chars;
constexpr size_t max_tag_bytes = 4 * max_tag_chars;

void append_double(out_buffer& out, double v) {
  char buf[40];
  char* end = fmt::format_to(buf, "{:.17g}", v);
  out.append(buf, static_cast<size_t>(end - buf));
}

void append_int(out_buffer& out, int64_t v) {
  fmt::format_int f(v);
  out.append(f.data(), f.size());
}

void append_uint(out_buffer& out, uint64_t v) {
  fmt::format_int f(v);
  out.append(f.data(), f.size());
}

// Parses a padded body as one JSON object.
bool parse_object(simdjson::dom::parser& p, std::string_view body, simdjson::dom::object& obj) {
  simdjson::dom::element root;
  if (p.parse(body.data(), body.size(), false).get(root)) {
    return false;
  }
  return !root.get_object().get(obj);
}

bool get_uint(simdjson::dom::element e, uint64_t max, uint64_t& out) {
  uint64_t v;
  if (e.get_uint64().get(v) || v > max) {
    return false;
  }
  out = v;
  return true;
}

// An array of at most `max` strings of 1..max_bytes bytes, into `out` (views into the parser).
bool get_strings(simdjson::dom::element e, size_t max, size_t max_bytes,
                 std::vector<std::string_view>& out) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) || arr.size() > max) {
    return false;
  }
  out.clear();
  for (simdjson::dom::element v : arr) {
    std::string_view s;
    if (v.get_string().get(s) || s.empty() || s.size() > max_bytes) {
      return false;
    }
    out.push_back(s);
  }
  return true;
}

int write_error(out_buffer& out, int status, std::string_view code, std::string_view message) {
  json_out j(out, false);
  j.raw("{\"code\":");
  j.string(code);
  if (!message.empty()) {
    j.raw(",\"message\":");
    j.string(message);
  }
  j.raw("}");
  return status;
}

int bad_request(out_buffer& out, std::string_view message) {
  return write_error(out, 400, "invalid_request", message);
}

int not_found(out_buffer& out) { return write_error(out, 404, "not_found", {}); }

int unavailable(out_buffer& out) {
  return write_error(out, 503, "unavailable", "No local shard answered.");
}

void write_terms(json_out& j, std::span<const std::string_view> terms) {
  j.raw("[");
  for (size_t i = 0; i < terms.size(); ++i) {
    if (i > 0) {
      j.raw(",");
    }
    j.string(terms[i]);
  }
  j.raw("]");
}

// ,"phrases":[[first,count],...],"phrase_terms":[...]
void write_phrases(out_buffer& out, std::span<const phrase_span> phrases,
                   std::span<const uint32_t> phrase_terms) {
  out.append(",\"phrases\":[");
  for (size_t i = 0; i < phrases.size(); ++i) {
    out.append(i > 0 ? ",[" : "[");
    append_uint(out, phrases[i].first);
    out.push_back(',');
    append_uint(out, phrases[i].count);
    out.push_back(']');
  }
  out.append("],\"phrase_terms\":[");
  for (size_t i = 0; i < phrase_terms.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_uint(out, phrase_terms[i]);
  }
  out.push_back(']');
}

// An array of at most `max` finite, non-negative numbers.
bool get_weights(simdjson::dom::element e, size_t max, std::vector<double>& out) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) || arr.size() > max) {
    return false;
  }
  out.clear();
  for (simdjson::dom::element v : arr) {
    double d;
    if (v.get_double().get(d) || !std::isfinite(d) || d < 0) {
      return false;
    }
    out.push_back(d);
  }
  return true;
}

// "phrases": [[first, count], ...] with count >= 2.
bool get_phrases(simdjson::dom::element e, std::vector<phrase_span>& out) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) || arr.size() > max_fleet_terms / 2) {
    return false;
  }
  out.clear();
  for (simdjson::dom::element v : arr) {
    simdjson::dom::array pair;
    uint64_t first = 0, count = 0;
    if (v.get_array().get(pair) || pair.size() != 2 ||
        !get_uint(pair.at(0).value_unsafe(), max_fleet_terms, first) ||
        !get_uint(pair.at(1).value_unsafe(), max_fleet_terms, count) || count < 2) {
      return false;
    }
    out.push_back({static_cast<uint32_t>(first), static_cast<uint32_t>(count)});
  }
  return true;
}

// "phrase_terms": [term index, ...].
bool get_indices(simdjson::dom::element e, std::vector<uint32_t>& out) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) || arr.size() > max_fleet_terms) {
    return false;
  }
  out.clear();
  for (simdjson::dom::element v : arr) {
    uint64_t t;
    if (!get_uint(v, max_fleet_terms, t)) {
      return false;
    }
    out.push_back(static_cast<uint32_t>(t));
  }
  return true;
}

// The checks both requests make on terms and phrases; empty when they hold, else the message.
std::string_view check_terms_and_phrases(const fleet_scratch& f) {
  for (size_t i = 1; i < f.terms.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (f.terms[i] == f.terms[j]) {
        return "terms must be distinct.";
      }
    }
  }
  for (uint32_t t : f.phrase_terms) {
    if (t >= f.terms.size()) {
      return "phrase_terms must index terms.";
    }
  }
  for (const phrase_span& p : f.phrases) {
    if (static_cast<uint64_t>(p.first) + p.count > f.phrase_terms.size()) {
      return "phrases must lie within phrase_terms.";
    }
  }
  return {};
}

// ---- shard node ----

// POST df: {"terms":[...]} plus, when the gateway ranks by phrases too, "phrases" and
// "phrase_terms" (as in a search). Answers the node's corpus figures and one document frequency
// per term, then one per phrase.
int serve_df(const backend& b, scratch& s, fleet_scratch& f, std::string_view body,
             out_buffer& out) {
  simdjson::dom::object obj;
  if (!parse_object(f.dom, body, obj)) {
    return bad_request(out, "The body must be a JSON object.");
  }
  unsigned seen = 0;
  f.terms.clear();
  f.phrases.clear();
  f.phrase_terms.clear();
  for (simdjson::dom::key_value_pair kv : obj) {
    unsigned bit = 0;
    bool ok = true;
    if (kv.key == "terms") {
      bit = 1;
      ok = get_strings(kv.value, max_fleet_terms, max_term_bytes, f.terms);
    } else if (kv.key == "phrases") {
      bit = 2;
      ok = get_phrases(kv.value, f.phrases);
    } else if (kv.key == "phrase_terms") {
      bit = 4;
      ok = get_indices(kv.value, f.phrase_terms);
    } else {
      continue;
    }
    if (!ok) {
      return bad_request(out, fmt::format("{} has a wrong type or value.", kv.key));
    }
    if ((seen & bit) != 0) {
      return bad_request(out, fmt::format("{} appears twice.", kv.key));
    }
    seen |= bit;
  }
  if ((seen & 1) == 0) {
    return bad_request(out, "terms is required.");
  }
  if (const std::string_view why = check_terms_and_phrases(f); !why.empty()) {
    return bad_request(out, why);
  }
  f.df.assign(f.terms.size() + f.phrases.size(), 0);
  query_plan plan{};
  plan.terms = f.terms;
  plan.phrases = f.phrases;
  plan.phrase_terms = f.phrase_terms;
  if (!b.add_local_doc_freqs(plan, s, f.df.data())) {
    return unavailable(out);
  }
  const shard_stats st = b.local_stats();
  out.append("{\"docs\":");
  append_uint(out, st.docs);
  out.append(",\"title_tokens\":");
  append_uint(out, st.title_tokens);
  out.append(",\"text_tokens\":");
  append_uint(out, st.text_tokens);
  out.append(",\"df\":[");
  for (size_t i = 0; i < f.df.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_uint(out, f.df[i]);
  }
  out.append("]}");
  return 200;
}

int serve_search(const backend& b, scratch& s, fleet_scratch& f, std::string_view body,
                 out_buffer& out) {
  simdjson::dom::object obj;
  if (!parse_object(f.dom, body, obj)) {
    return bad_request(out, "The body must be a JSON object.");
  }
  enum : unsigned {
    f_terms = 1, f_idf = 2, f_phrases = 4, f_phrase_terms = 8, f_tags = 16, f_since = 32,
    f_until = 64, f_sort = 128, f_k = 256, f_phrase_idf = 512, f_avgdl = 1024
  };
  unsigned seen = 0;
  query_plan plan{};
  plan.since = std::numeric_limits<int64_t>::min();
  plan.until = std::numeric_limits<int64_t>::max();
  f.terms.clear();
  f.idf.clear();
  f.phrases.clear();
  f.phrase_terms.clear();
  f.phrase_idf.clear();
  f.tags.clear();
  for (simdjson::dom::key_value_pair kv : obj) {
    const std::string_view key = kv.key;
    const simdjson::dom::element v = kv.value;
    unsigned bit = 0;
    bool ok = true;
    if (key == "terms") {
      bit = f_terms;
      ok = get_strings(v, max_fleet_terms, max_term_bytes, f.terms);
    } else if (key == "idf") {
      bit = f_idf;
      ok = get_weights(v, max_fleet_terms, f.idf);
    } else if (key == "phrases") {
      bit = f_phrases;
      ok = get_phrases(v, f.phrases);
    } else if (key == "phrase_terms") {
      bit = f_phrase_terms;
      ok = get_indices(v, f.phrase_terms);
    } else if (key == "phrase_idf") {
      bit = f_phrase_idf;
      ok = get_weights(v, max_fleet_terms / 2, f.phrase_idf);
    } else if (key == "avgdl") {
      bit = f_avgdl;
      ok = !v.get_double().get(plan.avgdl) && std::isfinite(plan.avgdl) && plan.avgdl > 0;
    } else if (key == "tags") {
      bit = f_tags;
      ok = get_strings(v, max_tags, max_tag_bytes, f.tags);
    } else if (key == "since" || key == "until") {
      bit = key == "since" ? f_since : f_until;
      int64_t t = 0;
      ok = !v.get_int64().get(t);
      (bit == f_since ? plan.since : plan.until) = t;
    } else if (key == "sort") {
      bit = f_sort;
      std::string_view so;
      ok = !v.get_string().get(so);
      std::optional<sort_order> parsed = ok ? parse_sort(so) : std::nullopt;
      ok = parsed.has_value();
      plan.sort = parsed.value_or(sort_order::relevance);
    } else if (key == "k") {
      bit = f_k;
      uint64_t k = 0;
      ok = get_uint(v, max_k, k) && k >= 1;
      plan.k = static_cast<uint32_t>(k);
    } else {
      continue;  // unknown fields are ignored (newer gateways)
    }
    if (!ok) {
      return bad_request(out, fmt::format("{} has a wrong type or value.", key));
    }
    if ((seen & bit) != 0) {
      return bad_request(out, fmt::format("{} appears twice.", key));
    }
    seen |= bit;
  }
  constexpr unsigned required = f_terms | f_idf | f_sort | f_k;
  if ((seen & required) != required) {
    return bad_request(out, "terms, idf, sort and k are required.");
  }
  if (f.idf.size() != f.terms.size()) {
    return bad_request(out, "idf must have one entry per term.");
  }
  if ((seen & f_phrase_idf) != 0 && f.phrase_idf.size() != f.phrases.size()) {
    return bad_request(out, "phrase_idf must have one entry per phrase.");
  }
  if (const std::string_view why = check_terms_and_phrases(f); !why.empty()) {
    return bad_request(out, why);
  }
  plan.terms = f.terms;
  plan.idf = f.idf;
  plan.phrases = f.phrases;
  plan.phrase_terms = f.phrase_terms;
  plan.phrase_idf = f.phrase_idf;
  plan.tags = f.tags;
  auto r = b.search_plan(plan, s);
  if (!r) {
    return unavailable(out);
  }
  json_out j(out, false);
  out.append("{\"total\":");
  append_uint(out, r->total);
  out.append(",\"hits\":[");
  bool first = true;
  for (const hit& h : r->stories) {
    out.append(first ? "{\"key\":" : ",{\"key\":");
    first = false;
    append_double(out, h.key);
    out.append(",\"id\":");
    j.string(h.id);
    out.append(",\"story\":");
    b.render_hit(h, j);
    out.push_back('}');
  }
  out.append("]}");
  return 200;
}

int serve_story(const backend& b, std::string_view id, out_buffer& out) {
  if (id.empty()) {
    return not_found(out);
  }
  auto ref = b.find_story(id);
  if (!ref) {
    return ref.error() == errc::not_found ? not_found(out) : unavailable(out);
  }
  json_out j(out, false);
  b.render_story(*ref, j);
  return 200;
}

}  // namespace

void fleet_wire::write_story_path(std::string_view id, out_buffer& out) {
  static constexpr char hex[] = "0123456789ABCDEF";
  out.append(story_prefix);
  for (char c : id) {
    const auto u = static_cast<unsigned char>(c);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(hex[u >> 4]);
      out.push_back(hex[u & 15]);
    }
  }
}

int serve_fleet_request(const backend& b, scratch& s, std::string_view method,
                        std::string_view path, std::string_view body, out_buffer& out) {
  if (!s.fleet_) {
    s.fleet_ = std::make_unique<fleet_scratch>();
  }
  fleet_scratch& f = *s.fleet_;
  if (path == fleet_wire::df_path && method == "POST") {
    return serve_df(b, s, f, body, out);
  }
  if (path == fleet_wire::search_path && method == "POST") {
    return serve_search(b, s, f, body, out);
  }
  if (path.starts_with(fleet_wire::story_prefix) && method == "GET") {
    return serve_story(b, path.substr(fleet_wire::story_prefix.size()), out);
  }
  return not_found(out);
}

// ---- remote_query ----

remote_query::remote_query(uint32_t remotes)
    : remotes_(remotes), st_(std::make_unique<state>()) {
  arg_chars_.reserve(4096);
  story_id_.reserve(256);
  st_->term_chars.reserve(2048);
  st_->terms.reserve(max_fleet_terms);
  st_->phrases.reserve(max_fleet_terms / 2);
  st_->phrase_terms.reserve(max_fleet_terms);
  st_->local_df.reserve(max_fleet_terms);
  st_->df.reserve(max_fleet_terms);
  st_->idf.reserve(max_fleet_terms);
  st_->answers.resize(remotes);
  for (answer& a : st_->answers) {
    a.df.reserve(max_fleet_terms);
    a.chars.reserve(4096);
  }
}

remote_query::~remote_query() = default;

void remote_query::start_search(const backend& b, const query_args& args) {
  story_ = false;
  story_id_.clear();
  // copy the strings first, then point the views at the copy (it no longer moves)
  arg_chars_.clear();
  arg_chars_.append(args.query);
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    arg_chars_.append(args.tags[i]);
  }
  args_ = args;
  size_t at = 0;
  args_.query = std::string_view(arg_chars_.data() + at, args.query.size());
  at += args.query.size();
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    args_.tags[i] = std::string_view(arg_chars_.data() + at, args.tags[i].size());
    at += args.tags[i].size();
  }
  state& st = *st_;
  plan_terms(args_.query, st.term_chars, st.terms, st.phrases, st.phrase_terms, st.alone);
  st.k = std::min<uint32_t>(args.offset + args.limit, max_k);
  st.phrase_df = needs_phrase_df(st.alone, st.phrases.size(), args.sort);
  st.local_df.assign(st.terms.size() + (st.phrase_df ? st.phrases.size() : 0), 0);
  st.local_ok.assign(b.local_count(), 0);
  query_plan df_plan{};
  df_plan.terms = st.terms;
  if (st.phrase_df) {
    df_plan.phrases = st.phrases;
    df_plan.phrase_terms = st.phrase_terms;
  }
  if (!st.local_scratch) {
    st.local_scratch = b.make_scratch();
  }
  b.add_local_doc_freqs(df_plan, *st.local_scratch, st.local_df.data(), st.local_ok.data());
  st.local_stats = b.local_stats();
  st.df_done = false;
  st.df.clear();
  st.idf.clear();
  st.phrase_idf.clear();
  st.avgdl = 0;
  st.docs = 0;
  for (answer& a : st.answers) {
    a.reset();
  }
}

void remote_query::start_story(std::string_view id) {
  story_ = true;
  story_id_.assign(id);
  args_ = query_args{};
  arg_chars_.clear();
  st_->df_done = false;
  for (answer& a : st_->answers) {
    a.reset();
  }
}

void remote_query::write_df_body(out_buffer& out) const {
  json_out j(out, false);
  const state& st = *st_;
  j.raw("{\"terms\":");
  write_terms(j, st.terms);
  if (st.phrase_df) {
    write_phrases(out, st.phrases, st.phrase_terms);
  }
  j.raw("}");
}

bool remote_query::on_df(uint32_t r, int status, std::string_view body) {
  if (story_ || r >= remotes_ || st_->df_done || st_->answers[r].df_ok || status != 200) {
    return false;
  }
  answer& a = st_->answers[r];
  simdjson::dom::object obj;
  if (!parse_object(st_->dom, body, obj)) {
    return false;
  }
  unsigned seen = 0;
  shard_stats stats;
  a.df.clear();
  for (simdjson::dom::key_value_pair kv : obj) {
    unsigned bit = 0;
    bool ok = true;
    if (kv.key == "docs") {
      bit = 1;
      ok = get_uint(kv.value, max_docs, stats.docs);
    } else if (kv.key == "title_tokens") {
      bit = 2;
      ok = get_uint(kv.value, max_tokens, stats.title_tokens);
    } else if (kv.key == "text_tokens") {
      bit = 4;
      ok = get_uint(kv.value, max_tokens, stats.text_tokens);
    } else if (kv.key == "df") {
      bit = 8;
      simdjson::dom::array arr;
      ok = !kv.value.get_array().get(arr) && arr.size() == st_->local_df.size();
      if (ok) {
        for (simdjson::dom::element e : arr) {
          uint64_t v;
          if (!get_uint(e, max_docs, v)) {
            ok = false;
            break;
          }
          a.df.push_back(v);
        }
      }
    } else {
      continue;
    }
    if (!ok || (seen & bit) != 0) {
      a.df.clear();
      return false;
    }
    seen |= bit;
  }
  if (seen != 15) {
    a.df.clear();
    return false;
  }
  for (uint64_t v : a.df) {
    if (v > stats.docs) {
      a.df.clear();
      return false;
    }
  }
  a.stats = stats;
  a.df_ok = true;
  return true;
}

void remote_query::finish_df() {
  state& st = *st_;
  if (story_ || st.df_done) {
    return;
  }
  st.df.assign(st.local_df.begin(), st.local_df.end());
  shard_stats all = st.local_stats;
  for (const answer& a : st.answers) {
    if (!a.df_ok) {
      continue;
    }
    all.docs += a.stats.docs;
    all.title_tokens += a.stats.title_tokens;
    all.text_tokens += a.stats.text_tokens;
    for (size_t i = 0; i < st.df.size(); ++i) {
      st.df[i] += a.df[i];
    }
  }
  st.docs = all.docs;
  score_weights(st.docs, st.alone, st.df, st.phrases.size(), st.phrase_df, st.idf,
                st.phrase_idf);
  st.avgdl = average_length(all);
  st.df_done = true;
}

bool remote_query::needs_df() const noexcept {
  // every relevance ranking: even one term's order depends on the fleet's average length
  return !story_ && args_.sort == sort_order::relevance;
}

void remote_query::skip_df() {
  state& st = *st_;
  if (story_ || st.df_done) {
    return;
  }
  st.df.assign(st.local_df.begin(), st.local_df.end());
  st.docs = st.local_stats.docs;
  st.idf.assign(st.terms.size(), 1.0);
  st.phrase_idf.clear();
  st.avgdl = 0;
  for (answer& a : st.answers) {
    a.df_ok = true;  // phase 2 may ask every remote
  }
  st.df_done = true;
}

bool remote_query::df_ok(uint32_t r) const noexcept {
  return !story_ && r < remotes_ && st_->df_done && st_->answers[r].df_ok;
}

void remote_query::write_search_body(out_buffer& out) const {
  const state& st = *st_;
  json_out j(out, false);
  j.raw("{\"terms\":");
  write_terms(j, st.terms);
  j.raw(",\"idf\":[");
  for (size_t i = 0; i < st.idf.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_double(out, st.idf[i]);
  }
  out.push_back(']');
  write_phrases(out, st.phrases, st.phrase_terms);
  if (!st.phrase_idf.empty()) {
    out.append(",\"phrase_idf\":[");
    for (size_t i = 0; i < st.phrase_idf.size(); ++i) {
      if (i > 0) {
        out.push_back(',');
      }
      append_double(out, st.phrase_idf[i]);
    }
    out.push_back(']');
  }
  if (st.avgdl > 0) {
    out.append(",\"avgdl\":");
    append_double(out, st.avgdl);
  }
  j.raw(",\"tags\":");
  write_terms(j, std::span<const std::string_view>(args_.tags.data(), args_.tag_count));
  j.raw(",\"since\":");
  append_int(out, args_.since);
  j.raw(",\"until\":");
  append_int(out, args_.until);
  j.raw(args_.sort == sort_order::date ? ",\"sort\":\"date\",\"k\":"
                                       : ",\"sort\":\"relevance\",\"k\":");
  append_uint(out, st.k);
  j.raw("}");
}

bool remote_query::on_search(uint32_t r, int status, std::string_view body) {
  if (story_ || r >= remotes_ || !st_->df_done || !st_->answers[r].df_ok ||
      st_->answers[r].search_ok || status != 200) {
    return false;
  }
  state& st = *st_;
  answer& a = st.answers[r];
  a.hits.clear();
  a.spans.clear();
  a.chars.clear();
  // ids and stories are disjoint pieces of the body (ids unescaped, never longer): the copy
  // fits in body.size() bytes, so the views taken below never move
  a.chars.reserve(body.size());
  auto fail = [&a] {
    a.hits.clear();
    a.spans.clear();
    a.chars.clear();
    return false;
  };
  // 1. validate the whole body and take total, keys and ids
  simdjson::dom::object obj;
  if (!parse_object(st.dom, body, obj)) {
    return false;
  }
  uint64_t total = 0;
  simdjson::dom::element total_e;
  simdjson::dom::array hits;
  if (obj["total"].get(total_e) || !get_uint(total_e, max_docs, total) ||
      obj["hits"].get_array().get(hits) || hits.size() > st.k || hits.size() > total) {
    return fail();
  }
  for (simdjson::dom::element e : hits) {
    simdjson::dom::object h;
    double key;
    std::string_view id;
    simdjson::dom::object story;
    std::string_view story_id;
    if (e.get_object().get(h) || h["key"].get_double().get(key) || !std::isfinite(key) ||
        h["id"].get_string().get(id) || id.empty() || id.size() > max_term_bytes ||
        h["story"].get_object().get(story) || story["id"].get_string().get(story_id) ||
        story_id != id) {
      return fail();
    }
    hit x{};
    x.key = key;
    const size_t at = a.chars.size();
    TOLLGATE_ASSERT(at + id.size() <= a.chars.capacity());
    a.chars.append(id);
    x.id = std::string_view(a.chars.data() + at, id.size());
    x.doc = static_cast<uint32_t>(a.hits.size());
    // answers come best first, each strictly after the one before
    if (!a.hits.empty() && !hit_better(a.hits.back(), x)) {
      return fail();
    }
    a.hits.push_back(x);
  }
  // 2. cut each story's JSON out of the body as received
  simdjson::ondemand::document doc;
  simdjson::ondemand::array od_hits;
  if (st.od.iterate(simdjson::padded_string_view(body.data(), body.size(),
                                                 body.size() + simdjson::SIMDJSON_PADDING))
          .get(doc) ||
      doc["hits"].get_array().get(od_hits)) {
    return fail();
  }
  for (auto item : od_hits) {
    simdjson::ondemand::object h;
    simdjson::ondemand::object story;
    std::string_view raw;
    if (item.get_object().get(h) || h["story"].get_object().get(story) ||
        story.raw_json().get(raw) || a.spans.size() >= a.hits.size()) {
      return fail();
    }
    raw = ascii::trim(raw);
    const size_t at = a.chars.size();
    TOLLGATE_ASSERT(at + raw.size() <= a.chars.capacity());
    a.chars.append(raw);
    a.spans.emplace_back(static_cast<uint32_t>(at), static_cast<uint32_t>(raw.size()));
  }
  if (a.spans.size() != a.hits.size()) {
    return fail();
  }
  a.total = total;
  a.search_ok = true;
  return true;
}

bool remote_query::on_story(uint32_t r, int status, std::string_view body) {
  if (!story_ || r >= remotes_ || st_->answers[r].story != answer::story_state::unanswered) {
    return false;
  }
  answer& a = st_->answers[r];
  if (status == 404) {
    a.story = answer::story_state::absent;
    return true;
  }
  if (status != 200) {
    return false;
  }
  simdjson::dom::object obj;
  std::string_view id;
  if (!parse_object(st_->dom, body, obj) || obj["id"].get_string().get(id) ||
      id != story_id_) {
    return false;
  }
  const std::string_view raw = ascii::trim(body);
  a.chars.clear();
  a.chars.append(raw);
  a.spans.clear();
  a.spans.emplace_back(0, static_cast<uint32_t>(raw.size()));
  a.story = answer::story_state::found;
  return true;
}

std::span<const std::string_view> remote_query::terms() const noexcept {
  return story_ ? std::span<const std::string_view>() : std::span<const std::string_view>(st_->terms);
}

std::span<const double> remote_query::idf() const noexcept {
  return st_->df_done ? std::span<const double>(st_->idf) : std::span<const double>();
}

std::span<const double> remote_query::phrase_idf() const noexcept {
  return st_->df_done ? std::span<const double>(st_->phrase_idf) : std::span<const double>();
}

double remote_query::avgdl() const noexcept { return st_->df_done ? st_->avgdl : 0.0; }

bool remote_query::matches(const query_args& args) const noexcept {
  if (story_ || args.query != args_.query || args.limit != args_.limit ||
      args.offset != args_.offset || args.since != args_.since || args.until != args_.until ||
      args.sort != args_.sort || args.tag_count != args_.tag_count) {
    return false;
  }
  for (uint32_t i = 0; i < args.tag_count && i < max_tags; ++i) {
    if (args.tags[i] != args_.tags[i]) {
      return false;
    }
  }
  return true;
}

bool remote_query::matches_story(std::string_view id) const noexcept {
  return story_ && id == story_id_;
}

// ---- remote_health ----

remote_health::remote_health(uint32_t remotes, uint32_t failures_to_down, int64_t down_ns)
    : n_(remotes), slots_(std::make_unique<slot[]>(remotes)),
      failures_to_down_(std::max<uint32_t>(failures_to_down, 1)),
      down_ns_(std::max<int64_t>(down_ns, 1)) {}

bool remote_health::should_ask(uint32_t r, int64_t now_ns) noexcept {
  if (r >= n_) {
    return false;
  }
  // acquire pairs with the release stores in failure()/success(): a caller seeing a shard
  // up sees it as the last writer left it (the counters are advisory; no data hangs off them)
  int64_t until = slots_[r].down_until.load(std::memory_order_acquire);
  if (until == 0) {
    return true;
  }
  if (now_ns < until) {
    return false;
  }
  // the down period is over: the one caller whose CAS moves it on probes the shard
  const int64_t next = std::max<int64_t>(now_ns + down_ns_, 1);
  return slots_[r].down_until.compare_exchange_strong(until, next, std::memory_order_acq_rel,
                                                      std::memory_order_acquire);
}

void remote_health::success(uint32_t r) noexcept {
  if (r >= n_) {
    return;
  }
  slots_[r].failures.store(0, std::memory_order_release);
  slots_[r].down_until.store(0, std::memory_order_release);
}

void remote_health::failure(uint32_t r, int64_t now_ns) noexcept {
  if (r >= n_) {
    return;
  }
  const uint32_t f = slots_[r].failures.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (f >= failures_to_down_) {
    slots_[r].down_until.store(std::max<int64_t>(now_ns + down_ns_, 1),
                               std::memory_order_release);
  }
}

bool remote_health::is_down(uint32_t r, int64_t now_ns) const noexcept {
  if (r >= n_) {
    return true;
  }
  const int64_t until = slots_[r].down_until.load(std::memory_order_acquire);
  return until != 0 && now_ns < until;
}

}  // namespace tollgate::search
