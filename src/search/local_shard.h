// local_shard: an in-process slice of the corpus: stored stories plus an inverted index.
//
// Lifecycle:
//   1. add() each story of this slot (copied into 1 MiB arena chunks; any order).
//   2. seal(): sorts stories by id (doc handle order == id_less order, so ties within a shard
//      break by doc), drops duplicate ids, tokenizes titles and texts and builds the postings,
//      then packs the stored stories (story_pack.cc): the short fields back to back, each text
//      compressed alone with a dictionary trained on the shard's texts.
//   3. finalize(global stats) (by the backend): per-doc BM25 length norms (query_plan's formula).
//   4. Queries, concurrently from any number of cores, each with its own shard_workspace. A
//      query runs whole (search, add_doc_freqs) or in budgeted slices (search_slice,
//      doc_freqs_slice) whose state (cursors, heap, phase) stays in the workspace between them.
//
// Units: storage, hashing and the term table (local_shard.cc), index_build.cc, finalize.cc,
// evaluate.cc (evaluation, phrases), prune.cc (the pruned evaluation of queries without phrases,
// see docs/design.md), reference.cc, render.cc, story_pack.cc (stored texts); shared helpers in
// shard_impl.h; the cursor's seek below.
//
// Postings, per term, in three contiguous streams shared by all terms of the shard:
//   doc stream:  per doc, varints: doc delta, title tf, text tf, byte length of its positions;
//                docs come in blocks of 128;
//   positions:   per doc, varints: first position, then deltas. Title tokens take positions
//                0..title_len-1, text tokens start at title_len+1, so phrases never span fields;
//   skips:       per block {last doc, doc-stream end, positions end}, for seek().
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/shard.h"

struct ZSTD_DDict_s;  // <zstd.h>: a digested decompression dictionary

namespace tollgate::search {

class index_writer;  // index_file.cc
class index_reader;

/// A story as parsed from a line; views valid only during add().
struct story_in {
  std::string_view id, title, url, by, text;
  int64_t time = 0, score = 0, comments = 0;
  std::span<const std::string_view> tags;
};

inline constexpr uint32_t block_docs = 128;
/// Terms with more than champ_min_df docs in a shard keep their champ_len best postings by
/// relevance and by date (computed by finalize), so a one-term query without filters and with
/// k < champ_len is answered from them without touching the postings.
inline constexpr uint32_t champ_len = 32;
inline constexpr uint32_t champ_min_df = block_docs;
/// A term in at least 1 / dense_divisor of a shard's docs also gets a bitset of its docs (see
/// prune_index). Settable so tests can vary it; set it before loading, never during.
inline uint32_t dense_divisor = 16;
/// Whether queries without phrases take the pruned evaluation (prune.cc). Only tests turn it
/// off, to compare both paths; set it between queries, never during one.
inline bool prune_enabled = true;
/// ... and only when the rarest term has at least this many docs in the shard: below it the
/// one-pass leapfrog is cheaper than seeding, bounding and counting apart. Settable for tests.
inline uint32_t prune_min_lead_df = 8 * block_docs;
/// The pruned evaluation finds the top k and the total in one walk of the lead's docs when the
/// share of them expected to match is below this (see begin_pruned). Settable for tests.
inline double one_pass_share = 0.25;
/// Two-word phrases of frequent words get their document count at build time (index_build.cc,
/// see docs/design.md): the words are the (at most pair_max_words) terms whose df, estimated
/// from the shard's first pair_sample_docs docs, is at least pair_min_df. A phrase of two of
/// them needs no postings walk for its df nor for the total of a search of it alone. Settable
/// so tests can vary them (pair_max_words 0: no table); set them before loading, never during.
inline uint32_t pair_min_df = 1024;
inline uint32_t pair_max_words = 1024;  // at most 65535 (ranks are 16-bit)
inline uint32_t pair_sample_docs = 4096;
/// The first pair_posting_words of those words (the most frequent) also index their adjacent
/// pairs as terms of their own, named "a\0b" (no query token holds a NUL), whose postings give
/// each doc's occurrences of the phrase "a b" in title and text: a search of such a phrase
/// alone is a one-term search of its pair term (champion lists, block maxima, exact df).
inline uint32_t pair_posting_words = 128;
/// Whether seal() compresses the stories' texts (story_pack.cc). Only tests turn it off, to
/// compare a packed shard with one whose texts are all stored raw; set it before loading.
inline bool pack_texts = true;
/// A shard with at least this many postings finalizes on several threads. Settable so tests
/// can run the threaded path on a small corpus; set it before loading, never during.
inline uint64_t parallel_finalize_postings = 4'000'000;

struct skip_entry {
  uint32_t last_doc;
  uint32_t doc_end;  ///< relative to the term's doc stream start
  uint64_t pos_end;  ///< relative to the term's positions start
};

struct term_info {
  uint64_t doc_off;
  uint64_t pos_off;
  uint32_t skip_off;
  uint32_t df;
  uint32_t name_off;
  uint32_t name_len;
};

namespace detail {
/// Reads one LEB128 varint (at most 5 bytes) and advances p.
inline uint32_t read_varint(const uint8_t*& p) noexcept {
  uint32_t v = *p & 0x7F;
  if (*p++ < 0x80) {
    return v;
  }
  int shift = 7;
  while (true) {
    uint8_t c = *p++;
    v |= static_cast<uint32_t>(c & 0x7F) << shift;
    if (c < 0x80) {
      return v;
    }
    shift += 7;
  }
}
}  // namespace detail

/// Decodes one term's postings. Plain data; lives in a workspace.
struct posting_cursor {
  const uint8_t* p;
  const uint8_t* pos;
  const uint8_t* doc_base;
  const uint8_t* pos_base;
  const skip_entry* skips;
  uint32_t nblocks;
  uint32_t block;
  uint32_t left;  ///< docs still to decode in the current block
  uint32_t df;
  uint32_t doc;
  uint32_t tf_title;
  uint32_t tf_text;
  uint32_t pos_len;
  uint32_t skip_off;  ///< the term's first skip entry (indexes block maxima too)

