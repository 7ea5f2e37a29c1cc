// prune_index: what the pruned evaluations read besides the postings and the block maxima (the
// dense terms' bitsets, the docs by time and by tag, the length classes, the impact terms' lists
// and rows), and the knobs that shape it. Derived from a sealed shard by prune_index_builder
// (prune_index.cc) at finalize(); read by the evaluators (evaluators.h) and the shard's shared
// steps (shard_impl.h).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace tollgate::search {

class local_shard;

/// A term in at least 1 / dense_divisor of a shard's docs also gets a bitset of its docs (see
/// prune_index). Settable so tests can vary it; set it before loading, never during.
inline uint32_t dense_divisor = 16;

/// The impact terms' frequencies in one doc, and its length, in one cache line's half.
inline constexpr uint32_t kImpactTermsMost = 30;
struct alignas(32) impact_row {
  uint16_t len;                  ///< title + text tokens; 65535: that or more (len_norm_)
  uint8_t wf[kImpactTermsMost];  ///< per impact term: 3 x title + text tf, capped at 255
                                 ///< (255: read the postings); 0: not in the doc
};
static_assert(sizeof(impact_row) == 32);

/// What the pruned evaluation (prune.cc) reads besides the postings and the block maxima; all
/// of it derived from the postings and the docs' times by prune_index_builder, so it can be
/// recomputed at load or stored beside the postings. The tables are read where they are: what
/// compute_prune_index computed (`own`) or an index file's mapping (local_shard::load_prune),
/// where only the pages a query reads become resident. A move keeps `own`'s buffers, so the
/// views stay valid; a copy would not, so there is none.
struct prune_index {
  prune_index() = default;
  prune_index(prune_index&&) = default;
  prune_index& operator=(prune_index&&) = default;
  prune_index(const prune_index&) = delete;
  prune_index& operator=(const prune_index&) = delete;

  uint32_t words = 0;                     ///< 64-bit words per bitset: ceil(docs / 64)
  std::span<const uint32_t> set_of_term;  ///< per term: its bitset's number, or UINT32_MAX
  std::span<const uint64_t> bits;         ///< the dense terms' doc bitsets, `words` each
  uint32_t min_len = 0;                   ///< the shortest doc's length (title + text tokens)
  uint32_t time_step = 1;                 ///< time ranks per bucket of time_cum (below)
  const uint64_t* set(uint32_t term) const noexcept {
    const uint32_t s = set_of_term[term];
    return s == UINT32_MAX ? nullptr : bits.data() + size_t{s} * words;
  }
  // Filters (build_filter): a since/until window is a range of time ranks; a tag, its docs.
  std::span<const uint32_t> by_time;   ///< docs by ascending time, ties by descending doc
  std::span<const uint64_t> time_cum;  ///< bitset j - 1 (j >= 1): the docs of rank < j * time_step
  std::span<const uint32_t> tag_at;  ///< per tag: its first entry in tag_docs; one more at the end
  std::span<const uint32_t> tag_docs;  ///< per tag, its docs ascending

  /// Per doc: the class of its length (title + text tokens; len_class_min: each class's
  /// smallest length), so that a doc's bound can take a norm close to its own from one byte
  /// (len_norm_[doc] is eight, a cache miss for most docs a walk visits).
  std::span<const uint8_t> len_class;

  /// The tables above as compute_prune_index made them (empty when read from a file).
  struct tables {
    std::vector<uint32_t> set_of_term, by_time, tag_at, tag_docs;
    std::vector<uint64_t> bits, time_cum;
    std::vector<uint8_t> len_class;
  } own;
  /// Points the views at `own`.
  void view_own() noexcept {
    set_of_term = own.set_of_term;
    bits = own.bits;
    by_time = own.by_time;
    time_cum = own.time_cum;
    tag_at = own.tag_at;
    tag_docs = own.tag_docs;
    len_class = own.len_class;
  }

