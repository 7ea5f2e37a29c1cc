// Private helpers shared by the units of local_shard (storage and hashing in local_shard.cc,
// index_build.cc, finalize.cc, evaluate.cc, reference.cc, render.cc) and by its evaluators
// (evaluators.h): the BM25 arithmetic, varint writing, hit order, the term table's hash, a
// story's field views, and the shard's inline evaluation steps.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "search/local_shard.h"
#include "search/story_head.h"

// The loops whose work is popcounts (the AND of bitsets counted, the filter's bitset sized):
// compiled twice, with the POPCNT instruction and without, the copy picked once at load for
// the CPU (an ifunc). Debian's x86-64 baseline has no POPCNT, and there std::popcount is a call
// into libgcc of about a dozen instructions per word.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__ELF__)
#define TOLLGATE_POPCNT_CLONES __attribute__((target_clones("popcnt", "default")))
#else
#define TOLLGATE_POPCNT_CLONES
#endif

namespace tollgate::search {
namespace detail {

// Build memory that is large and written once front to back (the story arena, the record stream,
// the posting streams): on 4 KB pages it costs a page fault per 4 KB, a sizeable share of the
// 1M-story load. Blocks of at least 4 MB are 2 MB-aligned and advised for transparent huge pages
// (the kernel's "madvise" THP mode; only a hint), which cuts those faults up to 512-fold. Not
// zeroed: callers write every byte they later read. Aborts on ENOMEM.
//
// Such a block starts with the pages of blocks given back by recycle_build(), moved into it
// (mremap) rather than faulted in afresh: this VM hands memory a process frees back to the host
// within a second or two, after which faulting it in again costs ~1.7 s per GB (first touch
// from the host), against ~0.06 s per GB for pages the process keeps. A shard's story arena,
// freed when its stories are packed, so becomes the next shard's posting streams.
void* alloc_build(size_t n);
// Gives back a block from alloc_build (or malloc): a large, 2 MB-aligned one keeps its written
// pages for the next alloc_build until drop_spare_build_pages(); any other is freed.
void recycle_build(void* p);
// Frees the blocks recycle_build() kept (the end of a build: nothing is left to take them).
void drop_spare_build_pages();
// The 2 MB-aligned middle of [p, p + n) advised for huge pages (for memory already allocated).
void advise_huge(void* p, size_t n);
// v becomes n copies of x, its memory advised for huge pages before it is first written: for
// tables of a few MB read at random (on 4 KB pages most of their reads were TLB misses).
template <class T>
void assign_huge(std::vector<T>& v, size_t n, const T& x) {
  std::vector<T>().swap(v);
  v.reserve(n);
  advise_huge(v.data(), n * sizeof(T));
  v.assign(n, x);
}

// v's capacity becomes at least n; past a few MB the new block is advised for huge pages before
// the elements are copied into it (on 4 KB pages the copy and the later writes faulted every 4 KB:
// a 4 KB fault costs this VM about as much as zeroing 2 MB).
template <class T>
void reserve_huge(std::vector<T>& v, size_t n) {
  if (n <= v.capacity()) {
    return;
  }
  std::vector<T> w;
  w.reserve(n);
  if (n * sizeof(T) >= (size_t{4} << 20)) {
    advise_huge(w.data(), n * sizeof(T));
  }
  w.insert(w.end(), v.begin(), v.end());
  v.swap(w);
}
// shrink_to_fit through reserve_huge.
template <class T>
void shrink_huge(std::vector<T>& v) {
  if (v.capacity() > v.size()) {
    std::vector<T> w;
    reserve_huge(w, v.size());
    w.insert(w.end(), v.begin(), v.end());
    v.swap(w);
  }
}
// push_back that grows by doubling through reserve_huge.
template <class T>
void push_huge(std::vector<T>& v, const T& x) {
  if (v.size() == v.capacity()) [[unlikely]] {
    reserve_huge(v, std::max<size_t>(64, 2 * v.capacity()));
  }
  v.push_back(x);
}

// BM25 as SQLite FTS5's bm25(t, 3.0, 1.0) computes it (see query_plan): a title occurrence
// counts 3, a text one 1; every expression below is evaluated in the same order as FTS5's, so
// scores are bit-identical to its for the same corpus statistics.
constexpr double kK1 = 1.2;
constexpr double kB = 0.75;
constexpr double kTitleWeight = 3.0;
constexpr double kTextWeight = 1.0;

// One unit's contribution before idf, for frequency f (weighted) and length norm kn
// (k1 (1 - b + b D / avgdl)). Increasing in f, decreasing in kn.
inline double unit_part(double f, double kn) noexcept { return f * (kK1 + 1.0) / (f + kn); }
inline double term_part(uint32_t tf_title, uint32_t tf_text, double kn) noexcept {
  return unit_part(kTitleWeight * tf_title + kTextWeight * tf_text, kn);
}
// A term_part rounded up to a float: v >= 0, so the next float is the next bit pattern.
inline float round_up(double v) noexcept {
  float f = static_cast<float>(v);
  if (f < v) {
    f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) + 1);
  }
  return f;
}
inline double phrase_weight(const query_plan& plan, size_t p) noexcept {
  return plan.phrase_idf.empty() ? 1.0 : plan.phrase_idf[p];
}
inline double length_norm_of(uint32_t len, double avgdl) noexcept {
  const double d = static_cast<double>(len);
  return kK1 * (1 - kB + kB * d / avgdl);
}