  /// Moves to the next doc; false at the end.
  bool next() noexcept;
  /// Moves to the first doc >= target (no move if already there); false at the end.
  bool seek(uint32_t target) noexcept;
  /// Moves to the end of the current block without decoding it; next() enters the next block.
  void skip_block() noexcept;
};

inline bool posting_cursor::next() noexcept {
  pos += pos_len;
  if (left == 0) {
    if (block + 1 >= nblocks) {
      doc = UINT32_MAX;
      return false;
    }
    ++block;
    left = std::min(block_docs, df - block * block_docs);
  }
  // Most postings of frequent terms are four one-byte varints: decode them from one load (the
  // doc stream is padded, so reading 4 bytes at the last posting stays in bounds).
  uint32_t w;
  std::memcpy(&w, p, 4);
  if ((w & 0x80808080u) == 0) {
    doc += w & 0xFF;
    tf_title = (w >> 8) & 0xFF;
    tf_text = (w >> 16) & 0xFF;
    pos_len = w >> 24;
    p += 4;
  } else {
    doc += detail::read_varint(p);
    tf_title = detail::read_varint(p);
    tf_text = detail::read_varint(p);
    pos_len = detail::read_varint(p);
  }
  --left;
  return true;
}

inline void posting_cursor::skip_block() noexcept {
  p = doc_base + skips[block].doc_end;
  pos = pos_base + skips[block].pos_end;
  doc = skips[block].last_doc;
  pos_len = 0;
  left = 0;
}

[[gnu::always_inline]] inline bool posting_cursor::seek(uint32_t target) noexcept {
  if (doc >= target) {
    return doc != UINT32_MAX;
  }
  if (skips[block].last_doc < target) {
    uint32_t lo = block + 1;
    uint32_t hi = nblocks;
    // most seeks of a frequent term land in the next block: try it before the binary search
    if (lo < hi && skips[lo].last_doc >= target) {
      hi = lo;
    }
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo) / 2;
      if (skips[mid].last_doc < target) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == nblocks) {
      doc = UINT32_MAX;
      return false;
    }
    block = lo;
    p = doc_base + skips[lo - 1].doc_end;
    pos = pos_base + skips[lo - 1].pos_end;
    doc = skips[lo - 1].last_doc;
    pos_len = 0;
    left = std::min(block_docs, df - lo * block_docs);
  }
  // The target is in this block (its last doc >= target), so the scan never leaves it: it
  // follows only the doc number and the positions offset until the doc is reached.
  const uint8_t* q = p;
  const uint8_t* ps = pos + pos_len;
  uint32_t d = doc;
  uint32_t n = left;
#if defined(__SSE2__)
  // Four one-byte-varint postings at a time while the target lies beyond them: their doc gaps
  // (bytes 0, 4, 8, 12) and position lengths (bytes 3, 7, 11, 15) summed by SAD. Four postings
  // are at least 16 bytes, so the load stays in the block.
  while (n >= 4) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    if (_mm_movemask_epi8(v) != 0) {
      break;  // a longer varint among them
    }
    const __m128i zero = _mm_setzero_si128();
    const __m128i gs = _mm_sad_epu8(_mm_and_si128(v, _mm_set1_epi32(0xFF)), zero);
    const uint32_t g = static_cast<uint32_t>(_mm_cvtsi128_si32(gs) + _mm_extract_epi16(gs, 4));
    if (d + g >= target) {
      break;
    }
    const __m128i ls = _mm_sad_epu8(_mm_srli_epi32(v, 24), zero);
    ps += _mm_cvtsi128_si32(ls) + _mm_extract_epi16(ls, 4);
    d += g;
    q += 16;
    n -= 4;
  }
