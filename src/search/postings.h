// A local shard's postings: how the streams are laid out, and posting_cursor, which decodes
// one term's postings (next, seek, skip_block) for every evaluation of local_shard. Header-only:
// the cursor's steps are inline in the evaluation loops.
//
// Postings, per term, in three contiguous streams shared by all terms of the shard:
//   doc stream:  per doc: the doc delta (a varint); its frequencies, one byte
//                (title tf << 5 | text tf) when the title tf is below 4 and the text tf below
//                32, as nearly all are, else the byte 0x80 and two varints (title tf, text tf);
//                the byte length of its positions (a varint). So most postings are three
//                bytes, each below 0x80. Docs come in blocks of 128;
//   positions:   per doc, varints: first position, then deltas. Title tokens take positions
//                0..title_len-1, text tokens start at title_len+1, so phrases never span fields;
//   skips:       per block {last doc, doc-stream end, positions end}, for seek().
#pragma once

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tollgate::search {

inline constexpr uint32_t kBlockDocs = 128;
/// Terms with more than kChampMinDf docs in a shard keep their kChampLen best postings by
/// relevance and by date (computed by finalize), so a one-term query without filters and with
/// k < kChampLen is answered from them without touching the postings.
inline constexpr uint32_t kChampLen = 32;
inline constexpr uint32_t kChampMinDf = kBlockDocs;

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
/// The frequencies byte of a posting whose title tf is below 4 and text tf below 32.
inline constexpr uint32_t kTfTitleMax = 3;
inline constexpr uint32_t kTfTextMax = 31;
inline constexpr uint8_t kTfEscape = 0x80;
inline constexpr uint32_t kTfTitleShift = 5;  ///< the byte is title tf << 5 | text tf
static_assert(kTfTextMax == (1u << kTfTitleShift) - 1 && kTfTitleMax == 0x7Fu >> kTfTitleShift,
              "the frequencies byte stays below 0x80, and the text tf is its low bits");

/// The two frequencies of a frequencies byte below 0x80.
inline void split_tf(uint32_t b, uint32_t& tf_title, uint32_t& tf_text) noexcept {
  tf_title = b >> kTfTitleShift;
  tf_text = b & kTfTextMax;
}

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

/// Reads a posting's frequencies (after its doc delta) and advances p.
inline void read_tf(const uint8_t*& p, uint32_t& tf_title, uint32_t& tf_text) noexcept {
  const uint8_t b = *p++;
  if (b != kTfEscape) {
    split_tf(b, tf_title, tf_text);
  } else {
    tf_title = read_varint(p);
    tf_text = read_varint(p);
  }
}

/// Reads a whole posting (doc delta, frequencies, positions length) and advances p: three
/// one-byte fields, or a two-byte delta and two one-byte fields, from one load when they are
/// (the doc stream is padded, so reading 4 bytes at the last posting stays in bounds).
inline void read_posting(const uint8_t*& p, uint32_t& delta, uint32_t& tf_title, uint32_t& tf_text,
                         uint32_t& pos_len) noexcept {
  uint32_t w;
  std::memcpy(&w, p, 4);
  if ((w & 0x808080u) == 0) {
    delta = w & 0xFF;
    split_tf((w >> 8) & 0xFF, tf_title, tf_text);
    pos_len = (w >> 16) & 0xFF;
    p += 3;
  } else if ((w & 0x80808080u) == 0x80u) {
    // a two-byte doc gap (a rare term's, at every posting) before one-byte fields: four bytes
    delta = (w & 0x7F) | ((w >> 1) & 0x3F80);
    split_tf((w >> 16) & 0xFF, tf_title, tf_text);
    pos_len = w >> 24;
    p += 4;
  } else {
    delta = read_varint(p);
    read_tf(p, tf_title, tf_text);
    pos_len = read_varint(p);
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
  /// seek() with the target's block found by the caller: `blk`, the first block from the
  /// current one whose last doc is >= target (nblocks when none), as blocks_of() gives it.
  bool seek_in(uint32_t target, uint32_t blk) noexcept;
  /// For each of n targets, ascending, the block seek(target) would reach from the current
  /// one (nblocks when none): the current or next one, else found by branch-free binary
  /// searches taken a level at a time for all targets, so that their loads overlap
  /// (phrase_walk_eval).
  void blocks_of(const uint32_t* targets, uint32_t n, uint32_t* out) const noexcept;
  /// Moves to the end of the current block without decoding it; next() enters the next block.
  void skip_block() noexcept;

 private:
  void enter(uint32_t blk) noexcept;       // to the start of block blk (>= 1), undecoded
  bool scan_to(uint32_t target) noexcept;  // to the first doc >= target, in this block
};

inline bool posting_cursor::next() noexcept {
  pos += pos_len;
  if (left == 0) {
    if (block + 1 >= nblocks) {
      doc = UINT32_MAX;
      return false;
    }
    ++block;
    left = std::min(kBlockDocs, df - block * kBlockDocs);
  }
  uint32_t delta;
  detail::read_posting(p, delta, tf_title, tf_text, pos_len);
  doc += delta;
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
    enter(lo);
  }
  return scan_to(target);
}

[[gnu::always_inline]] inline void posting_cursor::enter(uint32_t blk) noexcept {
  block = blk;
  p = doc_base + skips[blk - 1].doc_end;
  pos = pos_base + skips[blk - 1].pos_end;
  doc = skips[blk - 1].last_doc;
  pos_len = 0;
  left = std::min(kBlockDocs, df - blk * kBlockDocs);
}

[[gnu::always_inline]] inline bool posting_cursor::seek_in(uint32_t target, uint32_t blk) noexcept {
  if (doc >= target) {
    return doc != UINT32_MAX;
  }
  if (blk != block) {
    if (blk >= nblocks) {
      doc = UINT32_MAX;
      return false;
    }
    enter(blk);
  }
  return scan_to(target);
}

inline void posting_cursor::blocks_of(const uint32_t* targets, uint32_t n,
                                      uint32_t* out) const noexcept {
  // the current or the next block (seek()'s shortcut), else a search of the blocks after the
  // next, all of the same length: searched in lockstep, one level for every target at a time
  const uint32_t rest = nblocks - block - 1;  // the blocks after the current one
  uint32_t far = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t t = targets[i];
    if (skips[block].last_doc >= t) {
      out[i] = block;
    } else if (rest == 0 || skips[block + 1].last_doc >= t) {
      out[i] = block + 1;  // (nblocks when there is none)
    } else if (rest == 1) {
      out[i] = nblocks;  // past the last block
    } else {
      out[i] = UINT32_MAX;  // searched below, from block + 2
      ++far;
    }
  }
  if (far == 0) {
    return;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (out[i] == UINT32_MAX) {
      out[i] = block + 2;
    }
  }
  // A far target's block is one of block + 2 .. nblocks - 1 (rest - 1 of them), or nblocks
  // past them all: a branch-free lower bound over them, out[i] the first still possible.
  for (uint32_t len = rest - 1; len > 1;) {
    const uint32_t half = len / 2;
    for (uint32_t i = 0; i < n; ++i) {
      if (out[i] >= block + 2) {
        // arithmetic, not a ternary, which GCC compiles to a branch: mispredicted half the
        // time, and a mispredicted search cannot run beside the others
        out[i] += half * static_cast<uint32_t>(skips[out[i] + half - 1].last_doc < targets[i]);
      }
    }
    len -= half;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (out[i] >= block + 2) {
      out[i] += static_cast<uint32_t>(skips[out[i]].last_doc < targets[i]);
    }
  }
}