  /// The shard's commonest terms (impact terms: df * impact_divisor >= docs, at most
  /// impact_max_terms, every one dense), for the top k of a conjunction of them (impact_top):
  /// per impact term, its weighted frequency per doc and its docs by descending part.
  std::vector<uint32_t> impact_terms;        ///< the impact terms' indices
  std::span<const impact_row> impact_rows;   ///< per doc: impact_row_store or the index file's
  std::vector<impact_row> impact_row_store;  ///< rows computed (compute_impact)
  std::vector<uint32_t> impact_at;           ///< per impact term: its first entry below; one more
  std::span<const uint32_t> impact_doc;      ///< per impact term, its impact_depth best docs by
                                             ///< term_part at the shard's norms (ties by doc)
  std::span<const float> impact_part;        ///< ... and those parts, rounded up to a float
  std::vector<uint32_t> impact_doc_store;    ///< impact_doc and impact_part computed
  std::vector<float> impact_part_store;      ///< (compute_impact), or empty: the index file's
  /// The impact term number of `term`, or UINT32_MAX.
  uint32_t impact_of(uint32_t term) const noexcept {
    for (uint32_t i = 0; i < impact_terms.size(); ++i) {
      if (impact_terms[i] == term) {
        return i;
      }
    }
    return UINT32_MAX;
  }
};
/// Impact terms (prune_index): a term in at least 1 / impact_divisor of a shard's docs, the
/// impact_max_terms commonest, each with its impact_depth best docs in order. Settable so tests
/// can vary them; set them before loading, never during.
inline uint32_t impact_divisor = 4;
inline uint32_t impact_max_terms = kImpactTermsMost;  // at most kImpactTermsMost
inline uint32_t impact_depth = 8192;
/// impact_top runs for k up to this (deeper pages need deeper lists than it keeps), and for
/// queries of at most impact_max_query_terms terms: it runs unsliced, reading at most that many
/// lists of impact_depth entries.
inline uint32_t impact_max_k = 128;
inline uint32_t impact_max_query_terms = 4;
/// The smallest length (title + text tokens) of each length class (prune_index::len_class):
/// one class per length below 64, then steps of about 4%, up to ~10^5 tokens and beyond.
inline constexpr std::array<uint32_t, 256> len_class_min = [] {
  std::array<uint32_t, 256> m{};
  for (uint32_t c = 1; c < m.size(); ++c) {
    m[c] = c < 64 ? c : std::max(m[c - 1] + 1, m[c - 1] + (m[c - 1] + 24) / 25);
  }
  return m;
}();
/// Buckets of time ranks with a cumulative bitset each (prune_index::time_cum).
inline constexpr uint32_t kTimeBuckets = 32;
/// A shard of `docs` docs: its time ranks per bucket, and how many cumulative bitsets it has
/// (j * time_step < docs for every j up to that).
inline uint32_t time_step_of(uint64_t docs) noexcept {
  return static_cast<uint32_t>(std::max<uint64_t>(1, (docs + kTimeBuckets - 1) / kTimeBuckets));
}
inline uint64_t time_cums_of(uint64_t docs, uint32_t time_step) noexcept {
  return docs == 0 ? 0 : (docs - 1) / time_step;
}

/// Derives a sealed shard's prune_index (prune_index.cc): the bitsets, the time order and the
/// tags' docs from its postings and stored stories, the length classes, and the impact terms'
/// lists and rows (computed, or as an index file held them: local_shard::loaded_prune_ and
/// loaded_impact_).
/// Run by finalize(), on a build and on a load alike; a friend of local_shard, whose tables it
/// reads. Thread-safe for distinct shards.
struct prune_index_builder {
  static prune_index compute_prune_index(const local_shard& shard);

 private:
  // The tables besides the impact terms' (into px.own, viewed).
  static void compute_tables(const local_shard& shard, prune_index& px);
  // The impact terms' lists and rows: the file's, or compute_impact's.
  static void add_impact(const local_shard& shard, prune_index& px);
  // The impact terms (see prune_index): the commonest dense terms' lists and per-doc rows.
  static void compute_impact(const local_shard& shard, prune_index& px);
};

}  // namespace tollgate::search