#endif
  while (true) {
    uint32_t w;
    std::memcpy(&w, q, 4);
    uint32_t tt, tx, pl;
    if ((w & 0x80808080u) == 0) {
      d += w & 0xFF;
      tt = (w >> 8) & 0xFF;
      tx = (w >> 16) & 0xFF;
      pl = w >> 24;
      q += 4;
    } else {
      d += detail::read_varint(q);
      tt = detail::read_varint(q);
      tx = detail::read_varint(q);
      pl = detail::read_varint(q);
    }
    --n;
    if (d >= target) {
      p = q;
      pos = ps;
      doc = d;
      tf_title = tt;
      tf_text = tx;
      pos_len = pl;
      left = n;
      return true;
    }
    ps += pl;
  }
}

/// The leapfrog's step: seeks c onto doc, the lead's; true when c holds it, else false with the
/// lead moved on to c's doc (`end`: one of them has no doc left there).
[[gnu::always_inline]] inline bool leap(posting_cursor& lead, posting_cursor& c, uint32_t doc,
                                        bool& end) noexcept {
  if (!c.seek(doc)) {
    end = true;
    return false;
  }
  if (c.doc > doc) {
    end = !lead.seek(c.doc);
    return false;
  }
  return true;
}

/// The impact terms' frequencies in one doc, and its length, in one cache line's half.
inline constexpr uint32_t impact_terms_most = 30;
struct alignas(32) impact_row {
  uint16_t len;                   ///< title + text tokens; 65535: that or more (len_norm_)
  uint8_t wf[impact_terms_most];  ///< per impact term: 3 x title + text tf, capped at 255
                                  ///< (255: read the postings); 0: not in the doc
};
static_assert(sizeof(impact_row) == 32);

/// What the pruned evaluation (prune.cc) reads besides the postings and the block maxima; all
/// of it derived from the postings and the docs' times by local_shard::compute_prune_index(),
/// so it can be recomputed at load or stored beside the postings.
struct prune_index {
  uint32_t words = 0;                 ///< 64-bit words per bitset: ceil(docs / 64)
  std::vector<uint32_t> set_of_term;  ///< per term: its bitset's number, or UINT32_MAX
  std::vector<uint64_t> bits;         ///< the dense terms' doc bitsets, `words` each
  uint32_t min_len = 0;               ///< the shortest doc's length (title + text tokens)
  uint32_t time_step = 1;             ///< time ranks per bucket of time_cum (below)
  const uint64_t* set(uint32_t term) const noexcept {
    const uint32_t s = set_of_term[term];
    return s == UINT32_MAX ? nullptr : bits.data() + size_t{s} * words;
  }
  // Filters (build_filter): a since/until window is a range of time ranks; a tag, its docs.
  std::vector<uint32_t> by_time;   ///< docs by ascending time, ties by descending doc
  std::vector<uint64_t> time_cum;  ///< bitset j - 1 (j >= 1): the docs of rank < j * time_step
  std::vector<uint32_t> tag_at;    ///< per tag: its first entry in tag_docs; one more at the end
  std::vector<uint32_t> tag_docs;  ///< per tag, its docs ascending

  /// Per doc: the class of its length (title + text tokens; len_class_min: each class's
  /// smallest length), so that a doc's bound can take a norm close to its own from one byte
  /// (len_norm_[doc] is eight, a cache miss for most docs a walk visits).
  std::vector<uint8_t> len_class;

