// Tokenizer: see tokenizer.h for the rules. Decodes UTF-8 strictly (RFC 3629), so invalid input
// can only shorten tokens, never corrupt them.
#include "tollgate/search/tokenizer.h"

#include <cstring>

namespace tollgate::search {
namespace {

// Folding of U+00C0..U+017F. Lower-case letter: that letter; upper-case letter: a digraph
// (A=ae, T=th, S=ss, J=ij, O=oe); '_' : not a letter (x and / signs), a separator.
constexpr char fold_table[] =
    "aaaaaaAceeeeiiiidnooooo_ouuuuyTSaaaaaaAceeeeiiiidnooooo_ouuuuyTy"     // U+00C0..U+00FF
    "aaaaaaccccccccddddeeeeeeeeeegggggggghhhhiiiiiiiiiiJJjjkkkllllllllll"  // U+0100..U+0142
    "nnnnnnnnnooooooOOrrrrrrssssssssttttttuuuuuuuuuuuuwwyyyzzzzzzs";       // U+0143..U+017F
static_assert(sizeof(fold_table) - 1 == 0x180 - 0xC0);

// Decodes one code point at p (p < end). Returns its length in bytes, or 0 if the bytes at p do
// not start a valid sequence.
size_t decode(const unsigned char* p, const unsigned char* end, uint32_t& cp) noexcept {
  unsigned char c = p[0];
  size_t avail = static_cast<size_t>(end - p);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  size_t n;
  uint32_t min;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
    cp = c & 0x1F;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    cp = c & 0x0F;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    cp = c & 0x07;
    min = 0x10000;
  } else {
    return 0;
  }
  if (avail < n) {
    return 0;
  }
  for (size_t i = 1; i < n; ++i) {
    if ((p[i] & 0xC0) != 0x80) {
      return 0;
    }
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return n;
}

// True for non-ASCII code points outside the folding range that count as separators:
// Latin-1 controls, punctuation and symbols; general punctuation through misc symbols and arrows;
// CJK punctuation; specials; full-width ASCII punctuation; emoji and pictographs.
bool is_separator(uint32_t cp) noexcept {
  return cp < 0xC0 || (cp >= 0x2000 && cp <= 0x2BFF) || (cp >= 0x3000 && cp <= 0x303F) ||
         (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
         (cp >= 0xFF1A && cp <= 0xFF20) || (cp >= 0xFFF0 && cp <= 0xFFFF) || cp == 0xFEFF ||
         (cp >= 0x1F000 && cp <= 0x1FAFF);
}

// Writes a Latin-1/Latin Extended-A letter's folded form (fold_table's entry: one ASCII letter,
// or a ligature code for two) to `out`; returns its length.
inline size_t fold_latin(char f, char* out) noexcept {
  switch (f) {
    case 'A':
      out[0] = 'a';
      out[1] = 'e';
      return 2;
    case 'T':
      out[0] = 't';
      out[1] = 'h';
      return 2;
    case 'S':
      out[0] = 's';
      out[1] = 's';
      return 2;
    case 'J':
      out[0] = 'i';
      out[1] = 'j';
      return 2;
    case 'O':
      out[0] = 'o';
      out[1] = 'e';
      return 2;
    default:
      out[0] = f;
      return 1;
  }
}

}  // namespace

bool token_stream::next(std::string_view& token) noexcept {
  size_t len = 0;
  bool full = false;  // the token reached max_token_bytes; the rest of the word is dropped
  while (p_ < end_) {
    unsigned char c = *p_;
    if (c < 0x80) {
      char out;
      if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
        out = static_cast<char>(c);
      } else if (c >= 'A' && c <= 'Z') {
        out = static_cast<char>(c + ('a' - 'A'));
      } else {
        ++p_;
        if (len > 0) {
          break;
        }
        continue;
      }
      ++p_;
      if (!full) {
        if (len < max_token_bytes) {
          buf_[len++] = out;
        } else {
          full = true;
        }
      }
      continue;
    }
    uint32_t cp = 0;
    size_t n = decode(p_, end_, cp);
    if (n == 0 || (cp < 0x180 ? (cp < 0xC0 || fold_table[cp - 0xC0] == '_') : is_separator(cp))) {
      p_ += n == 0 ? 1 : n;
      if (len > 0) {
        break;
      }
      continue;
    }
    // A word character: folded (1 or 2 ASCII bytes) or copied verbatim (n bytes).
    char tmp[4];
    size_t w = 0;
    if (cp < 0x180) {
      w = fold_latin(fold_table[cp - 0xC0], tmp);
    } else {
      std::memcpy(tmp, p_, n);
      w = n;
    }
    p_ += n;
    if (!full) {
      if (len + w <= max_token_bytes) {
        std::memcpy(buf_ + len, tmp, w);
        len += w;
      } else {
        full = true;
      }
    }
  }
  if (len == 0) {
    return false;
  }
  token = std::string_view(buf_, len);
  return true;
}

int64_t utf8_length(std::string_view s) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  int64_t count = 0;
  while (p < end) {
    if (*p < 0x80) {
      ++p;
    } else {
      uint32_t cp;
      size_t n = decode(p, end, cp);
      if (n == 0) {
        return -1;
      }
      p += n;
    }
    ++count;
  }
  return count;
}

}  // namespace tollgate::search
