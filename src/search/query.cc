// query_args validation, time parsing and the REST query-string parser.
#include "tollgate/search/query.h"

#include "search/decimal.h"
#include "tollgate/common/percent.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

// At most 19 digits: no REST argument needs more.
bool parse_uint(std::string_view s, uint64_t max, uint64_t& out) noexcept {
  return s.size() <= 19 && parse_decimal(s, max, out);
}

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t days_from_civil(int64_t y, unsigned m, unsigned d) noexcept {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

bool digits(std::string_view s, size_t at, size_t n, unsigned& out) noexcept {
  if (at + n > s.size()) {
    return false;
  }
  unsigned v = 0;
  for (size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
    v = v * 10 + static_cast<unsigned>(s[i] - '0');
  }
  out = v;
  return true;
}

}  // namespace

std::optional<int64_t> parse_time(std::string_view s) noexcept {
  if (s.empty()) {
    return std::nullopt;
  }
  if (s.find_first_not_of("0123456789") == std::string_view::npos) {
    uint64_t v;
    if (!parse_uint(s, static_cast<uint64_t>(max_unix_time), v)) {
      return std::nullopt;
    }
    return static_cast<int64_t>(v);
  }
  unsigned y, mo, d, h = 0, mi = 0, sec = 0;
  if (!digits(s, 0, 4, y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d)) {
    return std::nullopt;
  }
  if (y < 1970 || mo < 1 || mo > 12 || d < 1) {
    return std::nullopt;
  }
  static constexpr unsigned mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (d > mdays[mo - 1] + (mo == 2 && leap ? 1 : 0)) {
    return std::nullopt;
  }
  int64_t offset = 0;
  if (s.size() > 10) {
    char t = s[10];
    if (t != 'T' && t != 't' && t != ' ') {
      return std::nullopt;
    }
    if (!digits(s, 11, 2, h) || s.size() < 19 || s[13] != ':' || !digits(s, 14, 2, mi) ||
        s[16] != ':' || !digits(s, 17, 2, sec)) {
      return std::nullopt;
    }
    if (h > 23 || mi > 59 || sec > 60) {  // 60: leap second, counted as :59 + 1
      return std::nullopt;
    }
    size_t i = 19;
    if (i < s.size() && s[i] == '.') {
      ++i;
      size_t start = i;
      while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
        ++i;
      }
      if (i == start) {
        return std::nullopt;
      }
    }
    if (i >= s.size()) {
      return std::nullopt;  // RFC 3339 requires an offset
    }
    if (s[i] == 'Z' || s[i] == 'z') {
      ++i;
    } else if (s[i] == '+' || s[i] == '-') {
      unsigned oh, om;
      if (!digits(s, i + 1, 2, oh) || i + 3 >= s.size() || s[i + 3] != ':' ||
          !digits(s, i + 4, 2, om) || oh > 23 || om > 59) {
        return std::nullopt;
      }
      offset = (s[i] == '+' ? 1 : -1) * static_cast<int64_t>(oh * 3600 + om * 60);
      i += 6;
    } else {
      return std::nullopt;
    }
    if (i != s.size()) {
      return std::nullopt;
    }
  }
  int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset;
  if (t < 0) {
    return std::nullopt;
  }
  return t;
}

std::optional<sort_order> parse_sort(std::string_view s) noexcept {
  if (s == "relevance") {
    return sort_order::relevance;
  }
  if (s == "date") {
    return sort_order::date;
  }
  return std::nullopt;
}

uint32_t count_phrases(std::string_view q) noexcept {
  uint32_t n = 0;
  bool in_quotes = false;
  for (;;) {
    const size_t quote = q.find('"');
    if (in_quotes) {
      token_stream ts(q.substr(0, quote));
      std::string_view tok;
      int words = 0;
      while (words < 2 && ts.next(tok)) {
        ++words;
      }
      n += words >= 2;
    }
    if (quote == std::string_view::npos) {
      return n;
    }
    q.remove_prefix(quote + 1);
    in_quotes = !in_quotes;
  }
}

result<void, arg_error> validate(const query_args& a) noexcept {
  int64_t len = utf8_length(a.query);
  if (len < 0) {
    return unexpected(arg_error{"query", rules::query_utf8});
  }
  if (len < 1 || len > max_query_chars) {
    return unexpected(arg_error{"query", rules::query});
  }
  if (count_phrases(a.query) > max_phrases) {
    return unexpected(arg_error{"query", rules::query_phrases});
  }
  if (a.limit < 1 || a.limit > max_limit) {
    return unexpected(arg_error{"limit", rules::limit});
  }
  if (a.offset > max_offset) {
    return unexpected(arg_error{"offset", rules::offset});
  }
  if (a.tag_count > max_tags) {
    return unexpected(arg_error{"tags", rules::tags});
  }
  for (uint32_t i = 0; i < a.tag_count; ++i) {
    int64_t tl = utf8_length(a.tags[i]);
    if (tl < 1 || tl > max_tag_chars) {
      return unexpected(arg_error{"tags", rules::tags});
    }
  }
  if (a.since > a.until) {
    return unexpected(arg_error{"until", rules::time_order});
  }
  return {};
}

