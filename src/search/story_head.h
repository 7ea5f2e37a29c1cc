// A stored story's head: everything of it but the text, in one run of bytes, so that the
// per-doc record (local_shard::doc_rec) is only where the head is, the text's length and
// where its tags start. Layout (index format 6):
//
//   varint id_len, id, escape byte, varint title_len, url_len, by_len,
//   zigzag varint score, comments, title, url, by
//
// The id comes first so that id() reads one varint. The escape byte holds local_shard's
// kEscape* bits (which fields need JSON escaping) and kTextRaw; it is the one byte rewritten in
// place (pack_stories sets kTextRaw on its own copy). Lengths are LEB128, at most 5 bytes;
// the numbers at most 10. A head is read unchecked on the query path: heads are written by
// put_head(), and a loaded file's are checked whole at load (check_head).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tollgate::search::detail {

struct story_head {
  std::string_view id, title, url, by;
  uint32_t escape = 0;
  uint32_t escape_at = 0;  // the escape byte's place in the head
  int64_t score = 0, comments = 0;
  uint32_t size = 0;  // the head's bytes: the text (before seal) or the next head follows
};

inline size_t varint_size(uint64_t v) noexcept {
  size_t n = 1;
  for (; v >= 0x80; v >>= 7) {
    ++n;
  }
  return n;
}
inline uint64_t zigzag(int64_t v) noexcept {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) noexcept {
  return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
}
inline char* put_varint64(char* p, uint64_t v) noexcept {
  for (; v >= 0x80; v >>= 7) {
    *p++ = static_cast<char>(static_cast<uint8_t>(v | 0x80));
  }
  *p++ = static_cast<char>(static_cast<uint8_t>(v));
  return p;
}

/// The bytes put_head() writes for these fields.
inline size_t head_size(std::string_view id, std::string_view title, std::string_view url,
                        std::string_view by, int64_t score, int64_t comments) noexcept {
  return varint_size(id.size()) + id.size() + 1 + varint_size(title.size()) +
         varint_size(url.size()) + varint_size(by.size()) + varint_size(zigzag(score)) +
         varint_size(zigzag(comments)) + title.size() + url.size() + by.size();
}

/// Writes a head at p (room for head_size() bytes); returns the byte past it.
inline char* put_head(char* p, std::string_view id, std::string_view title, std::string_view url,
                      std::string_view by, uint32_t escape, int64_t score,
                      int64_t comments) noexcept {
  auto put = [&p](std::string_view s) {
    if (!s.empty()) {
      std::memcpy(p, s.data(), s.size());
    }
    p += s.size();
  };
  p = put_varint64(p, id.size());
  put(id);
  *p++ = static_cast<char>(static_cast<uint8_t>(escape));
  p = put_varint64(p, title.size());
  p = put_varint64(p, url.size());
  p = put_varint64(p, by.size());
  p = put_varint64(p, zigzag(score));
  p = put_varint64(p, zigzag(comments));
  put(title);
  put(url);
  put(by);
  return p;
}

// Reads a varint at p below end, at most `max_bytes` long; false when it runs past end or is
// longer (check_head's reader; get_varint below reads heads already checked).
inline bool take_varint(const char*& p, const char* end, size_t max_bytes, uint64_t& v) noexcept {
  v = 0;
  for (size_t i = 0; i < max_bytes && p < end; ++i) {
    const uint8_t c = static_cast<uint8_t>(*p++);
    v |= static_cast<uint64_t>(c & 0x7F) << (7 * i);
    if (c < 0x80) {
      return true;
    }
  }
  return false;
}

// One varint of a head already checked (or written here): a length or a number's first byte
// is nearly always below 0x80, so that case is one load and one compare.
[[gnu::always_inline]] inline uint64_t get_varint(const char*& p) noexcept {
  uint8_t c = static_cast<uint8_t>(*p++);
  if (c < 0x80) [[likely]] {
    return c;
  }
  uint64_t v = c & 0x7F;
  for (int shift = 7;; shift += 7) {
    c = static_cast<uint8_t>(*p++);
    v |= static_cast<uint64_t>(c & 0x7F) << shift;
    if (c < 0x80) {
      return v;
    }
  }
}

/// The id alone: one varint and the bytes after it.
inline std::string_view head_id(const char* p) noexcept {
  const size_t n = static_cast<size_t>(get_varint(p));
  return {p, n};
}

/// Reads the head in [p, end): false unless it is exactly one well-formed head (lengths of at
/// most 32 bits, the fields inside it, nothing after it).
inline bool check_head(const char* p, const char* end, story_head& h) noexcept {
  const char* const start = p;
  uint64_t id_len = 0, len[3] = {0, 0, 0}, num[2] = {0, 0};
  if (!take_varint(p, end, 5, id_len) || id_len > static_cast<uint64_t>(end - p)) {
    return false;
  }
  h.id = {p, static_cast<size_t>(id_len)};
  p += id_len;
  if (p == end) {
    return false;
  }
  h.escape_at = static_cast<uint32_t>(p - start);
  h.escape = static_cast<uint8_t>(*p++);
  for (uint64_t& l : len) {
    if (!take_varint(p, end, 5, l) || l > UINT32_MAX) {
      return false;
    }
  }
  for (uint64_t& v : num) {
    if (!take_varint(p, end, 10, v)) {
      return false;
    }
  }
  if (len[0] + len[1] + len[2] != static_cast<uint64_t>(end - p)) {
    return false;
  }
  h.score = unzigzag(num[0]);
  h.comments = unzigzag(num[1]);
  h.title = {p, static_cast<size_t>(len[0])};
  p += len[0];
  h.url = {p, static_cast<size_t>(len[1])};
  p += len[1];
  h.by = {p, static_cast<size_t>(len[2])};
  p += len[2];
  h.size = static_cast<uint32_t>(p - start);
  return true;
}

/// Reads a head put_head() wrote (or check_head() passed).
inline story_head read_head(const char* p) noexcept {
  story_head h;
  const char* const start = p;
  const size_t id_len = static_cast<size_t>(get_varint(p));
  h.id = {p, id_len};
  p += id_len;
  h.escape_at = static_cast<uint32_t>(p - start);
  h.escape = static_cast<uint8_t>(*p++);
  const size_t title_len = static_cast<size_t>(get_varint(p));
  const size_t url_len = static_cast<size_t>(get_varint(p));
  const size_t by_len = static_cast<size_t>(get_varint(p));
  h.score = unzigzag(get_varint(p));
  h.comments = unzigzag(get_varint(p));
  h.title = {p, title_len};
  p += title_len;
  h.url = {p, url_len};
  p += url_len;
  h.by = {p, by_len};
  p += by_len;
  h.size = static_cast<uint32_t>(p - start);
  return h;
}

}  // namespace tollgate::search::detail