// Writes v as a LEB128 varint at out (room for 5 bytes); returns the bytes written.
inline size_t put_varint(uint8_t* out, uint32_t v) noexcept {
  size_t n = 0;
  while (v >= 0x80) {
    out[n++] = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  out[n++] = static_cast<uint8_t>(v);
  return n;
}

/// Writes a posting's frequencies (postings.h) at out; returns the bytes written (1, or at most
/// 11).
inline size_t put_tf(uint8_t* out, uint32_t tf_title, uint32_t tf_text) noexcept {
  if (tf_title <= detail::kTfTitleMax && tf_text <= detail::kTfTextMax) {
    out[0] = static_cast<uint8_t>(tf_title << detail::kTfTitleShift | tf_text);
    return 1;
  }
  out[0] = detail::kTfEscape;
  size_t h = 1;
  h += put_varint(out + h, tf_title);
  h += put_varint(out + h, tf_text);
  return h;
}

// Copies n bytes, sizeof(Word) <= n <= 2 * sizeof(Word), as two word moves that may overlap.
template <typename Word>
inline void copy_two_words(uint8_t* d, const uint8_t* s, size_t n) noexcept {
  Word a, b;
  std::memcpy(&a, s, sizeof(Word));
  std::memcpy(&b, s + n - sizeof(Word), sizeof(Word));
  std::memcpy(d, &a, sizeof(Word));
  std::memcpy(d + n - sizeof(Word), &b, sizeof(Word));
}

// Copies n bytes exactly (no byte outside [d, d + n) is written); inline for the few-byte
// records of the index build, where a libc memcpy call per record was a tenth of the build.
inline void copy_small(uint8_t* d, const uint8_t* s, size_t n) noexcept {
  if (n > 16) {
    std::memcpy(d, s, n);
  } else if (n >= 8) {
    copy_two_words<uint64_t>(d, s, n);
  } else if (n >= 4) {
    copy_two_words<uint32_t>(d, s, n);
  } else {
    for (size_t i = 0; i < n; ++i) {
      d[i] = s[i];
    }
  }
}

// Hit order: higher key first, then lower doc (== lower id within a shard).
inline bool better(const hit& a, const hit& b) noexcept {
  return a.key > b.key || (a.key == b.key && a.doc < b.doc);
}

// Keeps the best k hits seen in a heap whose front is the worst of them.
inline void offer(std::vector<hit>& heap, size_t k, const hit& h) {
  if (heap.size() < k) {
    heap.push_back(h);
    std::push_heap(heap.begin(), heap.end(), better);
  } else if (better(h, heap.front())) {
    std::pop_heap(heap.begin(), heap.end(), better);
    heap.back() = h;
    std::push_heap(heap.begin(), heap.end(), better);
  }
}

// The first 8 bytes of a term, zero padded: with the length, identifies terms of <= 8 bytes.
// Reads only the term's bytes (overlapping loads instead of a variable-size copy).
inline uint64_t term_head(std::string_view t) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(t.data());
  const size_t n = t.size();
  if (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (n >= 4) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + n - 4, 4);
    return lo | static_cast<uint64_t>(hi) << (8 * (n - 4));
  }
  if (n == 0) {
    return 0;
  }
  return p[0] | static_cast<uint64_t>(p[n / 2]) << (8 * (n / 2)) |
         static_cast<uint64_t>(p[n - 1]) << (8 * (n - 1));
}
// Hash of the term table (shard-internal, never sent): terms of <= 8 bytes, most of
// them, hash their head with one multiply-mix instead of the general byte hash.
inline uint64_t term_hash(std::string_view t) noexcept {
  if (t.size() > 8) {
    return hash_bytes(t);
  }
  uint64_t h = (term_head(t) ^ (t.size() << 59)) * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 32;
  return h;
}
inline uint64_t term_tag(uint64_t h, size_t len) noexcept {
  return (h >> 40) << 8 | std::min<size_t>(len, 255);
}

}  // namespace detail