  /// The shard's commonest terms (impact terms: df * impact_divisor >= docs, at most
  /// impact_max_terms, every one dense), for the top k of a conjunction of them (impact_top):
  /// per impact term, its weighted frequency per doc and its docs by descending part.
  std::vector<uint32_t> impact_terms;        ///< the impact terms' indices
  std::span<const impact_row> impact_rows;   ///< per doc: impact_row_store or the index file's
  std::vector<impact_row> impact_row_store;  ///< rows computed (compute_impact)
  std::vector<uint32_t> impact_at;           ///< per impact term: its first entry below; one more
  std::vector<uint32_t> impact_doc;          ///< per impact term, its impact_depth best docs by
                                             ///< term_part at the shard's norms (ties by doc)
  std::vector<float> impact_part;            ///< ... and those parts, rounded up to a float
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
inline uint32_t impact_max_terms = impact_terms_most;  // at most impact_terms_most
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
inline constexpr uint32_t time_buckets = 32;

/// A phrase's matches in one shard as its document frequency counted them (doc_freqs_slice),
/// so that a search for that phrase alone, which must count the same matches, need not.
struct known_phrase_total {
  uint64_t shard = 0;             ///< the shard's serial; 0: empty
  uint32_t len = 0;               ///< bytes of `words`
  std::array<char, 256> words{};  ///< the phrase's words in order, each followed by a NUL
  uint64_t total = 0;
  /// The phrase's docs in the shard, ascending, when its count's walk kept them all (listed)
  std::vector<uint32_t> docs;
  bool listed = false;
};

/// The least docs in a shard for the intersection to prefetch its lead's rows or norms (2 MB of
/// rows, 512 KB of norms: about a core's L2; below it they mostly stay cached between queries).
inline constexpr size_t prefetch_min_docs = size_t{1} << 16;

/// A phrase check reads the words' positions: it counts as this many units of a slice's budget.
inline constexpr uint64_t phrase_cost = 8;

/// A phrase's docs kept by its count's walk (a shard's) for the search that follows, up to this.
inline constexpr uint32_t listed_docs_most = 4096;

/// Where a local shard's evaluation stands between slices (search_slice).
struct eval_state {
  enum mode_t : uint8_t {
    done,
    single,
    intersect,
    pruned,
    filtered,
    time_walk,
    listed
  } mode = done;
  bool by_date = false;
  // pruned: the top k first (the lead's blocks, bounded), then the total (counted apart)
  bool counting = false;
  bool all_dense = false;  ///< counting: every term has a bitset
  bool one_pass = false;   ///< some term has no bitset: top k and total in one walk
  enum impact_t : uint8_t { impact_none, impact_seeded, impact_found } impact = impact_none;
  bool time_filtered = false;  ///< since or until set
  double kn_min = 0;           ///< the smallest length norm of the shard under avgdl
  uint32_t seed_at = 0;        ///< the first seed not below the lead's doc
  bool total_known = false;    ///< the total is a phrase's known count (no counting phase)
  uint64_t known_total = 0;
  uint32_t word = 0;                  ///< counting by bitsets: the next word (listed: doc)
  uint32_t bound_block = UINT32_MAX;  ///< the lead block whose bounds term_ub holds
  uint32_t pf_block = UINT32_MAX;     ///< the lead block whose docs' lines were prefetched
  double block_ub = 0;                ///< that block's bound on any of its docs' keys
  double avgdl = 0;                   ///< the average D the norms use
  double bound_scale = 1;             ///< block maxima scale under another corpus average
  bool filter_on = false;             ///< ws.filter holds the time window and tags (pruned)
  uint32_t rank = 0;                  ///< time_walk: the rank below the next one to visit
  uint32_t rank_lo = 0;               ///< time_walk: the window's lowest rank
  mode_t began = done;                ///< search(): the mode begin_search chose (for tests)

  const double* kn_class = nullptr;  ///< pruned: per length class, its norm (a lower bound)
  uint64_t below_f = 0;  ///< pruned: docs rejected by their length class's frequency threshold
};

/// Per-core evaluation state for local shards.
struct shard_workspace {
  eval_state ev;
  std::vector<posting_cursor> cursors;  // in term order
  std::vector<uint32_t> order;          // cursor indices by ascending df
  std::vector<uint32_t> term_ids;       // per cursor: the shard's term index
  std::vector<uint32_t> tag_ids;
  // per cursor: its term's bitset or nullptr (in the intersection, only those of terms in at
  // most half the docs, tested before their seeks when `probe`)
  std::vector<const uint64_t*> sets;
  bool probe = false;
  std::vector<uint32_t> shallow;     // per cursor: the block bounds read up to (pruned)
  std::vector<double> term_ub;       // per cursor: idf x its bound in the lead block
  std::vector<uint32_t> seeds;       // docs offered before the walk, ascending (pruned)
  std::vector<uint64_t> seen;        // impact_top: the docs it visited (a bitset)
  std::vector<uint32_t> seen_docs;   // ... and the same docs, to clear it
  std::vector<uint32_t> impact_pos;  // impact_top: per term, its next list entry
  // Per cursor: the impact term number whose rows give its frequencies (never sought), or
  // UINT32_MAX; rows_on when one does (set by begin_search, plans without phrases only).
  std::vector<uint32_t> row_slot;
  bool rows_on = false;
  std::vector<uint64_t> filter, tag_bits;           // the docs passing the time window and tags
  std::array<known_phrase_total, 8> phrase_totals;  // the latest phrases' counts, any shard
  uint32_t phrase_totals_next = 0;                  // the entry to replace next
  // a phrase's document frequency (add_doc_freqs): the phrase as a query of its own
  std::vector<std::string_view> sub_terms;
  std::vector<uint32_t> sub_phrase_terms;
  shard_answer sub_answer;
  query_plan sub_plan{};
  phrase_span sub_whole{};
  // two-word phrases searched as their pair terms (begin_search): the plan step() then follows
  bool pair_on = false;
  std::string pair_name;                     // the pair terms' names back to back
  std::vector<std::string_view> pair_terms;  // the plan's words that stand alone, then the pairs
  std::vector<double> pair_idf;
  std::vector<uint8_t> pair_words;  // per term of the searched plan: a word of a phrase
  query_plan pair_plan{};
  uint32_t df_phrase = 0;       // doc_freqs_slice: the phrase being counted
  bool df_sub_running = false;  // ... and whether its sub-search has begun
  bool keep_docs = false;       // ... keeping its matches in kept_docs (intersect_step)
  std::vector<uint32_t> kept_docs;
  std::vector<uint32_t> listed_docs;  // listed: the phrase's docs to score (listed_step)

