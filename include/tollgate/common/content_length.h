// A Content-Length written before the body it counts. The head goes out first with
// "Content-Length:" and a field of spaces; once the body is in the buffer its length is written
// into the field, right-aligned. The spaces before the digits are the OWS that RFC 9112 allows
// after the colon (field-line = field-name ":" OWS field-value OWS), which every parser skips,
// so the body is framed without moving it. Used by the envelope cache and http::begin_response.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "tollgate/common/buffer.h"

namespace tollgate {

/// Where reserve_content_length() left its field: offsets, valid across buffer growth.
struct content_length_field {
  size_t at = 0;     ///< offset of the first space after "Content-Length:"
  size_t width = 0;  ///< spaces reserved
};

/// Appends "Content-Length:", `width` spaces (`width` >= 2) and then `then` (e.g. the CRLF CRLF
/// that ends the head), in one write. Inline: it is on every response's path.
inline content_length_field reserve_content_length(out_buffer& out, size_t width,
                                                   std::string_view then = {}) {
  constexpr std::string_view kName = "Content-Length:";
  char* p = out.prepare(kName.size() + width + then.size());
  std::memcpy(p, kName.data(), kName.size());
  std::memset(p + kName.size(), ' ', width);
  if (!then.empty()) {
    std::memcpy(p + kName.size() + width, then.data(), then.size());
  }
  const content_length_field f{out.size() + kName.size(), width};
  out.commit(kName.size() + width + then.size());
  return f;
}

/// The rare case of patch_content_length(): widens the field to one space and `n` digits.
void widen_content_length(out_buffer& out, content_length_field f, const char* digits, size_t n);

/// Writes `length` right-aligned into `f`, at least one space before the digits. A length with
/// `f.width` digits or more (10 MB for a width of 8) widens the field to one space and the
/// digits, moving every byte after it right: correct, and never on the common path.
inline void patch_content_length(out_buffer& out, content_length_field f, uint64_t length) {
  const fmt::format_int digits(static_cast<unsigned long long>(length));
  if (digits.size() < f.width) {
    std::memcpy(out.data() + f.at + f.width - digits.size(), digits.data(), digits.size());
    return;
  }
  widen_content_length(out, f, digits.data(), digits.size());
}

}  // namespace tollgate
