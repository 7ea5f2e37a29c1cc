// A Content-Length written before the body it counts. The head goes out first with
// "Content-Length:" and a field of spaces; once the body is in the buffer its length is written
// into the field, right-aligned. The spaces before the digits are the OWS that RFC 9112 allows
// after the colon (field-line = field-name ":" OWS field-value OWS), which every parser skips,
// so the body is framed without moving it. Used by the envelope cache and http::begin_response.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tollgate/common/buffer.h"

namespace tollgate {

/// Where reserve_content_length() left its field: offsets, valid across buffer growth.
struct content_length_field {
  size_t at = 0;     ///< offset of the first space after "Content-Length:"
  size_t width = 0;  ///< spaces reserved
};

/// Appends "Content-Length:" and `width` spaces (no CRLF). `width` >= 2.
content_length_field reserve_content_length(out_buffer& out, size_t width);

/// Writes `length` right-aligned into `f`, at least one space before the digits. A length with
/// `f.width` digits or more (10 MB for a width of 8) widens the field to one space and the
/// digits, moving every byte after it right: correct, and never on the common path.
void patch_content_length(out_buffer& out, content_length_field f, uint64_t length);

}  // namespace tollgate
