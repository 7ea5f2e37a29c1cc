// search::query_args: the one typed input of a story search, filled either from validated MCP
// tool arguments (JSON) or from a REST query string (query_string_parser below), plus the
// validation both surfaces share so their error messages name the same argument and rule.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/common/result.h"

namespace tollgate::search {

enum class sort_order : uint8_t { relevance, date };

inline constexpr uint32_t max_query_chars = 500;  ///< code points
inline constexpr uint32_t max_limit = 50;
inline constexpr uint32_t default_limit = 10;
inline constexpr uint32_t max_offset = 1000;
inline constexpr uint32_t max_tags = 16;
inline constexpr uint32_t max_tag_chars = 64;
/// Quoted phrases of two or more words in one query. Each one's matches are counted with a full
/// positional scan of its words' postings (its idf, as FTS5 ranks it), so a query of many phrases
/// of common words would hold a core for a long time; real queries hold one or two.
inline constexpr uint32_t max_phrases = 8;

/// The arguments of search_stories (design §4). String views point into caller-owned memory
/// (the request buffer or the parser's decode buffer) and must outlive the search call.
struct query_args {
  std::string_view query;                               ///< 1..500 code points of valid UTF-8
  uint32_t limit = default_limit;                       ///< 1..50
  uint32_t offset = 0;                                  ///< 0..1000
  int64_t since = std::numeric_limits<int64_t>::min();  ///< unix seconds, inclusive
  int64_t until = std::numeric_limits<int64_t>::max();  ///< unix seconds, inclusive
  sort_order sort = sort_order::relevance;
  std::array<std::string_view, max_tags> tags{};  ///< a story must carry every tag (exact match)
  uint32_t tag_count = 0;

  /// Adds a tag; false when max_tags are already set (report it as a `tags` error).
  bool add_tag(std::string_view t) noexcept {
    if (tag_count >= max_tags) {
      return false;
    }
    tags[tag_count++] = t;
    return true;
  }
};

/// Which argument is wrong and the rule it breaks; both are static strings except `argument`
/// for an unknown REST parameter, which points into the parser's decode buffer.
struct arg_error {
  std::string_view argument;
  std::string_view rule;
};

/// Checks ranges that a JSON schema cannot express or that the REST parser leaves to it: query
/// length in code points and UTF-8 validity, its phrase count, limit, offset, tag count and
/// lengths, since <= until.
result<void, arg_error> validate(const query_args& args) noexcept;

/// Quoted runs of two or more words in `query`, counted as the search plans them (a quoted
/// single word is a plain term; an unclosed quote runs to the end).
uint32_t count_phrases(std::string_view query) noexcept;

/// The last second of year 9999: the latest time since/until accept, in either form, on every
/// surface.
inline constexpr int64_t max_unix_time = 253402300799;

/// Parses unix seconds ("1700000000", 0 .. max_unix_time) or an RFC 3339 date-time
/// ("2024-05-01T12:00:00Z", offsets and fractions allowed; fractions are dropped) or a full-date
/// ("2024-05-01", midnight UTC). Returns nullopt for anything else or years outside 1970..9999.
std::optional<int64_t> parse_time(std::string_view s) noexcept;

/// Parses "relevance" | "date".
std::optional<sort_order> parse_sort(std::string_view s) noexcept;

/// Rules as text, shared with the MCP schema validation so both surfaces say the same thing.
namespace rules {
inline constexpr std::string_view query = "must be a string of 1 to 500 characters";
inline constexpr std::string_view query_utf8 = "must be valid UTF-8";
inline constexpr std::string_view query_phrases =
    "must hold at most 8 quoted phrases of two or more words";
inline constexpr std::string_view required = "is required";
inline constexpr std::string_view limit = "must be an integer from 1 to 50";
inline constexpr std::string_view offset = "must be an integer from 0 to 1000";
inline constexpr std::string_view time =
    "must be unix seconds or an RFC 3339 date-time such as 2024-05-01T00:00:00Z";
inline constexpr std::string_view time_order = "must not be earlier than since";
inline constexpr std::string_view sort = "must be \"relevance\" or \"date\"";
inline constexpr std::string_view tags = "must be at most 16 tags of 1 to 64 characters each";
inline constexpr std::string_view unknown = "is not a known argument";
/// An unknown parameter whose name is not UTF-8: the error names it by this instead, so the
/// answer stays valid JSON.
inline constexpr std::string_view unknown_name_not_utf8 = "(a name that is not valid UTF-8)";
inline constexpr std::string_view repeated = "must appear at most once";
inline constexpr std::string_view encoding = "has an invalid percent-encoding";
}  // namespace rules

/// Parses the query string of `GET /v1/stories?...` (without the '?'): q, limit, offset, since,
/// until, sort, tags (repeated and/or comma-separated). Percent-decodes ('+' is a space) into a
/// buffer it owns and reuses, then validates. Errors name the REST parameter ("q" for the
/// query). Unknown and repeated single-valued parameters are errors. Core-local: one per core.
/// The views in the returned args stay valid until the next parse() call.
class query_string_parser {
 public:
  query_string_parser() { decoded_.reserve(4096); }
  result<void, arg_error> parse(std::string_view qs, query_args& out);

 private:
  out_buffer decoded_;
};

}  // namespace tollgate::search
