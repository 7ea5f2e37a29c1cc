// The index file's layout in code (index_layout.h): the checksum every section and the
// directory carry, and the parts a file's bytes are reported by (`index build`, `serve`).
#include "search/index_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace tollgate::search {

namespace {

constexpr uint64_t kPrime = 0x9FB21C651E98DF25ULL;

}  // namespace

// ---- checksum ----

void index_checksum::stripe(const uint8_t* p) noexcept {
  for (int i = 0; i < 4; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lane_[i] = std::rotl((lane_[i] ^ w) * kPrime, 31);
  }
}

void index_checksum::update(const void* data, size_t n) noexcept {
  if (n == 0) {
    return;  // an empty section's data may be null, which memcpy must not be given
  }
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (tail_n_ > 0) {
    const size_t take = std::min(n, 32 - tail_n_);
    std::memcpy(tail_ + tail_n_, p, take);
    tail_n_ += take;
    p += take;
    n -= take;
    if (tail_n_ < 32) {
      return;
    }
    stripe(tail_);
    tail_n_ = 0;
  }
  while (n >= 32) {
    stripe(p);
    p += 32;
    n -= 32;
  }
  std::memcpy(tail_, p, n);
  tail_n_ = n;
}

uint64_t index_checksum::final() const noexcept {
  index_checksum c = *this;
  if (c.tail_n_ > 0) {
    std::memset(c.tail_ + c.tail_n_, 0, 32 - c.tail_n_);
    c.stripe(c.tail_);
  }
  uint64_t h = total_ * kPrime;
  for (uint64_t l : c.lane_) {
    h = std::rotl(h ^ (l * 0xC2B2AE3D27D4EB4FULL), 27) * kPrime + 0x165667B19E3779F9ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

namespace index_layout {

// Adds a section of `bytes` to its part (by the field in its tag's low byte).
void count_part(index_parts& p, uint32_t tag, uint64_t bytes) {
  if (tag >> 8 == 0) {
    return;  // the file's own (the list of bad lines): other
  }
  switch (tag & 0xFF) {
    case f_docs:
    case f_stories:
    case f_texts:
    case f_text_at:
    case f_text_dict:
    case f_text_lines:
    case f_time:
    case f_doc_tags:
    case f_tag_chars:
    case f_tag_lens:
    case f_tag_escape:
    case f_tag_table:
    case f_prune_by_time:
    case f_prune_time_cum:
    case f_prune_tag_at:
    case f_prune_tag_docs:
      p.stories += bytes;
      break;
    case f_doc_stream:
    case f_skips:
    case f_block_max:
    case f_block_max_time:
    case f_champ_at:
    case f_champ_part:
    case f_champ_doc:
    case f_champ_date:
    case f_impact_terms:
    case f_impact_at:
    case f_impact_doc:
    case f_impact_part:
    case f_impact_rows:
    case f_prune_head:
    case f_prune_set_of_term:
    case f_prune_bits:
    case f_prune_len_class:
      p.postings += bytes;
      break;
    case f_pos_stream:
      p.positions += bytes;
      break;
    default:
      break;
  }
}

}  // namespace index_layout

std::string index_parts::per_story(uint64_t story_count) const {
  // MB whole from 10 MB, to a tenth below, KB under 0.1 MB (a small corpus is not "0 MB").
  const double total = static_cast<double>(stories + postings + positions + other);
  const std::string size = total >= 10e6  ? fmt::format("{:.0f} MB", total / 1e6)
                           : total >= 1e5 ? fmt::format("{:.1f} MB", total / 1e6)
                                          : fmt::format("{:.0f} KB", total / 1e3);
  if (story_count == 0) {
    return size + "; no stories";  // the bytes of empty shards: nothing to divide by
  }
  const double n = static_cast<double>(story_count);
  return fmt::format(
      "{}; per story: stories {:.0f} B, postings {:.0f} B, positions {:.0f} B, other {:.0f} B",
      size, stories / n, postings / n, positions / n, other / n);
}

}  // namespace tollgate::search
