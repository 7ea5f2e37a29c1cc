#include "quota/journal.h"

#include <array>

namespace tollgate::quota::journal {

namespace {
// CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320), "slicing by 4": table k gives the CRC
// contribution of a byte followed by k zero bytes, so four bytes fold in with four lookups.
using tables = std::array<std::array<uint32_t, 256>, 4>;
constexpr tables make_tables() {
  tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) {
      c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    }
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (size_t k = 1; k < 4; ++k) {
      t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
    }
  }
  return t;
}
constexpr tables kTables = make_tables();
}  // namespace

uint32_t crc32(const void* data, size_t n) noexcept {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xFFFFFFFFu;
  while (n >= 4) {
    c ^= static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
    c = kTables[3][c & 0xFF] ^ kTables[2][(c >> 8) & 0xFF] ^ kTables[1][(c >> 16) & 0xFF] ^
        kTables[0][c >> 24];
    p += 4;
    n -= 4;
  }
  while (n-- > 0) {
    c = kTables[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
  }
  return c ^ 0xFFFFFFFFu;
}

}  // namespace tollgate::quota::journal