namespace {

// The REST parameters: each but tags at most once (its bit in `seen`; 0: may repeat).
enum qs_bit : unsigned {
  qs_q = 1,
  qs_limit = 2,
  qs_offset = 4,
  qs_since = 8,
  qs_until = 16,
  qs_sort = 32
};

struct qs_param {
  std::string_view name;
  unsigned bit;
  std::string_view arg;  // canonical argument name
};

constexpr qs_param qs_params[] = {
    {"q", qs_q, "q"},
    {"limit", qs_limit, "limit"},
    {"offset", qs_offset, "offset"},
    {"since", qs_since, "since"},
    {"until", qs_until, "until"},
    {"sort", qs_sort, "sort"},
    {"tags", 0, "tags"},
    {"tag", 0, "tags"},
};

const qs_param* find_param(std::string_view name) noexcept {
  for (const qs_param& p : qs_params) {
    if (p.name == name) {
      return &p;
    }
  }
  return nullptr;
}

// Sets parameter `p`'s argument in `out` from its decoded value (views into the parser's
// buffer).
result<void, arg_error> apply_param(const qs_param& p, std::string_view value, query_args& out) {
  const std::string_view arg = p.arg;
  uint64_t v;
  switch (p.bit) {
    case qs_q:
      out.query = value;
      break;
    case qs_limit:
      if (!parse_uint(value, max_limit, v) || v < 1) {
        return unexpected(arg_error{arg, rules::limit});
      }
      out.limit = static_cast<uint32_t>(v);
      break;
    case qs_offset:
      if (!parse_uint(value, max_offset, v)) {
        return unexpected(arg_error{arg, rules::offset});
      }
      out.offset = static_cast<uint32_t>(v);
      break;
    case qs_since:
    case qs_until: {
      auto t = parse_time(value);
      if (!t) {
        return unexpected(arg_error{arg, rules::time});
      }
      (p.bit == qs_since ? out.since : out.until) = *t;
      break;
    }
    case qs_sort: {
      auto s = parse_sort(value);
      if (!s) {
        return unexpected(arg_error{arg, rules::sort});
      }
      out.sort = *s;
      break;
    }
    default:  // tags: repeated and/or comma-separated
      while (true) {
        size_t comma = value.find(',');
        std::string_view tag = value.substr(0, comma);
        if (tag.empty() || !out.add_tag(tag)) {
          return unexpected(arg_error{arg, rules::tags});
        }
        if (comma == std::string_view::npos) {
          break;
        }
        value.remove_prefix(comma + 1);
      }
      break;
  }
  return {};
}

}  // namespace

result<void, arg_error> query_string_parser::parse(std::string_view qs, query_args& out) {
  out = query_args{};
  decoded_.clear();
  // Decoded text never outgrows its source, so reserving once keeps every view valid.
  decoded_.reserve(qs.size() + 1);
  unsigned seen = 0;
  while (!qs.empty()) {
    size_t amp = qs.find('&');
    std::string_view pair = qs.substr(0, amp);
    qs = amp == std::string_view::npos ? std::string_view() : qs.substr(amp + 1);
    if (pair.empty()) {
      continue;
    }
    size_t eq = pair.find('=');
    std::string_view raw_name = pair.substr(0, eq);
    std::string_view raw_value =
        eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    size_t at = decoded_.size();
    if (!percent_decode(raw_name, decoded_, /*plus_is_space=*/true)) {
      return unexpected(arg_error{"query string", rules::encoding});
    }
    std::string_view name(decoded_.data() + at, decoded_.size() - at);
    const qs_param* p = find_param(name);
    if (p == nullptr) {
      return unexpected(
          arg_error{utf8_length(name) < 0 ? rules::unknown_name_not_utf8 : name, rules::unknown});
    }
    if (p->bit != 0) {
      if ((seen & p->bit) != 0) {
        return unexpected(arg_error{p->arg, rules::repeated});
      }
      seen |= p->bit;
    }
    at = decoded_.size();
    if (!percent_decode(raw_value, decoded_, /*plus_is_space=*/true)) {
      return unexpected(arg_error{p->arg, rules::encoding});
    }
    if (auto r = apply_param(*p, std::string_view(decoded_.data() + at, decoded_.size() - at), out);
        !r) {
      return r;
    }
  }
  if ((seen & qs_q) == 0) {
    return unexpected(arg_error{"q", rules::required});
  }
  auto r = validate(out);
  if (!r && r.error().argument == "query") {
    return unexpected(arg_error{"q", r.error().rule});  // the REST name of the argument
  }
  return r;
}

}  // namespace tollgate::search