// The target is in this block (its last doc >= target), so the scan never leaves it: it
// follows only the doc number and the positions offset until the doc is reached.
[[gnu::always_inline]] inline bool posting_cursor::scan_to(uint32_t target) noexcept {
  const uint8_t* q = p;
  const uint8_t* ps = pos + pos_len;
  uint32_t d = doc;
  uint32_t n = left;
#if defined(__SSE2__)
  // Five three-byte postings at a time while the target lies beyond them: their doc gaps
  // (bytes 0, 3, 6, 9, 12) and position lengths (bytes 2, 5, 8, 11, 14) summed by SAD. Five
  // postings are at least 15 bytes, so the 16-byte load reads at most one byte past them, in
  // the stream (its next term, or its padding).
  while (n >= 5) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
    if ((_mm_movemask_epi8(v) & 0x7FFF) != 0) {
      break;  // a longer posting among them
    }
    const __m128i zero = _mm_setzero_si128();
    const __m128i gaps = _mm_setr_epi8(-1, 0, 0, -1, 0, 0, -1, 0, 0, -1, 0, 0, -1, 0, 0, 0);
    const __m128i lens = _mm_setr_epi8(0, 0, -1, 0, 0, -1, 0, 0, -1, 0, 0, -1, 0, 0, -1, 0);
    const __m128i gs = _mm_sad_epu8(_mm_and_si128(v, gaps), zero);
    const uint32_t g = static_cast<uint32_t>(_mm_cvtsi128_si32(gs) + _mm_extract_epi16(gs, 4));
    if (d + g >= target) {
      break;
    }
    const __m128i ls = _mm_sad_epu8(_mm_and_si128(v, lens), zero);
    ps += _mm_cvtsi128_si32(ls) + _mm_extract_epi16(ls, 4);
    d += g;
    q += 15;
    n -= 5;
  }
#endif
  // The postings passed over need only their doc gap and positions length: the frequencies
  // are decoded for the one reached.
  while (true) {
    const uint8_t* at = q;
    uint32_t w;
    std::memcpy(&w, q, 4);
    uint32_t pl;
    if ((w & 0x808080u) == 0) {
      d += w & 0xFF;
      pl = (w >> 16) & 0xFF;
      q += 3;
    } else {
      uint32_t tt, tx;
      d += detail::read_varint(q);
      detail::read_tf(q, tt, tx);
      pl = detail::read_varint(q);
    }
    --n;
    if (d >= target) {
      detail::read_varint(at);
      detail::read_tf(at, tf_title, tf_text);
      p = q;
      pos = ps;
      doc = d;
      pos_len = pl;
      left = n;
      return true;
    }
    ps += pl;
  }
}

namespace detail {
/// Whether two position lists (varint deltas: `a`, `la` bytes, and `b`, `lb` bytes) hold
/// positions p and p + 1: a two-word phrase in the doc. Walks both in step and stops at the
/// first such p, decoding nothing into memory.
inline bool adjacent_positions(const uint8_t* pa, uint32_t la, const uint8_t* pb,
                               uint32_t lb) noexcept {
  const uint8_t* ea = pa + la;
  const uint8_t* eb = pb + lb;
  if (pa >= ea || pb >= eb) {
    return false;
  }
  uint32_t va = read_varint(pa) + 1;  // the position the second word must take
  uint32_t vb = read_varint(pb);
  while (va != vb) {
    // advance whichever list is behind until it catches up or passes the other
    while (va < vb) {
      if (pa >= ea) {
        return false;
      }
      va += read_varint(pa);
    }
    while (vb < va) {
      if (pb >= eb) {
        return false;
      }
      vb += read_varint(pb);
    }
  }
  return true;
}
}  // namespace detail

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

}  // namespace tollgate::search
