// A Content-Length written before the body it counts (see content_length.h).
#include "tollgate/common/content_length.h"

#include <fmt/format.h>

#include <cstring>

#include "tollgate/common/assert.h"

namespace tollgate {

content_length_field reserve_content_length(out_buffer& out, size_t width) {
  TOLLGATE_ASSERT(width >= 2);
  constexpr char k_name[] = "Content-Length:";
  constexpr size_t k_name_len = sizeof k_name - 1;
  char* p = out.prepare(k_name_len + width);
  std::memcpy(p, k_name, k_name_len);
  std::memset(p + k_name_len, ' ', width);
  content_length_field f{out.size() + k_name_len, width};
  out.commit(k_name_len + width);
  return f;
}

void patch_content_length(out_buffer& out, content_length_field f, uint64_t length) {
  TOLLGATE_ASSERT(f.at + f.width <= out.size());
  const fmt::format_int digits(static_cast<unsigned long long>(length));
  const char* first = digits.data();
  const size_t n = digits.size();
  if (n < f.width) {
    std::memcpy(out.data() + f.at + f.width - n, first, n);
    return;
  }
  // Widen the field to " " + the digits, moving everything after it right.
  const size_t extra = n + 1 - f.width;
  const size_t tail_from = f.at + f.width;
  const size_t tail_len = out.size() - tail_from;
  out.prepare(extra);
  out.commit(extra);
  char* base = out.data();
  std::memmove(base + tail_from + extra, base + tail_from, tail_len);
  base[f.at] = ' ';
  std::memcpy(base + f.at + 1, first, n);
}

}  // namespace tollgate