  // pruned top k: per length class, its norm (made for the average length kn_class_avgdl), and
  // the lead's least weighted frequency (3 x title + text tf) that can reach the k-th key with
  // every other term at its largest block maximum (term_max); valid where f_gen[c] ==
  // f_gen_now, made for the k-th key f_kth; f_age: docs tested since they were invalidated
  std::array<double, 256> kn_class{};
  double kn_class_avgdl = 0;
  std::vector<double> term_max;
  std::array<uint32_t, 256> f_min{};
  std::array<uint32_t, 256> f_gen{};
  uint32_t f_gen_now = 0;
  double f_kth = 0;
  uint32_t f_age = 0;
  shard_workspace() {
    sub_terms.reserve(64);
    sub_phrase_terms.reserve(64);
    sub_answer.hits.reserve(2);
    cursors.reserve(64);
    order.reserve(64);
    term_ids.reserve(64);
    tag_ids.reserve(max_tags);
    sets.reserve(64);
    shallow.reserve(64);
    term_ub.reserve(64);
    seeds.reserve(64 * champ_len);
    row_slot.reserve(64);
    pair_name.reserve(512);
    pair_terms.reserve(64);
    pair_idf.reserve(64);
    pair_words.reserve(64);
  }
};

class local_shard final : public shard_source {
 public:
  local_shard();
  ~local_shard() override;

  /// Phase 1. Not thread-safe.
  void add(const story_in& s, uint64_t line);
  /// Phase 1: takes over every story added to `other` (a shard filled by another parse thread),
  /// its line numbers shifted by `line_base`; `other` is left empty. The stored bytes move
  /// (no copy); tags are re-interned here. Not thread-safe.
  void absorb(local_shard&& other, uint64_t line_base);
  /// Phase 2. Duplicate ids: the first occurrence (lowest line) stays; each later one is
  /// recorded in `dups` as {line, reason}. Not thread-safe (one thread per shard).
  /// `records`, when given, is the build's scratch record buffer, kept (and its pages, already
  /// faulted in) for the next shard a thread seals. `steps`, when given, advances by
  /// build_steps_indexed and build_steps_sealed per story as the work is done (progress).
  void seal(std::vector<load_issue>& dups, out_buffer* records = nullptr,
            std::atomic<uint64_t>* steps = nullptr);

  shard_stats stats() const override { return stats_; }
  void finalize(const shard_stats& global) override;
  bool add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const override;
  bool search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const override;
  slice search_slice(const query_plan& plan, shard_workspace& ws, shard_answer& out, bool first,
                     uint64_t& budget) const override;
  slice doc_freqs_slice(const query_plan& plan, shard_workspace& ws, uint64_t* df, bool first,
                        uint64_t& budget) const override;
  result<uint32_t, errc> find(std::string_view id) const override;
  result<void, errc> render_story(uint32_t doc, bool with_text, json_out& out) const override;

  /// The answer search() must give, computed the slow, obvious way for tests: tokenizes every
  /// stored story, scores every match (same BM25 formula and summation order), sorts fully.
  /// No postings, no pruning; allocates. Call after finalize().
  void reference_search(const query_plan& plan, shard_answer& out) const;

