// fleet_json: see fleet_json.h. Also the wire's story request-target (fleet_wire.h).
#include "search/fleet_json.h"

#include <fmt/format.h>

#include <cmath>
#include <type_traits>

#include "tollgate/common/percent.h"
#include "tollgate/search/fleet_wire.h"

namespace tollgate::search {

namespace fleet_json {

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

bool get_strings(simdjson::dom::element e, size_t max, size_t max_bytes,
                 std::vector<std::string_view>& out) {
  return get_array(e, max, out, [max_bytes](simdjson::dom::element v, std::string_view& s) {
    return !v.get_string().get(s) && !s.empty() && s.size() <= max_bytes;
  });
}

template <typename T>
void append_numbers(out_buffer& out, std::span<const T> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    if constexpr (std::is_same_v<T, double>) {
      append_double(out, v[i]);
    } else {
      append_uint(out, v[i]);
    }
  }
}

void append_list(out_buffer& out, std::span<const uint64_t> v) { append_numbers(out, v); }
void append_list(out_buffer& out, std::span<const uint32_t> v) { append_numbers(out, v); }
void append_list(out_buffer& out, std::span<const double> v) { append_numbers(out, v); }

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
  append_list(out, phrase_terms);
  out.push_back(']');
}

bool get_weights(simdjson::dom::element e, size_t max, std::vector<double>& out) {
  return get_array(e, max, out, [](simdjson::dom::element v, double& d) {
    return !v.get_double().get(d) && std::isfinite(d) && d >= 0;
  });
}

bool get_phrases(simdjson::dom::element e, std::vector<phrase_span>& out) {
  return get_array(e, kMaxFleetTerms / 2, out, [](simdjson::dom::element v, phrase_span& p) {
    simdjson::dom::array pair;
    uint64_t first = 0, count = 0;
    if (v.get_array().get(pair) || pair.size() != 2 ||
        !get_uint(pair.at(0).value_unsafe(), kMaxFleetTerms, first) ||
        !get_uint(pair.at(1).value_unsafe(), kMaxFleetTerms, count) || count < 2) {
      return false;
    }
    p = {static_cast<uint32_t>(first), static_cast<uint32_t>(count)};
    return true;
  });
}

bool get_indices(simdjson::dom::element e, std::vector<uint32_t>& out) {
  return get_array(e, kMaxFleetTerms, out, [](simdjson::dom::element v, uint32_t& i) {
    uint64_t t;
    if (!get_uint(v, kMaxFleetTerms, t)) {
      return false;
    }
    i = static_cast<uint32_t>(t);
    return true;
  });
}

}  // namespace fleet_json

void fleet_wire::write_story_path(std::string_view id, out_buffer& out) {
  out.append(story_prefix);
  percent_encode(id, out);
}

}  // namespace tollgate::search
