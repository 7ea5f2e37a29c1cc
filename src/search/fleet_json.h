// fleet_json: the JSON pieces both ends of the fleet write and read (shard_node.cc,
// remote_query.cc): number output, and the DOM readers that bound what a remote may send.
// Private to src/search.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "search/fleet_impl.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"

namespace tollgate::search::fleet_json {

// Bounds on numbers from a remote, far above any real corpus, so sums cannot overflow.
inline constexpr uint64_t kMaxDocs = uint64_t{1} << 40;
inline constexpr uint64_t kMaxTokens = uint64_t{1} << 52;
// Longest term or id accepted (bytes): a query is at most 500 code points.
inline constexpr size_t kMaxTermBytes = 4 * max_query_chars;
inline constexpr size_t kMaxTagBytes = 4 * max_tag_chars;

void append_double(out_buffer& out, double v);
void append_int(out_buffer& out, int64_t v);
void append_uint(out_buffer& out, uint64_t v);
/// The numbers comma-separated, without brackets (doubles with 17 significant digits).
void append_list(out_buffer& out, std::span<const uint64_t> v);
void append_list(out_buffer& out, std::span<const uint32_t> v);
void append_list(out_buffer& out, std::span<const double> v);

/// An array of at most `max` elements, each read by `one(element, T&)` (false: refused), into
/// `out` (cleared first).
template <typename T, typename One>
bool get_array(simdjson::dom::element e, size_t max, std::vector<T>& out, One one) {
  simdjson::dom::array arr;
  if (e.get_array().get(arr) || arr.size() > max) {
    return false;
  }
  out.clear();
  for (simdjson::dom::element v : arr) {
    T x;
    if (!one(v, x)) {
      return false;
    }
    out.push_back(x);
  }
  return true;
}

/// How reading an object's fields went: every known field once with a good value, or the first
/// that was not (its key and why).
struct fields_read {
  enum class problem : uint8_t { none, bad_value, twice };
  problem why = problem::none;
  std::string_view key;
  explicit operator bool() const noexcept { return why == problem::none; }
};

/// Reads the fields of `obj` in order with `read(key, value, ok)`, which returns the field's bit
/// (0: an unknown field, skipped) and clears `ok` for a bad value; `seen` gets the bits read.
template <typename Read>
fields_read read_fields(simdjson::dom::object obj, unsigned& seen, Read read) {
  seen = 0;
  for (simdjson::dom::key_value_pair kv : obj) {
    bool ok = true;
    const unsigned bit = read(kv.key, kv.value, ok);
    if (bit == 0) {
      continue;
    }
    if (!ok) {
      return {fields_read::problem::bad_value, kv.key};
    }
    if ((seen & bit) != 0) {
      return {fields_read::problem::twice, kv.key};
    }
    seen |= bit;
  }
  return {};
}

/// Parses a padded body as one JSON object.
bool parse_object(simdjson::dom::parser& p, std::string_view body, simdjson::dom::object& obj);
/// An unsigned integer of at most `max`.
bool get_uint(simdjson::dom::element e, uint64_t max, uint64_t& out);
/// An array of at most `max` strings of 1..max_bytes bytes, into `out` (views into the parser).
bool get_strings(simdjson::dom::element e, size_t max, size_t max_bytes,
                 std::vector<std::string_view>& out);
/// An array of at most `max` finite, non-negative numbers.
bool get_weights(simdjson::dom::element e, size_t max, std::vector<double>& out);
/// "phrases": [[first, count], ...] with count >= 2.
bool get_phrases(simdjson::dom::element e, std::vector<phrase_span>& out);
/// "phrase_terms": [term index, ...].
bool get_indices(simdjson::dom::element e, std::vector<uint32_t>& out);

/// ["t",...]
void write_terms(json_out& j, std::span<const std::string_view> terms);
/// ,"phrases":[[first,count],...],"phrase_terms":[...]
void write_phrases(out_buffer& out, std::span<const phrase_span> phrases,
                   std::span<const uint32_t> phrase_terms);

}  // namespace tollgate::search::fleet_json
