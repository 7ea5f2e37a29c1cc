// Private: the usage journal's record format.
//
// A journal is a file of fixed-size records, appended by one core. The current record is 32
// bytes:
//   u32 magic    'TGJ3' (0x334a4754)
//   u32 month    month index (year * 12 + month - 1)
//   u64 key_id
//   u32 count    billed successes (records of one pass for the same key are coalesced)
//   u32 overage  how many of them were past the key's quota when admitted (billed as overage)
//   u32 time     unix seconds of the pass that sealed the record, so of its calls within one
//                pass: the usage export's first and last call come from it (0: unknown)
//   u32 crc      CRC-32 (IEEE) of the 28 bytes before it
// Older journals hold 28-byte 'TGJ2' records (no time: crc of 24 bytes) or 24-byte 'TGJ1' ones
// (no overage either: crc of 20 bytes); replay still reads both, and a file may hold several
// formats (a journal continued after an upgrade). Host byte order (the data dir is not portable
// across architectures). A torn tail (shorter than the record its magic announces) or a
// corrupt record (bad magic or CRC) is skipped on replay; replay resynchronises on the next
// valid record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tollgate::quota::journal {

inline constexpr uint32_t kMagic = 0x334a4754;    // 'TGJ3'
inline constexpr uint32_t kMagicV2 = 0x324a4754;  // 'TGJ2', no time field
inline constexpr uint32_t kMagicV1 = 0x314a4754;  // 'TGJ1', no overage field either
inline constexpr size_t kRecordSize = 32;
inline constexpr size_t kRecordSizeV2 = 28;
inline constexpr size_t kRecordSizeV1 = 24;

uint32_t crc32(const void* data, size_t n) noexcept;

struct record {
  uint32_t month = 0;
  uint64_t key_id = 0;
  uint32_t count = 0;
  uint32_t overage = 0;     ///< <= count
  uint32_t time_s = 0;      ///< unix seconds of its pass; 0 when unknown (older formats)
  bool has_overage = true;  ///< false for a TGJ1 record, which does not say
};

/// The 20 bytes both formats start with: magic, month, key_id, count.
inline void encode_head(char* dst, uint32_t magic, const record& r) noexcept {
  std::memcpy(dst, &magic, 4);
  std::memcpy(dst + 4, &r.month, 4);
  std::memcpy(dst + 8, &r.key_id, 8);
  std::memcpy(dst + 16, &r.count, 4);
}

/// Writes one current-format record (kRecordSize bytes) at `dst`.
inline void encode(char* dst, const record& r) noexcept {
  encode_head(dst, kMagic, r);
  std::memcpy(dst + 20, &r.overage, 4);
  std::memcpy(dst + 24, &r.time_s, 4);
  uint32_t crc = crc32(dst, 28);
  std::memcpy(dst + 28, &crc, 4);
}

/// Writes one TGJ2 record (kRecordSizeV2 bytes), as journals before the time field held; for
/// tests of replaying them.
inline void encode_v2(char* dst, const record& r) noexcept {
  encode_head(dst, kMagicV2, r);
  std::memcpy(dst + 20, &r.overage, 4);
  uint32_t crc = crc32(dst, 24);
  std::memcpy(dst + 24, &crc, 4);
}

/// Writes one TGJ1 record (kRecordSizeV1 bytes), as journals before the overage field held;
/// for tests of replaying them.
inline void encode_v1(char* dst, const record& r) noexcept {
  encode_head(dst, kMagicV1, r);
  uint32_t crc = crc32(dst, 20);
  std::memcpy(dst + 20, &crc, 4);
}

/// The size of the record whose magic starts `src` (at least 4 readable bytes), or 0 when the
/// magic is neither format's.
inline size_t record_size_at(const char* src) noexcept {
  uint32_t magic;
  std::memcpy(&magic, src, 4);
  return magic == kMagic     ? kRecordSize
         : magic == kMagicV2 ? kRecordSizeV2
         : magic == kMagicV1 ? kRecordSizeV1
                             : 0;
}

/// Decodes the record of either format at `src`, which holds `avail` readable bytes; false on a
/// bad magic or CRC, or fewer bytes than the record needs.
inline bool decode(const char* src, size_t avail, record& r) noexcept {
  if (avail < 4) {
    return false;
  }
  const size_t n = record_size_at(src);
  if (n == 0 || avail < n) {
    return false;
  }
  uint32_t crc;
  std::memcpy(&crc, src + n - 4, 4);
  if (crc != crc32(src, n - 4)) {
    return false;
  }
  std::memcpy(&r.month, src + 4, 4);
  std::memcpy(&r.key_id, src + 8, 8);
  std::memcpy(&r.count, src + 16, 4);
  r.has_overage = n != kRecordSizeV1;
  r.overage = 0;
  r.time_s = 0;
  if (r.has_overage) {
    std::memcpy(&r.overage, src + 20, 4);
    if (r.overage > r.count) {
      return false;  // cannot be written: a damaged record whose CRC collided
    }
  }
  if (n == kRecordSize) {
    std::memcpy(&r.time_s, src + 24, 4);
  }
  return true;
}

struct scan_stats {
  uint64_t records = 0;
  uint64_t units = 0;
  uint64_t corrupt = 0;  ///< corrupt stretches skipped
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
    const size_t left = data.size() - o;
    // A tail shorter than the record its magic announces (or than the smaller format, when no
    // magic starts it) is a write cut short by a crash.
    const size_t need = left >= 4 && record_size_at(data.data() + o) != 0
                            ? record_size_at(data.data() + o)
                            : kRecordSizeV1;
    if (left < need) {
      st.torn_bytes += left;
      break;
    }
    record r;
    if (decode(data.data() + o, left, r)) {
      in_corrupt = false;
      ++st.records;
      st.units += r.count;
      f(r);
      o += need;
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