  size_t doc_count() const noexcept { return docs_.size(); }
  std::string_view id(uint32_t doc) const noexcept;
  /// The text of a sealed shard's `doc`: a view of the stored bytes, or of the calling thread's
  /// scratch buffer once decompressed into it (valid until that thread's next text() call).
  /// No allocation once the scratch has grown to the longest text read. errc::unreadable when
  /// the stored bytes do not decompress (the first such story of the process is logged).
  result<std::string_view, errc> text(uint32_t doc) const;
  /// How many docs hold their text compressed (the others store it raw: empty, or compression
  /// did not make it smaller).
  size_t packed_texts() const noexcept;
  /// Bytes held by the shard: its stored stories and every table of the index, those read in
  /// place from an index file's mapping included (resident or not), and the ones finalize()
  /// derives (prune_index: bitsets, time order, tags, length classes). Capacities, not sizes.
  size_t memory_bytes() const noexcept;
  /// How many frequent words the shard's table of adjacent pairs covers (0: no table).
  size_t pair_words() const noexcept { return pair_terms_.size(); }
  /// How many impact terms the shard has (prune_index), and whether their lists and rows are
  /// an index file's (not derived at load).
  size_t impact_terms() const noexcept { return prune_.impact_terms.size(); }
  bool impact_from_file() const noexcept { return loaded_impact_.valid; }

  /// The persisted index (index_file.cc): save() writes a sealed shard's stories and postings
  /// as sections of `w` tagged with `slot`; load() makes an empty shard the one saved, reading
  /// the sections of `r` (checked already) in place: the stored stories and the posting streams
  /// stay in the mapping `r` holds (kept alive by the shard), the smaller tables are copied.
  /// A finalized shard also saves what finalize() derived, with the average length it used;
  /// finalize() with that same average then keeps what load() read (another recomputes it).
  /// load() returns an empty string or what is inconsistent.
  void save(index_writer& w, uint32_t slot) const;
  std::string load(const index_reader& r, uint32_t slot);