// A story's short fields and numbers (the text is read with text(), or unpacked_text()
// before seal()).
struct local_shard::field_views : detail::story_head {
  explicit field_views(const doc_rec& r) : story_head(detail::read_head(r.base)) {}
};

inline std::string_view local_shard::unpacked_text(const doc_rec& r) noexcept {
  return {r.base + detail::read_head(r.base).size, r.text_len};
}

inline std::span<const uint32_t> local_shard::tags_of(uint32_t doc) const noexcept {
  const uint32_t from = docs_[doc].tags_off;
  const size_t to = doc + 1 < docs_.size() ? docs_[doc + 1].tags_off : doc_tags_.size();
  return {doc_tags_.data() + from, to - from};
}

// Term table: open addressing over 16-byte slots {hash high bits | length | term index + 1,
// first 8 bytes}. Most terms are at most 8 bytes long and are matched from the slot alone, so
// interning a token costs one cache line instead of three (slot, term_info, name).
// Returns the term index, or -(slot + 1).
inline int64_t local_shard::probe_term(std::string_view t, uint64_t h) const noexcept {
  if (term_table_.empty()) {
    return -1;
  }
  const size_t mask = term_table_.size() - 1;
  const uint64_t tag = detail::term_tag(h, t.size());
  const uint64_t head = detail::term_head(t);
  size_t i = h & mask;
  while (true) {
    const term_slot& v = term_table_[i];
    if (v.key == 0) {
      return -static_cast<int64_t>(i) - 1;
    }
    if ((v.key >> 32) == tag && v.head == head) {
      const uint32_t idx = static_cast<uint32_t>(v.key & 0xFFFFFFFFu) - 1;
      if (t.size() <= 8) {
        return idx;
      }
      const term_info& ti = terms_[idx];
      if (std::string_view(term_chars_.data() + ti.name_off, ti.name_len) == t) {
        return idx;
      }
    }
    i = (i + 1) & mask;
  }
}

// Inline evaluation steps of the shard, shared by its evaluators (evaluators.h).

using namespace detail;

// The filters a posting match must also pass: the time range, the tags, the phrases.
[[gnu::always_inline]] inline bool local_shard::accepts(const query_plan& plan, shard_workspace& ws,
                                                        uint32_t doc) const {
  // time_[doc] is a cache miss: loaded only when the plan has a window
  if (plan.since != std::numeric_limits<int64_t>::min() ||
      plan.until != std::numeric_limits<int64_t>::max()) {
    const int64_t t = time_[doc];
    if (t < plan.since || t > plan.until) {
      return false;
    }
  }
  if (!ws.tag_ids.empty()) {
    const std::span<const uint32_t> dt = tags_of(doc);
    for (uint32_t want : ws.tag_ids) {
      if (std::find(dt.begin(), dt.end(), want) == dt.end()) {
        return false;
      }
    }
  }
  return plan.phrases.empty() || phrase_match(plan, ws);  // stops at each phrase's first occurrence
}

