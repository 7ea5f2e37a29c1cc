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
inline constexpr uint64_t max_docs = uint64_t{1} << 40;
inline constexpr uint64_t max_tokens = uint64_t{1} << 52;
// Longest term or id accepted (bytes): a query is at most 500 code points.
inline constexpr size_t max_term_bytes = 4 * max_query_chars;
inline constexpr size_t max_tag_bytes = 4 * max_tag_chars;

void append_double(out_buffer& out, double v);
void append_int(out_buffer& out, int64_t v);
void append_uint(out_buffer& out, uint64_t v);
/// The numbers comma-separated, without brackets (doubles with 17 significant digits).
void append_list(out_buffer& out, std::span<const uint64_t> v);
void append_list(out_buffer& out, std::span<const uint32_t> v);
void append_list(out_buffer& out, std::span<const double> v);

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