 private:
  static constexpr uint32_t k_escape_id = 1, k_escape_title = 2, k_escape_url = 4, k_escape_by = 8;
  static constexpr uint32_t k_text_raw = 16;  // sealed: the text is stored uncompressed
  struct doc_rec {
    const char* base;  // id, title, url, by back to back (before seal() the text follows)
    uint32_t id_len, title_len, url_len, by_len, text_len;
    uint32_t tags_off;
    uint32_t tag_count;
    uint32_t escape;  // k_escape_* bits: which short fields need JSON escaping; k_text_raw
    int64_t score, comments;
  };
  struct field_views;
  const term_info* lookup_term(std::string_view t) const noexcept;
  int64_t probe_term(std::string_view t, uint64_t h) const noexcept;
  uint32_t intern_term(std::string_view t, uint64_t h);
  int64_t lookup_tag(std::string_view t) const noexcept;
  uint32_t intern_tag(std::string_view t);
  char* arena_alloc(size_t n);
  void pack_stories();      // story_pack.cc
  bool digest_text_dict();  // ddict_ from text_dict_; false: zstd refuses it
  static std::string_view unpacked_text(const doc_rec& r) noexcept;  // before pack_stories()
  void save_derived(index_writer& w, uint32_t slot) const;           // index_file.cc
  bool load_derived(const index_reader& r, uint32_t slot);
  void load_impact(const index_reader& r, uint32_t s);
  struct index_builder;  // index_build.cc
  void build_index(out_buffer* records, std::atomic<uint64_t>* steps);
  struct champ_lists {
    std::vector<double> part;
    std::vector<uint32_t> doc, date;
  };
  void join_champs(std::vector<champ_lists>& parts, const std::vector<size_t>& cut);
  template <class DocKeys>
  void finalize_terms(size_t from, size_t to, const DocKeys& keys, champ_lists& out);
  bool phrase_match(const query_plan& plan, shard_workspace& ws) const;
  // Occurrences of phrase `ph` in the cursors' current doc: 3 per title one + 1 per text one.
  double phrase_freq(const query_plan& plan, const phrase_span& ph, shard_workspace& ws,
                     uint32_t doc) const;
  // The length norm k1 (1 - b + b D / avgdl) of `doc` under the plan's avgdl.
  double length_norm(uint32_t doc, double avgdl) const noexcept;
  posting_cursor cursor_for(const term_info& t) const noexcept;
  void finish(shard_answer& out) const;
  // Evaluation (evaluate.cc): begin_search() opens the cursors and answers what needs no
  // postings walk (true: `out` is final); step() walks until done (true) or out of budget.
  bool begin_search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  bool step(const query_plan& plan, shard_workspace& ws, shard_answer& out, uint64_t& budget) const;
  bool open_cursors(const query_plan& plan, shard_workspace& ws) const;
  template <bool Bounded>  // false: no budget accounting at all (search())
  bool single_term_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                        uint64_t& budget) const;
  template <bool Bounded>
  bool intersect_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                      uint64_t& budget) const;
  bool align(shard_workspace& ws, bool probe, bool& end) const;
  // The impact rows (or length norms; `classes`: and length classes) of the lead block's docs
  // from the current one, once per block.
  void prefetch_lead(shard_workspace& ws, bool classes) const;
  void prefetch_block(shard_workspace& ws, bool classes) const;
  bool accepts(const query_plan& plan, shard_workspace& ws, uint32_t doc) const;
  bool blocks_below(const query_plan& plan, const shard_workspace& ws, double kth) const;
  bool score(const query_plan& plan, shard_workspace& ws, uint32_t doc, bool full, double kth,
             double& s) const;
  uint32_t row_frequency(const shard_workspace& ws, size_t i, uint32_t doc) const;
  void choose_rows(const query_plan& plan, shard_workspace& ws) const;
  void plan_phrase_df(const query_plan& plan, const phrase_span& ph, shard_workspace& ws) const;
  // A two-word phrase's docs in this shard from the table of adjacent pairs; false when either
  // word is not in the table.
  bool pair_total(const query_plan& plan, const phrase_span& ph, uint64_t& total) const;
  // Whether pair terms can stand in for `plan`'s phrases: when every phrase is two words that
  // index their pairs, each phrase as its pair term (the words only in them dropped); else the
  // phrases' adjacent pairs of such words added as terms of weight 0. Sets up ws.pair_plan, and
  // `absent` when one of the pairs never occurs here.
  bool pair_term_plan(const query_plan& plan, shard_workspace& ws, bool& absent) const;
  // The pair term of words a, b (appended to ws.pair_name, viewed by `name`) when both index
  // their pairs here; whether the pair occurs is for the caller to look up.
  bool pair_of(std::string_view a, std::string_view b, shard_workspace& ws,
               std::string_view& name) const;
  // Pruned evaluation (prune.cc): queries without phrases.
  prune_index compute_prune_index() const;
  void begin_pruned(const query_plan& plan, shard_workspace& ws) const;
  void reopen_cursors(shard_workspace& ws) const;
  void remember_phrase_total(const query_plan& plan, const phrase_span& ph, shard_workspace& ws,
                             uint64_t total) const;
  bool known_total(const query_plan& plan, shard_workspace& ws, uint64_t& total) const;
  bool listed_phrase(const query_plan& plan, shard_workspace& ws) const;
  bool listed_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                   uint64_t& budget) const;
  bool lookup_phrase_total(const query_plan& plan, const phrase_span& ph, const shard_workspace& ws,
                           uint64_t& total) const;
  void seed_heap(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  bool impact_top(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  void compute_impact(prune_index& px) const;
  bool pruned_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                   uint64_t& budget) const;
  bool lead_block_bound(const query_plan& plan, shard_workspace& ws) const;
  bool top_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                uint64_t& budget) const;
  double doc_bound(const query_plan& plan, shard_workspace& ws, double kn, bool& end) const;
  uint32_t lead_f_min(const query_plan& plan, shard_workspace& ws, double kn, double kth) const;
  void fill_term_max(shard_workspace& ws) const;
  bool reaches_f_min(const query_plan& plan, shard_workspace& ws, double kth,
                     const posting_cursor& lead) const;
  void top_doc(const query_plan& plan, shard_workspace& ws, std::vector<hit>& heap,
               bool& end) const;
  bool others_dense(const query_plan& plan, const shard_workspace& ws) const noexcept;
  template <bool Offer>
  bool lead_walk(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                 uint64_t& budget) const;
  bool lead_matches(const query_plan& plan, shard_workspace& ws, bool& more) const;
  bool seek_sparse(shard_workspace& ws, uint32_t doc, bool& end) const;
  void offer_match(const query_plan& plan, shard_workspace& ws, std::vector<hit>& heap,
                   uint32_t doc) const;
  double match_bound(const query_plan& plan, shard_workspace& ws, uint32_t doc, double kn) const;
  bool count_dense_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                        uint64_t& budget) const;
  bool single_term_champions(uint32_t term, bool by_date, double idf, size_t k,
                             shard_answer& out) const;
  // Filters and date order (prune.cc): queries without phrases with since/until or tags, or
  // sorted by date.
  bool begin_filtered(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  bool begin_time_walk(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  void time_ranks(const query_plan& plan, uint32_t& lo, uint32_t& hi) const noexcept;
  uint64_t build_filter(const query_plan& plan, shard_workspace& ws) const;
  uint64_t count_sets(const shard_workspace& ws) const noexcept;
  bool filtered_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                     uint64_t& budget) const;
  bool time_walk_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                      uint64_t& budget) const;

  // stored stories
  struct free_deleter {
    free_deleter() noexcept : owned(true) {}
    explicit free_deleter(bool own) noexcept : owned(own) {}
    bool owned;  // false: memory of the index file's mapping (load())
    void operator()(void* p) const noexcept {
      if (owned) {
        std::free(p);
      }
    }
  };
  std::vector<std::unique_ptr<char, free_deleter>> chunks_;
  char* chunk_ptr_ = nullptr;
  size_t chunk_left_ = 0;
  size_t arena_bytes_ = 0;
  std::vector<doc_rec> docs_;
  // Texts once sealed (story_pack.cc): per doc, stored raw (k_text_raw) or compressed alone as
  // one zstd frame with the dictionary text_dict_, back to back in doc order: doc d's bytes
  // are texts_[text_at_[d], text_at_[d + 1]). Owned (a build) or in the index file's mapping.
  struct ddict_deleter {
    void operator()(ZSTD_DDict_s* d) const noexcept;
  };
  std::unique_ptr<uint8_t, free_deleter> texts_;
  size_t texts_bytes_ = 0;
  std::vector<uint64_t> text_at_store_;  // a build's text_at_
  std::span<const uint64_t> text_at_;
  std::vector<uint8_t> text_dict_store_;  // a build's dictionary
  std::span<const uint8_t> text_dict_;
  std::unique_ptr<ZSTD_DDict_s, ddict_deleter> ddict_;  // text_dict_ digested (a copy)
  std::vector<int64_t> time_;
  std::vector<uint64_t> line_;  // build only
  std::vector<uint32_t> doc_tags_;
  std::vector<std::string> tag_names_;
  std::vector<uint8_t> tag_escape_;  // per tag: 1 when its name needs JSON escaping
  std::vector<uint32_t> tag_table_;  // open addressing: tag id + 1, 0 = empty

  // index
  std::vector<uint32_t> title_len_, text_len_;
  std::vector<double> len_norm_;  // per doc: k1 (1 - b + b D / avgdl_)
  double avgdl_ = 1.0;            // the corpus average the norms (and bounds) were made with
  std::vector<char> term_chars_;
  std::vector<term_info> terms_;
  struct term_slot {
    uint64_t key;   // hash bits 40..63 << 40 | length << 32 | term index + 1; 0 = empty
    uint64_t head;  // the term's first 8 bytes, zero padded
  };
  std::vector<term_slot> term_table_;  // open addressing, power-of-two size
  // Posting streams: every byte is written by build_index's scatter, so they are allocated
  // without the zero-fill a vector would do (plus 16 zeroed bytes for over-reading loads).
  std::unique_ptr<uint8_t, free_deleter> doc_stream_, pos_stream_;
  size_t doc_stream_bytes_ = 0, pos_stream_bytes_ = 0;
  std::vector<skip_entry> skips_;
  std::vector<float> block_max_;         // per skip entry: max term_part in the block
  std::vector<int64_t> block_max_time_;  // per skip entry: latest time in the block
  // Champion lists (see champ_len): per term, the first entry of its champ_len entries in
  // champ_part_/champ_doc_ (best term_part first, ties by doc) and champ_date_ (latest time
  // first, ties by doc), or UINT32_MAX when the term has none.
  std::vector<uint32_t> champ_at_;
  std::vector<double> champ_part_;
  std::vector<uint32_t> champ_doc_;
  std::vector<uint32_t> champ_date_;
  prune_index prune_;  // computed by finalize
  // The impact terms' lists and rows as an index file holds them (load_derived), for
  // compute_prune_index to take instead of computing them; valid only with the rest of
  // finalize()'s output read from the same file.
  struct saved_impact {
    bool valid = false;
    std::span<const uint32_t> terms, at, doc;
    std::span<const float> part;
    std::span<const impact_row> rows;
  };
  saved_impact loaded_impact_;
  // Adjacent pairs of frequent words (index_build.cc): the words (term indices) by rank, per
  // term its rank or UINT16_MAX, and per pair (rank a * words + rank b) how many docs hold a
  // directly followed by b within one field.
  std::vector<uint32_t> pair_terms_;
  std::vector<uint16_t> pair_rank_;
  std::vector<uint32_t> pair_docs_;
  uint32_t pair_posting_ranks_ = 0;  // the ranks below it have pair terms
  // Tells shards apart in a workspace's phrase_totals (an address can be reused).
  static uint64_t next_serial() noexcept {
    static std::atomic<uint64_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed) + 1;  // only unique, orders nothing
  }
  const uint64_t serial_ = next_serial();
  shard_stats stats_;
  std::shared_ptr<const void> mapping_;  // the index file a loaded shard's streams point into
  double loaded_avgdl_ = -1;  // load(): the avgdl of the finalize() output read from the file
};

/// 64-bit hash of bytes (little-endian reads); stable across runs and nodes.
uint64_t hash_bytes(std::string_view s) noexcept;

/// How many CPUs this process may run on (its affinity mask, e.g. `taskset` or a cpuset), at
/// least 1: the loading and build threads. More threads than that only take turns on the same
/// cores, each evicting the others' tables from the caches.
uint32_t usable_cpus() noexcept;

}  // namespace tollgate::search