// Once per block of the lead: prefetches the impact row (or length norm) of each of the block's
// docs from the current one, which scoring them reads, and with `classes` their length classes
// (the top-k walk's bounds read both) (prefetch_block). With a stream of distinct queries these
// lines are mostly cache misses; issued together they overlap instead of following one another.
[[gnu::always_inline]] inline void local_shard::prefetch_lead(shard_workspace& ws,
                                                              bool classes) const {
  if (ws.cursors[ws.order[0]].block != ws.ev.pf_block) {
    prefetch_block(ws, classes);
  }
}

// Row term i's weighted frequency in doc (3 x title + text tf), which holds it: from its impact
// row, or, at 255 (that or more), from the term's postings.
inline uint32_t local_shard::row_frequency(const shard_workspace& ws, size_t i,
                                           uint32_t doc) const {
  const uint32_t f = prune_.impact_rows[doc].wf[ws.row_slot[i]];
  if (f != 255) {
    return f;
  }
  posting_cursor c = cursor_for(terms_[ws.term_ids[i]]);
  c.next();
  c.seek(doc);
  return 3 * c.tf_title + c.tf_text;
}

// The BM25 score of the cursors' doc, or false when a full heap's k-th best `kth` is out of
// its reach before the phrases' occurrences are counted (a phrase occurs in a field at most as
// often as each of its words does there).
[[gnu::always_inline]] inline bool local_shard::score(const query_plan& plan, shard_workspace& ws,
                                                      uint32_t doc, bool full, double kth,
                                                      double& s) const {
  // With impact rows, the doc's norm comes from its row's length by the formula len_norm_
  // holds (no cache miss there), and a row term's frequency from its row (never sought).
  const impact_row* row = ws.rows_on ? &prune_.impact_rows[doc] : nullptr;
  const double kn = row != nullptr && row->len < 65535 ? length_norm_of(row->len, ws.ev.avgdl)
                                                       : length_norm(doc, ws.ev.avgdl);
  s = 0;
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    if (plan.idf[i] != 0) {  // a phrase-only term adds nothing of its own
      if (row != nullptr && ws.row_slot[i] != UINT32_MAX) {
        s += plan.idf[i] * unit_part(static_cast<double>(row_frequency(ws, i, doc)), kn);
        continue;
      }
      const posting_cursor& c = ws.cursors[i];
      s += plan.idf[i] * term_part(c.tf_title, c.tf_text, kn);
    }
  }
  if (plan.phrases.empty()) {
    return true;
  }
  if (full) {
    double ub = s;
    for (size_t p = 0; p < plan.phrases.size(); ++p) {
      const phrase_span& ph = plan.phrases[p];
      double f = std::numeric_limits<double>::max();
      for (uint32_t j = 0; j < ph.count; ++j) {
        const posting_cursor& c = ws.cursors[plan.phrase_terms[ph.first + j]];
        f = std::min(f, kTitleWeight * c.tf_title + kTextWeight * c.tf_text);
      }
      ub += phrase_weight(plan, p) * unit_part(f, kn);
    }
    if (ub < kth) {
      return false;
    }
  }
  for (size_t p = 0; p < plan.phrases.size(); ++p) {
    // every occurrence, counted only for the docs that get scored
    s += phrase_weight(plan, p) * unit_part(phrase_freq(plan, plan.phrases[p], ws, doc), kn);
  }
  return true;
}

// Whether the block maxima of the cursors' current blocks cannot reach the k-th best score; a
// phrase's frequency is at most each of its terms', so its part is bounded by theirs.
[[gnu::always_inline]] inline bool local_shard::blocks_below(const query_plan& plan,
                                                             const shard_workspace& ws,
                                                             double kth) const {
  const double bound_scale = ws.ev.bound_scale;
  double ub = 0;
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    ub += plan.idf[i] * (block_max_[c.skip_off + c.block] * bound_scale);
  }
  for (size_t p = 0; p < plan.phrases.size(); ++p) {
    const phrase_span& ph = plan.phrases[p];
    float m = std::numeric_limits<float>::max();
    for (uint32_t j = 0; j < ph.count; ++j) {
      const posting_cursor& c = ws.cursors[plan.phrase_terms[ph.first + j]];
      m = std::min(m, block_max_[c.skip_off + c.block]);
    }
    ub += phrase_weight(plan, p) * (m * bound_scale);
  }
  return ub < kth;
}

}  // namespace tollgate::search
