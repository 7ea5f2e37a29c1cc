// Private: the usage journal's record format.
//
// A journal is a file of fixed 24-byte records, appended by one core:
//   u32 magic  'TGJ1' (0x314a4754)
//   u32 month  month index (year * 12 + month - 1)
//   u64 key_id
//   u32 count  billed successes (records of one pass for the same key are coalesced)
//   u32 crc    CRC-32 (IEEE) of the 20 bytes before it
// Host byte order (the data dir is not portable across architectures). A torn tail (less than
// 24 bytes) or a corrupt record (bad magic or CRC) is skipped on replay; replay resynchronises
// on the next valid record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tollgate::quota::journal {

inline constexpr uint32_t kMagic = 0x314a4754;
inline constexpr size_t kRecordSize = 24;

uint32_t crc32(const void* data, size_t n) noexcept;

struct record {
  uint32_t month = 0;
  uint64_t key_id = 0;
  uint32_t count = 0;
};

/// Writes one record (kRecordSize bytes) at `dst`.
inline void encode(char* dst, const record& r) noexcept {
  uint32_t magic = kMagic;
  std::memcpy(dst, &magic, 4);
  std::memcpy(dst + 4, &r.month, 4);
  std::memcpy(dst + 8, &r.key_id, 8);
  std::memcpy(dst + 16, &r.count, 4);
  uint32_t crc = crc32(dst, 20);
  std::memcpy(dst + 20, &crc, 4);
}

/// Decodes one record; false on bad magic or CRC.
inline bool decode(const char* src, record& r) noexcept {
  uint32_t magic, crc;
  std::memcpy(&magic, src, 4);
  std::memcpy(&crc, src + 20, 4);
  if (magic != kMagic || crc != crc32(src, 20)) {
    return false;
  }
  std::memcpy(&r.month, src + 4, 4);
  std::memcpy(&r.key_id, src + 8, 8);
  std::memcpy(&r.count, src + 16, 4);
  return true;
}

struct scan_stats {
  uint64_t records = 0;
  uint64_t units = 0;
  uint64_t corrupt = 0;     ///< corrupt stretches skipped
  uint64_t corrupt_bytes = 0;
  uint64_t torn_bytes = 0;  ///< an incomplete record at the end
};

/// Calls f(record) for each valid record in `data` from `offset`.
template <class F>
scan_stats scan(std::string_view data, size_t offset, F&& f) {
  scan_stats st;
  size_t o = offset;
  bool in_corrupt = false;
  while (o < data.size()) {
    if (data.size() - o < kRecordSize) {
      st.torn_bytes += data.size() - o;
      break;
    }
    record r;
    if (decode(data.data() + o, r)) {
      in_corrupt = false;
      ++st.records;
      st.units += r.count;
      f(r);
      o += kRecordSize;
      continue;
    }
    if (!in_corrupt) {
      ++st.corrupt;
      in_corrupt = true;
    }
    ++st.corrupt_bytes;
    ++o;  // resynchronise byte by byte
  }
  return st;
}

}  // namespace tollgate::quota::journal
