// A Content-Length written before the body it counts: the rare path (see content_length.h).
#include "tollgate/common/content_length.h"

#include <cstring>

#include "tollgate/common/assert.h"

namespace tollgate {

void widen_content_length(out_buffer& out, content_length_field f, const char* digits, size_t n) {
  TOLLGATE_ASSERT(f.at + f.width <= out.size() && n >= f.width);
  const size_t extra = n + 1 - f.width;
  const size_t tail_from = f.at + f.width;
  const size_t tail_len = out.size() - tail_from;
  out.prepare(extra);
  out.commit(extra);
  char* base = out.data();
  std::memmove(base + tail_from + extra, base + tail_from, tail_len);
  base[f.at] = ' ';
  std::memcpy(base + f.at + 1, digits, n);
}

}  // namespace tollgate
