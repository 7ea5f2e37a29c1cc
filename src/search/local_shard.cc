// local_shard: storage, index build and query evaluation of an in-process shard. See
// local_shard.h for the lifecycle and the postings layout.
#include "search/local_shard.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include <sys/mman.h>

#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

static_assert(std::endian::native == std::endian::little, "posting decoding reads LE words");

constexpr size_t chunk_bytes = size_t{1} << 20;
constexpr size_t huge_page_bytes = size_t{2} << 20;
// A shard's arena switches to chunks of this size (huge-page backed) once it holds 4 MB.
constexpr size_t big_chunk_bytes = size_t{8} << 20;

// Build memory that is large and written once front to back (the story arena, the record stream,
// the posting streams): on 4 KB pages it costs a page fault per 4 KB, a sizeable share of the
// 1M-story load. Blocks of at least 4 MB are 2 MB-aligned and advised for transparent huge pages
// (the kernel's "madvise" THP mode; only a hint), which cuts those faults up to 512-fold. Not
// zeroed: callers write every byte they later read.
void* alloc_build(size_t n) {
  void* p;
  if (n >= 2 * huge_page_bytes) {
    const size_t rounded = (n + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
    p = std::aligned_alloc(huge_page_bytes, rounded);
    if (p != nullptr) {
      ::madvise(p, rounded, MADV_HUGEPAGE);
    }
  } else {
    p = std::malloc(n == 0 ? 1 : n);
  }
  if (p == nullptr) {
    std::fputs("tollgate: out of memory\n", stderr);
    std::abort();
  }
  return p;
}

// The 2 MB-aligned middle of [p, p + n) advised for huge pages (for memory already allocated).
void advise_huge(void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t from = (a + huge_page_bytes - 1) & ~(uintptr_t{huge_page_bytes} - 1);
  const uintptr_t to = (a + n) & ~(uintptr_t{huge_page_bytes} - 1);
  if (to > from) {
    ::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  }
}
// BM25 as SQLite FTS5's bm25(t, 3.0, 1.0) computes it (see query_plan): a title occurrence
// counts 3, a text one 1; every expression below is evaluated in the same order as FTS5's, so
// scores are bit-identical to its for the same corpus statistics.
constexpr double k1 = 1.2;
constexpr double b = 0.75;
constexpr double w_title = 3.0;
constexpr double w_text = 1.0;

// One unit's contribution before idf, for frequency f (weighted) and length norm kn
// (k1 (1 - b + b D / avgdl)). Increasing in f, decreasing in kn.
inline double unit_part(double f, double kn) noexcept { return f * (k1 + 1.0) / (f + kn); }
inline double term_part(uint32_t tf_title, uint32_t tf_text, double kn) noexcept {
  return unit_part(w_title * tf_title + w_text * tf_text, kn);
}
inline double phrase_weight(const query_plan& plan, size_t p) noexcept {
  return plan.phrase_idf.empty() ? 1.0 : plan.phrase_idf[p];
}
inline double length_norm_of(uint32_t len, double avgdl) noexcept {
  const double d = static_cast<double>(len);
  return k1 * (1 - b + b * d / avgdl);
}

using detail::read_varint;

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

// Copies n bytes exactly (no byte outside [d, d + n) is written); inline for the few-byte
// records of the index build, where a libc memcpy call per record was a tenth of the build.
inline void copy_small(uint8_t* d, const uint8_t* s, size_t n) noexcept {
  if (n > 16) {
    std::memcpy(d, s, n);
  } else if (n >= 8) {
    uint64_t a, b;
    std::memcpy(&a, s, 8);
    std::memcpy(&b, s + n - 8, 8);
    std::memcpy(d, &a, 8);
    std::memcpy(d + n - 8, &b, 8);
  } else if (n >= 4) {
    uint32_t a, b;
    std::memcpy(&a, s, 4);
    std::memcpy(&b, s + n - 4, 4);
    std::memcpy(d, &a, 4);
    std::memcpy(d + n - 4, &b, 4);
  } else {
    for (size_t i = 0; i < n; ++i) {
      d[i] = s[i];
    }
  }
}

inline uint64_t mix64(uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

// Hit order: higher key first, then lower doc (== lower id within a shard).
inline bool better(const hit& a, const hit& b) noexcept {
  return a.key > b.key || (a.key == b.key && a.doc < b.doc);
}

// Open-addressing lookup helper: tables hold index + 1, 0 = empty; size is a power of two.
template <class NameOf>
int64_t probe(const std::vector<uint32_t>& table, std::string_view key, NameOf&& name_of) {
  if (table.empty()) {
    return -1;
  }
  size_t mask = table.size() - 1;
  size_t i = hash_bytes(key) & mask;
  while (true) {
    uint32_t v = table[i];
    if (v == 0) {
      return -static_cast<int64_t>(i) - 2;  // empty slot i, encoded as <= -2
    }
    if (name_of(v - 1) == key) {
      return v - 1;
    }
    i = (i + 1) & mask;
  }
}

template <class NameOf>
void rehash(std::vector<uint32_t>& table, size_t count, NameOf&& name_of) {
  size_t size = table.empty() ? 1024 : table.size() * 2;
  std::vector<uint32_t> t(size, 0);
  for (uint32_t k = 0; k < count; ++k) {
    size_t i = hash_bytes(name_of(k)) & (size - 1);
    while (t[i] != 0) {
      i = (i + 1) & (size - 1);
    }
    t[i] = k + 1;
  }
  table.swap(t);
}

}  // namespace

uint64_t hash_bytes(std::string_view s) noexcept {
  const char* p = s.data();
  size_t n = s.size();
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (n * 0xff51afd7ed558ccdULL);
  while (n >= 8) {
    uint64_t k;
    std::memcpy(&k, p, 8);
    h = (h ^ mix64(k)) * 0x9E3779B97F4A7C15ULL;
    p += 8;
    n -= 8;
  }
  uint64_t k = 0;
  for (size_t i = 0; i < n; ++i) {
    k |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  }
  h = (h ^ mix64(k)) * 0x9E3779B97F4A7C15ULL;
  return mix64(h);
}

uint32_t shard_of(std::string_view id, uint32_t shard_count) noexcept {
  return shard_count <= 1 ? 0 : static_cast<uint32_t>(hash_bytes(id) % shard_count);
}

// ---- posting_cursor ----

void posting_cursor::skip_block() noexcept {
  p = doc_base + skips[block].doc_end;
  pos = pos_base + skips[block].pos_end;
  doc = skips[block].last_doc;
  pos_len = 0;
  left = 0;
}

bool posting_cursor::seek(uint32_t target) noexcept {
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

// ---- building ----

local_shard::local_shard() = default;
local_shard::~local_shard() = default;

char* local_shard::arena_alloc(size_t n) {
  if (n > chunk_left_) {
    size_t size = std::max(n, arena_bytes_ >= 4 * chunk_bytes ? big_chunk_bytes : chunk_bytes);
    chunks_.emplace_back(static_cast<char*>(alloc_build(size)));  // filled by add(): no zeroing
    chunk_ptr_ = chunks_.back().get();
    chunk_left_ = size;
    arena_bytes_ += size;
  }
  char* p = chunk_ptr_;
  chunk_ptr_ += n;
  chunk_left_ -= n;
  return p;
}

uint32_t local_shard::intern_tag(std::string_view t) {
  auto name_of = [this](uint32_t i) { return std::string_view(tag_names_[i]); };
  int64_t r = probe(tag_table_, t, name_of);
  if (r >= 0) {
    return static_cast<uint32_t>(r);
  }
  tag_names_.emplace_back(t);
  tag_escape_.push_back(needs_escape(t) ? 1 : 0);
  if (tag_names_.size() * 2 > tag_table_.size()) {
    rehash(tag_table_, tag_names_.size(), name_of);
  } else {
    tag_table_[static_cast<size_t>(-(r + 2))] = static_cast<uint32_t>(tag_names_.size());
  }
  return static_cast<uint32_t>(tag_names_.size() - 1);
}

int64_t local_shard::lookup_tag(std::string_view t) const noexcept {
  int64_t r = probe(tag_table_, t, [this](uint32_t i) { return std::string_view(tag_names_[i]); });
  return r >= 0 ? r : -1;
}

void local_shard::add(const story_in& s, uint64_t line) {
  size_t n = s.id.size() + s.title.size() + s.url.size() + s.by.size() + s.text.size();
  char* p = arena_alloc(n);
  doc_rec r{};
  r.base = p;
  for (std::string_view f : {s.id, s.title, s.url, s.by, s.text}) {
    if (!f.empty()) {
      std::memcpy(p, f.data(), f.size());
    }
    p += f.size();
  }
  r.id_len = static_cast<uint32_t>(s.id.size());
  r.title_len = static_cast<uint32_t>(s.title.size());
  r.url_len = static_cast<uint32_t>(s.url.size());
  r.by_len = static_cast<uint32_t>(s.by.size());
  r.text_len = static_cast<uint32_t>(s.text.size());
  r.escape = (needs_escape(s.id) ? k_escape_id : 0) | (needs_escape(s.title) ? k_escape_title : 0) |
             (needs_escape(s.url) ? k_escape_url : 0) | (needs_escape(s.by) ? k_escape_by : 0);
  r.tags_off = static_cast<uint32_t>(doc_tags_.size());
  r.tag_count = static_cast<uint32_t>(s.tags.size());
  for (std::string_view t : s.tags) {
    doc_tags_.push_back(intern_tag(t));
  }
  r.score = s.score;
  r.comments = s.comments;
  docs_.push_back(r);
  time_.push_back(s.time);
  line_.push_back(line);
}

void local_shard::absorb(local_shard&& o, uint64_t line_base) {
  for (auto& c : o.chunks_) {
    chunks_.push_back(std::move(c));
  }
  arena_bytes_ += o.arena_bytes_;
  docs_.reserve(docs_.size() + o.docs_.size());
  time_.reserve(time_.size() + o.time_.size());
  line_.reserve(line_.size() + o.line_.size());
  for (size_t i = 0; i < o.docs_.size(); ++i) {
    doc_rec r = o.docs_[i];
    r.tags_off = static_cast<uint32_t>(doc_tags_.size());
    for (uint32_t k = 0; k < r.tag_count; ++k) {
      doc_tags_.push_back(intern_tag(o.tag_names_[o.doc_tags_[o.docs_[i].tags_off + k]]));
    }
    docs_.push_back(r);
    time_.push_back(o.time_[i]);
    line_.push_back(o.line_[i] + line_base);
  }
  o.chunks_.clear();
  o.chunk_ptr_ = nullptr;
  o.chunk_left_ = 0;
  o.arena_bytes_ = 0;
  o.docs_.clear();
  o.time_.clear();
  o.line_.clear();
  o.doc_tags_.clear();
}

struct local_shard::field_views {
  std::string_view id, title, url, by, text;
  explicit field_views(const doc_rec& r) {
    const char* p = r.base;
    id = {p, r.id_len};
    p += r.id_len;
    title = {p, r.title_len};
    p += r.title_len;
    url = {p, r.url_len};
    p += r.url_len;
    by = {p, r.by_len};
    p += r.by_len;
    text = {p, r.text_len};
  }
};

std::string_view local_shard::id(uint32_t doc) const noexcept {
  return {docs_[doc].base, docs_[doc].id_len};
}

void local_shard::seal(std::vector<load_issue>& dups) {
  std::vector<uint32_t> order(docs_.size());
  for (uint32_t i = 0; i < order.size(); ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(), [this](uint32_t a, uint32_t b) {
    std::string_view ia = id(a), ib = id(b);
    if (ia != ib) {
      return id_less(ia, ib);
    }
    return line_[a] < line_[b];
  });
  std::vector<doc_rec> docs;
  std::vector<int64_t> times;
  docs.reserve(docs_.size());
  times.reserve(docs_.size());
  for (size_t k = 0; k < order.size(); ++k) {
    uint32_t i = order[k];
    if (!docs.empty() && std::string_view(docs.back().base, docs.back().id_len) == id(i)) {
      dups.push_back({line_[i], fmt::format("duplicate id \"{}\" (first seen on line {})", id(i),
                                            line_[order[k - 1]])});
      // keep order[k-1] pointing at the first occurrence for later duplicates
      order[k] = order[k - 1];
      continue;
    }
    docs.push_back(docs_[i]);
    times.push_back(time_[i]);
  }
  docs_.swap(docs);
  time_.swap(times);
  std::vector<uint64_t>().swap(line_);
  build_index();
}

namespace {
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
// Hash of the term table (shard-internal, never stored or sent): terms of <= 8 bytes, most of
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
}  // namespace

// Term table: open addressing over 16-byte slots {hash high bits | length | term index + 1,
// first 8 bytes}. Most terms are at most 8 bytes long and are matched from the slot alone, so
// interning a token costs one cache line instead of three (slot, term_info, name).
// Returns the term index, or -(slot + 1).
int64_t local_shard::probe_term(std::string_view t, uint64_t h) const noexcept {
  if (term_table_.empty()) {
    return -1;
  }
  const size_t mask = term_table_.size() - 1;
  const uint64_t tag = term_tag(h, t.size());
  const uint64_t head = term_head(t);
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

uint32_t local_shard::intern_term(std::string_view tok, uint64_t h) {
  int64_t r = probe_term(tok, h);
  if (r >= 0) {
    return static_cast<uint32_t>(r);
  }
  term_info ti{};
  ti.name_off = static_cast<uint32_t>(term_chars_.size());
  ti.name_len = static_cast<uint32_t>(tok.size());
  term_chars_.insert(term_chars_.end(), tok.begin(), tok.end());
  terms_.push_back(ti);
  const term_slot slot{term_tag(h, tok.size()) << 32 | terms_.size(), term_head(tok)};
  if (terms_.size() * 2 > term_table_.size()) {
    size_t size = term_table_.empty() ? 4096 : term_table_.size() * 2;
    std::vector<term_slot> t(size, term_slot{0, 0});
    for (size_t k = 0; k < terms_.size(); ++k) {
      const term_info& x = terms_[k];
      const std::string_view name(term_chars_.data() + x.name_off, x.name_len);
      const uint64_t hk = term_hash(name);
      size_t i = hk & (size - 1);
      while (t[i].key != 0) {
        i = (i + 1) & (size - 1);
      }
      t[i] = {term_tag(hk, name.size()) << 32 | (k + 1), term_head(name)};
    }
    term_table_.swap(t);
  } else {
    term_table_[static_cast<size_t>(-(r + 1))] = slot;
  }
  return static_cast<uint32_t>(terms_.size() - 1);
}

// Two passes, so the per-term work touches small arrays instead of one growing vector per term
// (which made every (doc, term) pair a cache miss):
//   1. per doc: tokenize, group occurrences by term, append one record per (term, doc) to a
//      sequential stream [term][doc delta, tf title, tf text, positions length][positions] and
//      count each term's df and exact byte sizes;
//   2. lay the terms out with prefix sums, then copy every record to its term's place.
void local_shard::build_index() {
  const uint32_t n = static_cast<uint32_t>(docs_.size());
  title_len_.assign(n, 0);
  text_len_.assign(n, 0);
  stats_ = {};
  stats_.docs = n;
  struct term_count {
    uint64_t doc_bytes = 0;
    uint64_t pos_bytes = 0;
    uint32_t df = 0;
    uint32_t last_doc = 0;
  };
  std::vector<term_count> counts;
  // The grouping's per-term mark, apart from the counts so that it is 8 bytes a term (a rare
  // term's mark is a cache miss; it is prefetched as soon as the token is interned).
  struct term_mark {
    uint32_t seen = 0;   // d + 1 when the term occurs in doc d being grouped
    uint32_t group = 0;  // its group in that doc
  };
  std::vector<term_mark> marks;
  out_buffer rec_buf;  // the record stream (realloc growth, no zero-filling)
  {
    size_t text_bytes = 0;
    for (const doc_rec& r : docs_) {
      text_bytes += r.title_len + r.text_len;
    }
    rec_buf.reserve(text_bytes / 2 + text_bytes / 8 + 1024);
    advise_huge(rec_buf.data(), rec_buf.capacity());
  }
  // Per doc: the tokens (copied: a token_stream's view lasts until its next call) with their
  // hashes, whose term-table slots are prefetched before any is probed (the probes of rare terms
  // were cache misses one after another); then the occurrences are grouped by term in
  // first-seen order through a per-term mark instead of sorting (term, position) pairs. The
  // order of a doc's records in the stream does not matter: pass 2 scatters them per term.
  out_buffer tok_chars;
  struct tok_ref {
    uint32_t off, len;
    uint64_t hash;
  };
  std::vector<tok_ref> toks;
  std::vector<uint32_t> occ_term, occ_group, group_term, group_start, sorted_pos;
  std::vector<uint8_t> pbuf(256);
  for (uint32_t d = 0; d < n; ++d) {
    field_views f(docs_[d]);
    tok_chars.clear();
    toks.clear();
    std::string_view tok;
    token_stream title(f.title);
    while (title.next(tok)) {
      toks.push_back({static_cast<uint32_t>(tok_chars.size()), static_cast<uint32_t>(tok.size()), 0});
      copy_small(reinterpret_cast<uint8_t*>(tok_chars.prepare(tok.size())),
                 reinterpret_cast<const uint8_t*>(tok.data()), tok.size());
      tok_chars.commit(tok.size());
    }
    const uint32_t tl = static_cast<uint32_t>(toks.size());
    token_stream text(f.text);
    while (text.next(tok)) {
      toks.push_back({static_cast<uint32_t>(tok_chars.size()), static_cast<uint32_t>(tok.size()), 0});
      copy_small(reinterpret_cast<uint8_t*>(tok_chars.prepare(tok.size())),
                 reinterpret_cast<const uint8_t*>(tok.data()), tok.size());
      tok_chars.commit(tok.size());
    }
    const uint32_t nocc = static_cast<uint32_t>(toks.size());
    const uint32_t xl = nocc - tl;
    for (tok_ref& t : toks) {
      t.hash = term_hash(std::string_view(tok_chars.data() + t.off, t.len));
      if (!term_table_.empty()) {
        __builtin_prefetch(&term_table_[t.hash & (term_table_.size() - 1)]);
      }
    }
    occ_term.resize(nocc);
    for (uint32_t k = 0; k < nocc; ++k) {
      const uint32_t t = intern_term(
          std::string_view(tok_chars.data() + toks[k].off, toks[k].len), toks[k].hash);
      occ_term[k] = t;
      if (t < marks.size()) {  // a term new to this doc's batch has no mark yet: nothing to fetch
        __builtin_prefetch(&marks[t], 1);
      }
    }
    title_len_[d] = tl;
    text_len_[d] = xl;
    stats_.title_tokens += tl;
    stats_.text_tokens += xl;
    if (counts.size() < terms_.size()) {
      counts.resize(terms_.size() + terms_.size() / 2);
      marks.resize(counts.size());
    }
    // Group: occurrence k has position k (title) or k + 1 (text, after the title's gap).
    group_term.clear();
    group_start.clear();
    occ_group.resize(nocc);
    for (uint32_t k = 0; k < nocc; ++k) {
      term_mark& c = marks[occ_term[k]];
      if (c.seen != d + 1) {
        c.seen = d + 1;
        c.group = static_cast<uint32_t>(group_term.size());
        group_term.push_back(occ_term[k]);
        __builtin_prefetch(&counts[occ_term[k]], 1);  // written once the group's record is made
        group_start.push_back(0);
      }
      ++group_start[c.group];
      occ_group[k] = c.group;
    }
    const uint32_t ng = static_cast<uint32_t>(group_term.size());
    uint32_t sum = 0;
    for (uint32_t g = 0; g < ng; ++g) {
      const uint32_t cnt = group_start[g];
      group_start[g] = sum;
      sum += cnt;
    }
    group_start.push_back(sum);
    sorted_pos.resize(nocc);
    for (uint32_t k = 0; k < nocc; ++k) {
      // group_start[g] advances to the group's end while filling; restored below
      sorted_pos[group_start[occ_group[k]]++] = k < tl ? k : k + 1;
    }
    for (uint32_t g = ng; g > 0; --g) {
      group_start[g] = group_start[g - 1];
    }
    group_start[0] = 0;
    for (uint32_t g = 0; g < ng; ++g) {
      const uint32_t t = group_term[g];
      const uint32_t i = group_start[g], j = group_start[g + 1];
      uint32_t tft = 0;
      for (uint32_t k = i; k < j && sorted_pos[k] < tl; ++k) {
        ++tft;
      }
      const uint32_t tfx = (j - i) - tft;
      pbuf.resize(std::max<size_t>(pbuf.size(), size_t{j - i} * 5));
      size_t pos_len = 0;
      uint32_t prev = 0;
      for (uint32_t k = i; k < j; ++k) {
        const uint32_t p = sorted_pos[k];
        pos_len += put_varint(pbuf.data() + pos_len, k == i ? p : p - prev);
        prev = p;
      }
      term_count& c = counts[t];
      uint8_t* out = reinterpret_cast<uint8_t*>(rec_buf.prepare(25 + pos_len));
      size_t h = put_varint(out, t);
      const size_t entry_at = h;
      h += put_varint(out + h, d - c.last_doc);
      h += put_varint(out + h, tft);
      h += put_varint(out + h, tfx);
      h += put_varint(out + h, static_cast<uint32_t>(pos_len));
      copy_small(out + h, pbuf.data(), pos_len);
      rec_buf.commit(h + pos_len);
      c.doc_bytes += h - entry_at;
      c.pos_bytes += pos_len;
      c.last_doc = d;
      ++c.df;
    }
  }
  // Pass 2: layout, then scatter the records.
  const size_t nt = terms_.size();
  struct term_write {
    uint64_t doc_w;
    uint64_t pos_w;
    uint32_t skip_w;
    uint32_t cur;
    uint32_t cnt;
    uint32_t df;
  };
  std::vector<term_write> w(nt);
  uint64_t doc_total = 0, pos_total = 0;
  uint32_t skip_total = 0;
  for (size_t t = 0; t < nt; ++t) {
    const term_count& c = counts[t];
    term_info& ti = terms_[t];
    ti.doc_off = doc_total;
    ti.pos_off = pos_total;
    ti.skip_off = skip_total;
    ti.df = c.df;
    w[t] = {doc_total, pos_total, skip_total, 0, 0, c.df};
    doc_total += c.doc_bytes;
    pos_total += c.pos_bytes;
    skip_total += (c.df + block_docs - 1) / block_docs;
  }
  std::vector<term_count>().swap(counts);
  std::vector<term_mark>().swap(marks);
  doc_stream_bytes_ = doc_total + 16;
  pos_stream_bytes_ = pos_total + 16;
  doc_stream_.reset(static_cast<uint8_t*>(alloc_build(doc_stream_bytes_)));
  pos_stream_.reset(static_cast<uint8_t*>(alloc_build(pos_stream_bytes_)));
  std::memset(doc_stream_.get() + doc_total, 0, 16);
  std::memset(pos_stream_.get() + pos_total, 0, 16);
  skips_.assign(skip_total, skip_entry{});
  // Software-pipelined: a record is decoded (and its w[t] prefetched) ring_size records before
  // it is copied, and its destinations are prefetched half-way, from w[t] as it is then (a later
  // record of the same term moves them by a few bytes: still the right lines, mostly). The
  // scattered w[t] loads and destination writes were most of this pass.
  struct pending {
    const uint8_t* entry;  // doc delta, tf title, tf text, positions length
    uint32_t t;
    uint32_t delta;
    uint32_t entry_len;
    uint32_t pos_len;
  };
  constexpr uint32_t ring_size = 16;  // a power of two
  constexpr uint32_t dest_lead = ring_size / 2;
  pending ring[ring_size];
  const uint8_t* p = reinterpret_cast<const uint8_t*>(rec_buf.data());
  const uint8_t* end = p + rec_buf.size();
  auto decode = [&p, &w](pending& r) {
    r.t = read_varint(p);
    r.entry = p;
    r.delta = read_varint(p);
    read_varint(p);
    read_varint(p);
    r.pos_len = read_varint(p);
    r.entry_len = static_cast<uint32_t>(p - r.entry);
    p += r.pos_len;
    __builtin_prefetch(&w[r.t], 1);
  };
  uint32_t head = 0;  // records decoded
  uint32_t tail = 0;  // records copied
  while (head - tail < ring_size && p < end) {
    decode(ring[head++ % ring_size]);
  }
  while (tail != head) {
    if (head - tail > dest_lead) {
      const pending& a = ring[(tail + dest_lead) % ring_size];
      const term_write& aw = w[a.t];
      __builtin_prefetch(doc_stream_.get() + aw.doc_w, 1);
      __builtin_prefetch(pos_stream_.get() + aw.pos_w, 1);
      if (aw.df - aw.cnt <= ring_size) {  // likely its last record: the skip reads terms_[t]
        __builtin_prefetch(&terms_[a.t]);
      }
    }
    const pending r = ring[tail++ % ring_size];
    if (p < end) {
      decode(ring[head++ % ring_size]);
    }
    const uint32_t t = r.t;
    const uint32_t delta = r.delta;
    const size_t entry_len = r.entry_len;
    const uint32_t pos_len = r.pos_len;
    term_write& tw = w[t];
    copy_small(doc_stream_.get() + tw.doc_w, r.entry, entry_len);
    copy_small(pos_stream_.get() + tw.pos_w, r.entry + entry_len, pos_len);
    tw.doc_w += entry_len;
    tw.pos_w += pos_len;
    tw.cur += delta;
    ++tw.cnt;
    if (tw.cnt % block_docs == 0 || tw.cnt == tw.df) {
      const term_info& ti = terms_[t];
      skips_[tw.skip_w++] = {tw.cur, static_cast<uint32_t>(tw.doc_w - ti.doc_off),
                             tw.pos_w - ti.pos_off};
    }
  }
  rec_buf = out_buffer();
  term_chars_.shrink_to_fit();
  terms_.shrink_to_fit();
  doc_tags_.shrink_to_fit();
}

namespace {
// A doc's BM25 length norm and time as finalize_terms reads them (see finalize).
struct packed_doc_keys {
  static constexpr uint32_t max_len = 1u << 16;
  std::vector<uint64_t> key;  // time - base_time << 32 | length
  std::vector<double> norm;   // per length: length_norm_of(length, avgdl_)
  int64_t base_time = 0;
  double norm_of(uint64_t k) const noexcept { return norm[static_cast<uint32_t>(k)]; }
  int64_t time(uint64_t k) const noexcept {
    return static_cast<int64_t>(static_cast<uint64_t>(base_time) + (k >> 32));
  }
};
struct wide_doc_keys {
  struct entry {
    double norm;
    int64_t time;
  };
  std::vector<entry> key;
  static double norm_of(const entry& e) noexcept { return e.norm; }
  static int64_t time(const entry& e) noexcept { return e.time; }
};
}  // namespace

void local_shard::finalize(const shard_stats& global) {
  avgdl_ = average_length(global);
  len_norm_.resize(docs_.size());
  for (size_t d = 0; d < docs_.size(); ++d) {
    len_norm_[d] = length_norm_of(title_len_[d] + text_len_[d], avgdl_);
  }
  // Per block: the largest term_part and the latest time of its docs, for skipping blocks and
  // scoring that cannot reach the current top k. Per frequent term: its champion lists. The
  // backend finalizes shards one after another, so a large shard splits its terms over threads
  // (ranges of about equal postings; each writes its own blocks and its own champion lists,
  // which are then joined in term order).
  block_max_.assign(skips_.size(), 0.0f);
  block_max_time_.assign(skips_.size(), std::numeric_limits<int64_t>::min());
  champ_at_.assign(terms_.size(), UINT32_MAX);
  uint64_t postings = 0;
  for (const term_info& t : terms_) {
    postings += t.df;
  }
  const uint32_t threads =
      postings < parallel_finalize_postings ? 1 : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<champ_lists> parts(threads);
  std::vector<size_t> cut(threads + 1, terms_.size());
  cut[0] = 0;
  {
    uint64_t seen = 0;
    uint32_t next_cut = 1;
    for (size_t ti = 0; ti < terms_.size() && next_cut < threads; ++ti) {
      seen += terms_[ti].df;
      if (seen * threads >= postings * next_cut) {
        cut[next_cut++] = ti + 1;
      }
    }
  }
  // Every posting reads its doc's norm and time, a cache miss for most (a rare term's docs are
  // anywhere). Both come from one 8-byte key per doc when they fit (the length, whose norm is
  // looked up in a small table of the same values len_norm_ holds, and the time less the
  // shard's earliest), else from one 16-byte pair: one miss per posting instead of two.
  auto run = [&](const auto& keys) {
    if (threads == 1) {
      finalize_terms(0, terms_.size(), keys, parts[0]);
    } else {
      std::vector<std::thread> pool;
      for (uint32_t i = 0; i < threads; ++i) {
        pool.emplace_back(
            [this, &parts, &cut, &keys, i] { finalize_terms(cut[i], cut[i + 1], keys, parts[i]); });
      }
      for (std::thread& th : pool) {
        th.join();
      }
    }
  };
  uint32_t max_len = 0;
  int64_t min_time = std::numeric_limits<int64_t>::max(), max_time = min_time;
  for (size_t d = 0; d < docs_.size(); ++d) {
    max_len = std::max(max_len, title_len_[d] + text_len_[d]);
    min_time = std::min(min_time, time_[d]);
    max_time = d == 0 ? time_[d] : std::max(max_time, time_[d]);
  }
  if (!docs_.empty() && max_len <= packed_doc_keys::max_len &&
      static_cast<uint64_t>(max_time) - static_cast<uint64_t>(min_time) <= UINT32_MAX) {
    packed_doc_keys keys;
    keys.norm.resize(max_len + 1);
    for (uint32_t l = 0; l <= max_len; ++l) {
      keys.norm[l] = length_norm_of(l, avgdl_);
    }
    keys.base_time = min_time;
    keys.key.resize(docs_.size());
    for (size_t d = 0; d < docs_.size(); ++d) {
      keys.key[d] = (static_cast<uint64_t>(time_[d]) - static_cast<uint64_t>(min_time)) << 32 |
                    (title_len_[d] + text_len_[d]);
    }
    run(keys);
  } else {
    wide_doc_keys keys;
    keys.key.resize(docs_.size());
    for (size_t d = 0; d < docs_.size(); ++d) {
      keys.key[d] = {len_norm_[d], time_[d]};
    }
    run(keys);
  }
  champ_part_.clear();
  champ_doc_.clear();
  champ_date_.clear();
  for (uint32_t i = 0; i < threads; ++i) {
    const uint32_t base = static_cast<uint32_t>(champ_doc_.size());
    for (size_t ti = cut[i]; ti < cut[i + 1]; ++ti) {
      if (champ_at_[ti] != UINT32_MAX) {
        champ_at_[ti] += base;
      }
    }
    champ_part_.insert(champ_part_.end(), parts[i].part.begin(), parts[i].part.end());
    champ_doc_.insert(champ_doc_.end(), parts[i].doc.begin(), parts[i].doc.end());
    champ_date_.insert(champ_date_.end(), parts[i].date.begin(), parts[i].date.end());
  }
}

// Block maxima and champion lists of terms [from, to); champ_at_ gets offsets into `out`.
template <class DocKeys>
void local_shard::finalize_terms(size_t from, size_t to, const DocKeys& keys, champ_lists& out) {
  struct scored {
    double key;
    uint32_t doc;
  };
  // heap order: the worst entry at the front (higher key first, then lower doc is better)
  auto worse = [](const scored& a, const scored& b) {
    return a.key > b.key || (a.key == b.key && a.doc < b.doc);
  };
  std::vector<scored> rel, date;
  rel.reserve(champ_len);
  date.reserve(champ_len);
  auto offer_champ = [&worse](std::vector<scored>& h, const scored& x) {
    if (h.size() < champ_len) {
      h.push_back(x);
      std::push_heap(h.begin(), h.end(), worse);
    } else if (worse(x, h.front())) {
      std::pop_heap(h.begin(), h.end(), worse);
      h.back() = x;
      std::push_heap(h.begin(), h.end(), worse);
    }
  };
  // A second reader walks the doc streams of terms [from, to) (laid out one after another in
  // term order) ahead_docs postings ahead of the cursors and prefetches its docs' keys.
  constexpr uint32_t ahead_docs = 16;
  const uint8_t* const stream = doc_stream_.get();
  auto stream_end_of = [this](size_t ti) {
    return ti + 1 < terms_.size() ? terms_[ti + 1].doc_off : doc_stream_bytes_ - 16;
  };
  size_t ahead_term = from;
  const uint8_t* ahead = from < to ? stream + terms_[from].doc_off : nullptr;
  const uint8_t* ahead_end = from < to ? stream + stream_end_of(from) : nullptr;
  uint32_t ahead_doc = 0;
  auto step_ahead = [&] {
    while (ahead == ahead_end) {
      if (++ahead_term >= to) {
        return;
      }
      ahead_end = stream + stream_end_of(ahead_term);
      ahead_doc = 0;
    }
    uint32_t word;
    std::memcpy(&word, ahead, 4);  // the stream ends in 16 bytes of padding
    if ((word & 0x80808080u) == 0) {
      ahead_doc += word & 0xFF;
      ahead += 4;
    } else {
      ahead_doc += read_varint(ahead);
      read_varint(ahead);
      read_varint(ahead);
      read_varint(ahead);
    }
    __builtin_prefetch(keys.key.data() + ahead_doc);
  };
  for (uint32_t i = 0; i < ahead_docs && ahead_term < to; ++i) {
    step_ahead();
  }
  for (size_t ti = from; ti < to; ++ti) {
    const term_info& t = terms_[ti];
    const bool champs = t.df > champ_min_df;
    rel.clear();
    date.clear();
    posting_cursor c = cursor_for(t);
    while (c.next()) {
      if (ahead_term < to) {
        step_ahead();
      }
      const auto k = keys.key[c.doc];
      const int64_t doc_time = keys.time(k);
      double v = term_part(c.tf_title, c.tf_text, keys.norm_of(k));
      float& m = block_max_[t.skip_off + c.block];
      float f = static_cast<float>(v);
      if (f < v) {  // round up: v >= 0, so the next float is the next bit pattern
        f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) + 1);
      }
      m = std::max(m, f);
      int64_t& mt = block_max_time_[t.skip_off + c.block];
      mt = std::max(mt, doc_time);
      if (champs) {
        // docs arrive in ascending order, so an equal key never displaces an entry
        if (rel.size() < champ_len || v > rel.front().key) {
          offer_champ(rel, {v, c.doc});
        }
        const double tm = static_cast<double>(doc_time);
        if (date.size() < champ_len || tm > date.front().key) {
          offer_champ(date, {tm, c.doc});
        }
      }
    }
    if (champs) {
      std::sort_heap(rel.begin(), rel.end(), worse);
      std::sort_heap(date.begin(), date.end(), worse);
      champ_at_[ti] = static_cast<uint32_t>(out.doc.size());
      for (const scored& x : rel) {
        out.part.push_back(x.key);
        out.doc.push_back(x.doc);
      }
      for (const scored& x : date) {
        out.date.push_back(x.doc);
      }
    }
  }
}

posting_cursor local_shard::cursor_for(const term_info& t) const noexcept {
  posting_cursor c{};
  c.doc_base = doc_stream_.get() + t.doc_off;
  c.p = c.doc_base;
  c.pos_base = pos_stream_.get() + t.pos_off;
  c.pos = c.pos_base;
  c.skips = skips_.data() + t.skip_off;
  c.df = t.df;
  c.nblocks = (t.df + block_docs - 1) / block_docs;
  c.left = std::min(block_docs, t.df);
  c.skip_off = t.skip_off;
  return c;
}

// ---- queries ----

const term_info* local_shard::lookup_term(std::string_view t) const noexcept {
  int64_t r = probe_term(t, term_hash(t));
  return r >= 0 ? &terms_[static_cast<size_t>(r)] : nullptr;
}

bool local_shard::add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const {
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    if (const term_info* t = lookup_term(plan.terms[i])) {
      df[i] += t->df;
    }
  }
  // A phrase's stories: the phrase searched on its own (its distinct terms, the phrase, no
  // filters; k = 1 by date, the cheapest ranking), whose total is exact.
  for (size_t p = 0; p < plan.phrases.size(); ++p) {
    const phrase_span& ph = plan.phrases[p];
    ws.sub_terms.clear();
    ws.sub_phrase_terms.clear();
    for (uint32_t j = 0; j < ph.count; ++j) {
      const std::string_view t = plan.terms[plan.phrase_terms[ph.first + j]];
      const auto at = std::find(ws.sub_terms.begin(), ws.sub_terms.end(), t);
      ws.sub_phrase_terms.push_back(static_cast<uint32_t>(at - ws.sub_terms.begin()));
      if (at == ws.sub_terms.end()) {
        ws.sub_terms.push_back(t);
      }
    }
    const phrase_span whole{0, ph.count};
    query_plan sub{};
    sub.terms = ws.sub_terms;
    sub.phrases = std::span<const phrase_span>(&whole, 1);
    sub.phrase_terms = ws.sub_phrase_terms;
    sub.since = std::numeric_limits<int64_t>::min();
    sub.until = std::numeric_limits<int64_t>::max();
    sub.sort = sort_order::date;
    sub.k = 1;
    search(sub, ws, ws.sub_answer);
    df[plan.terms.size() + p] += ws.sub_answer.total;
  }
  return true;
}

double local_shard::length_norm(uint32_t doc, double avgdl) const noexcept {
  return avgdl == 0 || avgdl == avgdl_ ? len_norm_[doc]
                                       : length_norm_of(title_len_[doc] + text_len_[doc], avgdl);
}

namespace {
// Decodes the positions of a cursor's current doc into out.
void decode_positions(const posting_cursor& c, std::vector<uint32_t>& out) {
  out.clear();
  const uint8_t* p = c.pos;
  const uint8_t* end = p + c.pos_len;
  uint32_t v = 0;
  bool first = true;
  while (p < end) {
    uint32_t d = read_varint(p);
    v = first ? d : v + d;
    first = false;
    out.push_back(v);
  }
}
}  // namespace

namespace {
// Two-word phrase: walks both position lists (varint deltas) in step and stops at the first p
// with p + 1 in the second list, decoding nothing into memory.
bool adjacent_pair(const posting_cursor& a, const posting_cursor& b) noexcept {
  const uint8_t* pa = a.pos;
  const uint8_t* ea = pa + a.pos_len;
  const uint8_t* pb = b.pos;
  const uint8_t* eb = pb + b.pos_len;
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
}  // namespace

bool local_shard::phrase_match(const query_plan& plan, shard_workspace& ws) const {
  for (const phrase_span& ph : plan.phrases) {
    if (ph.count < 2) {
      continue;
    }
    if (ph.count == 2) {
      if (!adjacent_pair(ws.cursors[plan.phrase_terms[ph.first]],
                         ws.cursors[plan.phrase_terms[ph.first + 1]])) {
        return false;
      }
      continue;
    }
    decode_positions(ws.cursors[plan.phrase_terms[ph.first]], ws.pos_a);
    for (uint32_t j = 1; j < ph.count && !ws.pos_a.empty(); ++j) {
      decode_positions(ws.cursors[plan.phrase_terms[ph.first + j]], ws.pos_b);
      // keep p in pos_a where p + j is in pos_b (both ascending)
      size_t w = 0, b = 0;
      for (size_t a = 0; a < ws.pos_a.size(); ++a) {
        uint32_t want = ws.pos_a[a] + j;
        while (b < ws.pos_b.size() && ws.pos_b[b] < want) {
          ++b;
        }
        if (b < ws.pos_b.size() && ws.pos_b[b] == want) {
          ws.pos_a[w++] = ws.pos_a[a];
        }
      }
      ws.pos_a.resize(w);
    }
    if (ws.pos_a.empty()) {
      return false;
    }
  }
  return true;
}

namespace {
// Two-word phrase, every occurrence: like adjacent_pair, without stopping at the first; counts
// the occurrences starting in the title (positions below tl) and in the text.
void adjacent_pairs(const posting_cursor& a, const posting_cursor& b, uint32_t tl,
                    uint32_t& in_title, uint32_t& in_text) noexcept {
  const uint8_t* pa = a.pos;
  const uint8_t* ea = pa + a.pos_len;
  const uint8_t* pb = b.pos;
  const uint8_t* eb = pb + b.pos_len;
  if (pa >= ea || pb >= eb) {
    return;
  }
  uint32_t va = read_varint(pa) + 1;  // the position the second word must take
  uint32_t vb = read_varint(pb);
  while (true) {
    if (va == vb) {
      (va - 1 < tl ? in_title : in_text) += 1;
      if (pa >= ea || pb >= eb) {
        return;
      }
      va += read_varint(pa);
      vb += read_varint(pb);
    } else if (va < vb) {
      if (pa >= ea) {
        return;
      }
      va += read_varint(pa);
    } else {
      if (pb >= eb) {
        return;
      }
      vb += read_varint(pb);
    }
  }
}
}  // namespace

double local_shard::phrase_freq(const query_plan& plan, const phrase_span& ph,
                                shard_workspace& ws, uint32_t doc) const {
  const uint32_t tl = title_len_[doc];  // title positions are 0..tl-1, text ones from tl + 1
  uint32_t in_title = 0, in_text = 0;
  if (ph.count == 2) {
    adjacent_pairs(ws.cursors[plan.phrase_terms[ph.first]],
                   ws.cursors[plan.phrase_terms[ph.first + 1]], tl, in_title, in_text);
    return w_title * in_title + w_text * in_text;
  }
  decode_positions(ws.cursors[plan.phrase_terms[ph.first]], ws.pos_a);
  for (uint32_t j = 1; j < ph.count && !ws.pos_a.empty(); ++j) {
    decode_positions(ws.cursors[plan.phrase_terms[ph.first + j]], ws.pos_b);
    size_t w = 0, bi = 0;
    for (size_t a = 0; a < ws.pos_a.size(); ++a) {
      const uint32_t want = ws.pos_a[a] + j;
      while (bi < ws.pos_b.size() && ws.pos_b[bi] < want) {
        ++bi;
      }
      if (bi < ws.pos_b.size() && ws.pos_b[bi] == want) {
        ws.pos_a[w++] = ws.pos_a[a];
      }
    }
    ws.pos_a.resize(w);
  }
  for (uint32_t p : ws.pos_a) {
    (p < tl ? in_title : in_text) += 1;
  }
  return w_title * in_title + w_text * in_text;
}

namespace {
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
}  // namespace

// Orders the heap best first and fills in the ids.
void local_shard::finish(shard_answer& out) const {
  std::sort_heap(out.hits.begin(), out.hits.end(), better);
  for (hit& h : out.hits) {
    h.id = id(h.doc);
  }
}

// One term, no filters: every posting matches, so total = df, and whole blocks whose maximum
// (score or time) is below the k-th best so far are skipped without decoding.
void local_shard::single_term(posting_cursor& c, bool by_date, double idf, double avgdl,
                              double bound_scale, size_t k, shard_answer& out) const {
  out.total = c.df;
  std::vector<hit>& heap = out.hits;
  while (true) {
    // c is on the first doc of block c.block
    if (heap.size() == k) {
      const size_t blk = c.skip_off + c.block;
      double ub = by_date ? static_cast<double>(block_max_time_[blk])
                          : idf * (block_max_[blk] * bound_scale);
      if (ub < heap.front().key) {
        c.skip_block();
        if (!c.next()) {
          return;
        }
        continue;
      }
    }
    const uint32_t block = c.block;
    do {
      hit h{};
      h.doc = c.doc;
      h.key = by_date ? static_cast<double>(time_[c.doc])
                      : idf * term_part(c.tf_title, c.tf_text, length_norm(c.doc, avgdl));
      offer(heap, k, h);
      if (!c.next()) {
        return;
      }
    } while (c.block == block);
  }
}

// One term, no filters, k < champ_len: the answer comes from the term's champion list. Every
// doc outside the list has a key <= the list's last key (term_part and time order the list, and
// multiplying by idf > 0 keeps the order), so when the k-th key is strictly above the last one,
// every doc that ranks at or above the k-th is in the list; those are sorted by the hit order.
// Otherwise (ties reaching the end of the list) returns false and the postings are walked.
bool local_shard::single_term_champions(uint32_t term, bool by_date, double idf, size_t k,
                                        shard_answer& out) const {
  const uint32_t at = champ_at_[term];
  if (at == UINT32_MAX || k >= champ_len || (!by_date && !(idf > 0))) {
    return false;
  }
  auto key_of = [&](size_t i) {
    return by_date ? static_cast<double>(time_[champ_date_[at + i]]) : idf * champ_part_[at + i];
  };
  const double kth = key_of(k - 1);
  if (!(kth > key_of(champ_len - 1))) {
    return false;
  }
  size_t j = k;
  while (key_of(j) == kth) {
    ++j;
  }
  std::vector<hit>& hits = out.hits;
  for (size_t i = 0; i < j; ++i) {
    hit h{};
    h.key = key_of(i);
    h.doc = by_date ? champ_date_[at + i] : champ_doc_[at + i];
    // insertion into the sorted prefix: keys arrive non-increasing, so only ties move
    size_t p = hits.size();
    hits.push_back(h);
    while (p > 0 && better(h, hits[p - 1])) {
      hits[p] = hits[p - 1];
      --p;
    }
    hits[p] = h;
  }
  hits.resize(k);
  for (hit& h : hits) {
    h.id = id(h.doc);
  }
  out.total = terms_[term].df;
  return true;
}

bool local_shard::search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const {
  out.total = 0;
  out.hits.clear();
  const size_t nt = plan.terms.size();
  if (nt == 0 || plan.k == 0) {
    return true;
  }
  ws.cursors.clear();
  ws.order.clear();
  ws.term_ids.clear();
  for (size_t i = 0; i < nt; ++i) {
    const term_info* t = lookup_term(plan.terms[i]);
    if (t == nullptr) {
      return true;  // a term absent from this shard: nothing here matches
    }
    ws.cursors.push_back(cursor_for(*t));
    ws.order.push_back(static_cast<uint32_t>(i));
    ws.term_ids.push_back(static_cast<uint32_t>(t - terms_.data()));
  }
  ws.tag_ids.clear();
  for (std::string_view tag : plan.tags) {
    int64_t id = lookup_tag(tag);
    if (id < 0) {
      return true;
    }
    ws.tag_ids.push_back(static_cast<uint32_t>(id));
  }
  // rarest term leads the intersection; insertion sort: few terms, stable, allocation-free
  for (size_t i = 1; i < ws.order.size(); ++i) {
    uint32_t v = ws.order[i];
    size_t j = i;
    for (; j > 0 && ws.cursors[ws.order[j - 1]].df > ws.cursors[v].df; --j) {
      ws.order[j] = ws.order[j - 1];
    }
    ws.order[j] = v;
  }
  for (posting_cursor& c : ws.cursors) {
    if (!c.next()) {
      return true;
    }
  }
  const bool by_date = plan.sort == sort_order::date;
  const size_t k = plan.k;
  std::vector<hit>& heap = out.hits;
  // Under another corpus average (a fleet's), norms are computed per doc and the block maxima
  // (made with avgdl_) bound scores only after scaling: every norm shrinks by at most
  // avgdl_ / avgdl, and F (k1+1) / (F + r kn) <= F (k1+1) / (F + kn) / r for r <= 1.
  const bool own_avgdl = plan.avgdl == 0 || plan.avgdl == avgdl_;
  const double avgdl = own_avgdl ? avgdl_ : plan.avgdl;
  const double bound_scale = own_avgdl || avgdl < avgdl_ ? 1.0 : avgdl / avgdl_ * (1 + 1e-9);
  if (nt == 1 && plan.phrases.empty() && ws.tag_ids.empty() &&
      plan.since == std::numeric_limits<int64_t>::min() &&
      plan.until == std::numeric_limits<int64_t>::max()) {
    if (own_avgdl && single_term_champions(ws.term_ids[0], by_date, plan.idf[0], k, out)) {
      return true;
    }
    single_term(ws.cursors[0], by_date, plan.idf[0], avgdl, bound_scale, k, out);
    finish(out);
    return true;
  }
  posting_cursor& lead = ws.cursors[ws.order[0]];
  uint32_t target = lead.doc;
  while (true) {
    // leapfrog: bring every cursor to the same doc
    bool aligned = true;
    for (size_t oi = 1; oi < nt; ++oi) {
      posting_cursor& c = ws.cursors[ws.order[oi]];
      if (!c.seek(target)) {
        goto done;
      }
      if (c.doc > target) {
        if (!lead.seek(c.doc)) {
          goto done;
        }
        target = lead.doc;
        aligned = false;
        break;
      }
    }
    if (!aligned) {
      continue;
    }
    {
      const uint32_t doc = target;
      const int64_t t = time_[doc];
      bool ok = t >= plan.since && t <= plan.until;
      if (ok && !ws.tag_ids.empty()) {
        const doc_rec& r = docs_[doc];
        const uint32_t* dt = doc_tags_.data() + r.tags_off;
        for (uint32_t want : ws.tag_ids) {
          if (std::find(dt, dt + r.tag_count, want) == dt + r.tag_count) {
            ok = false;
            break;
          }
        }
      }
      if (ok && !plan.phrases.empty()) {
        ok = phrase_match(plan, ws);  // stops at each phrase's first occurrence
      }
      if (ok) {
        ++out.total;
        hit h{};
        h.doc = doc;
        if (by_date) {
          h.key = static_cast<double>(t);
        } else {
          if (heap.size() == k) {
            // skip scoring when the block maxima cannot reach the k-th best score; a phrase's
            // frequency is at most each of its terms', so its part is bounded by theirs
            double ub = 0;
            for (size_t i = 0; i < nt; ++i) {
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
            if (ub < heap.front().key) {
              goto next_doc;
            }
          }
          const double kn = length_norm(doc, avgdl);
          double s = 0;
          for (size_t i = 0; i < nt; ++i) {
            if (plan.idf[i] != 0) {  // a phrase-only term adds nothing of its own
              const posting_cursor& c = ws.cursors[i];
              s += plan.idf[i] * term_part(c.tf_title, c.tf_text, kn);
            }
          }
          if (!plan.phrases.empty()) {
            if (heap.size() == k) {
              // this doc's bound before counting phrase occurrences: a phrase occurs in a field
              // at most as often as each of its words does there
              double ub = s;
              for (size_t p = 0; p < plan.phrases.size(); ++p) {
                const phrase_span& ph = plan.phrases[p];
                double f = std::numeric_limits<double>::max();
                for (uint32_t j = 0; j < ph.count; ++j) {
                  const posting_cursor& c = ws.cursors[plan.phrase_terms[ph.first + j]];
                  f = std::min(f, w_title * c.tf_title + w_text * c.tf_text);
                }
                ub += phrase_weight(plan, p) * unit_part(f, kn);
              }
              if (ub < heap.front().key) {
                goto next_doc;
              }
            }
            for (size_t p = 0; p < plan.phrases.size(); ++p) {
              // every occurrence, counted only for the docs that get scored
              s += phrase_weight(plan, p) *
                   unit_part(phrase_freq(plan, plan.phrases[p], ws, doc), kn);
            }
          }
          h.key = s;
        }
        offer(heap, k, h);
      }
    }
  next_doc:
    if (!lead.next()) {
      break;
    }
    target = lead.doc;
  }
done:
  finish(out);
  return true;
}

void local_shard::reference_search(const query_plan& plan, shard_answer& out) const {
  out.total = 0;
  out.hits.clear();
  if (plan.terms.empty() || plan.k == 0) {
    return;
  }
  std::vector<hit> all;
  std::vector<std::string> title, text;
  auto tokenize = [](std::string_view s, std::vector<std::string>& toks) {
    toks.clear();
    token_stream ts(s);
    std::string_view tok;
    while (ts.next(tok)) {
      toks.emplace_back(tok);
    }
  };
  auto count = [](const std::vector<std::string>& toks, std::string_view t) {
    return static_cast<uint32_t>(std::count(toks.begin(), toks.end(), t));
  };
  auto phrase_count = [&plan](const std::vector<std::string>& toks, const phrase_span& ph) {
    uint32_t n = 0;
    for (size_t p = 0; p + ph.count <= toks.size(); ++p) {
      bool all_match = true;
      for (uint32_t j = 0; j < ph.count && all_match; ++j) {
        all_match = toks[p + j] == plan.terms[plan.phrase_terms[ph.first + j]];
      }
      n += all_match ? 1 : 0;
    }
    return n;
  };
  const double avgdl = plan.avgdl == 0 ? avgdl_ : plan.avgdl;
  for (uint32_t doc = 0; doc < docs_.size(); ++doc) {
    const doc_rec& r = docs_[doc];
    if (time_[doc] < plan.since || time_[doc] > plan.until) {
      continue;
    }
    bool ok = true;
    for (std::string_view tag : plan.tags) {
      bool found = false;
      for (uint32_t i = 0; i < r.tag_count; ++i) {
        found = found || tag_names_[doc_tags_[r.tags_off + i]] == tag;
      }
      ok = ok && found;
    }
    if (!ok) {
      continue;
    }
    field_views f(r);
    tokenize(f.title, title);
    tokenize(f.text, text);
    // D straight from the token lists, the norm from the formula (not len_norm_)
    const double d = static_cast<double>(title.size() + text.size());
    const double kn = k1 * (1 - b + b * d / avgdl);
    double score = 0;
    for (size_t i = 0; i < plan.terms.size() && ok; ++i) {
      const uint32_t tt = count(title, plan.terms[i]);
      const uint32_t tx = count(text, plan.terms[i]);
      ok = tt + tx > 0;
      score += plan.idf[i] * ((3.0 * tt + 1.0 * tx) * (k1 + 1.0) / ((3.0 * tt + 1.0 * tx) + kn));
    }
    for (size_t p = 0; p < plan.phrases.size() && ok; ++p) {
      const phrase_span& ph = plan.phrases[p];
      const uint32_t pt = phrase_count(title, ph);
      const uint32_t px = phrase_count(text, ph);
      ok = ph.count < 2 || pt + px > 0;
      const double f = 3.0 * pt + 1.0 * px;
      score += (plan.phrase_idf.empty() ? 1.0 : plan.phrase_idf[p]) * (f * (k1 + 1.0) / (f + kn));
    }
    if (!ok) {
      continue;
    }
    hit h{};
    h.key = plan.sort == sort_order::date ? static_cast<double>(time_[doc]) : score;
    h.doc = doc;
    h.id = id(doc);
    all.push_back(h);
  }
  std::sort(all.begin(), all.end(), better);
  out.total = all.size();
  all.resize(std::min<size_t>(all.size(), plan.k));
  out.hits.assign(all.begin(), all.end());
}

result<uint32_t, errc> local_shard::find(std::string_view want) const {
  size_t lo = 0, hi = docs_.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (id_less(id(static_cast<uint32_t>(mid)), want)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < docs_.size() && id(static_cast<uint32_t>(lo)) == want) {
    return static_cast<uint32_t>(lo);
  }
  return unexpected(errc::not_found);
}

namespace {

// The structural text of a rendered story, quotes of the string values included, with its nested
// form made at compile time.
constexpr json_literal k_lit_id{"{\"id\":\""};
constexpr json_literal k_lit_title{"\",\"title\":\""};
constexpr json_literal k_lit_url{"\",\"url\":\""};
constexpr json_literal k_lit_by{"\",\"by\":\""};
constexpr json_literal k_lit_time{"\",\"time\":"};
constexpr json_literal k_lit_score{",\"score\":"};
constexpr json_literal k_lit_comments{",\"comments\":"};
constexpr json_literal k_lit_tags{",\"tags\":["};
constexpr json_literal k_lit_tag_first{"\""};
constexpr json_literal k_lit_tag_next{"\",\""};
constexpr json_literal k_lit_tags_end{"\"]"};
constexpr json_literal k_lit_no_tags_end{"]"};
constexpr json_literal k_lit_text{",\"text\":\""};
constexpr json_literal k_lit_text_end{"\"}"};
constexpr json_literal k_lit_end{"}"};

constexpr size_t k_story_fixed_bound =
    json_out::literal_bound(k_lit_id) + json_out::literal_bound(k_lit_title) +
    json_out::literal_bound(k_lit_url) + json_out::literal_bound(k_lit_by) +
    json_out::literal_bound(k_lit_time) + json_out::literal_bound(k_lit_score) +
    json_out::literal_bound(k_lit_comments) + json_out::literal_bound(k_lit_tags) +
    json_out::literal_bound(k_lit_tags_end) + json_out::literal_bound(k_lit_end) +
    3 * json_out::k_number_bound;

// A field's bytes: copied when the load found nothing to escape in it, else escaped.
inline char* put_field(const json_out& out, char* dst, std::string_view s, bool escape) {
  return escape ? out.put_escaped(dst, s) : json_out::put_plain(dst, s);
}

}  // namespace

void local_shard::render_story(uint32_t doc, bool with_text, json_out& out) const {
  // One reservation for the whole summary (fields the load flagged as needing escapes count at
  // their worst case), then every piece is written straight into it; structural text is copied
  // pre-escaped. The text, only in a single story's render, is appended after.
  const doc_rec& r = docs_[doc];
  const field_views f(r);
  const uint32_t* tags = doc_tags_.data() + r.tags_off;
  auto bound_of = [&out](std::string_view s, bool escape) {
    return escape ? out.escaped_bound(s.size()) : s.size();
  };
  size_t bound = k_story_fixed_bound + bound_of(f.id, (r.escape & k_escape_id) != 0) +
                 bound_of(f.title, (r.escape & k_escape_title) != 0) +
                 bound_of(f.url, (r.escape & k_escape_url) != 0) +
                 bound_of(f.by, (r.escape & k_escape_by) != 0);
  for (uint32_t i = 0; i < r.tag_count; ++i) {
    bound += json_out::literal_bound(k_lit_tag_next) +
             bound_of(tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  char* const base = out.begin_write(bound);
  char* p = out.put_literal(base, k_lit_id);
  p = put_field(out, p, f.id, (r.escape & k_escape_id) != 0);
  p = out.put_literal(p, k_lit_title);
  p = put_field(out, p, f.title, (r.escape & k_escape_title) != 0);
  p = out.put_literal(p, k_lit_url);
  p = put_field(out, p, f.url, (r.escape & k_escape_url) != 0);
  p = out.put_literal(p, k_lit_by);
  p = put_field(out, p, f.by, (r.escape & k_escape_by) != 0);
  p = out.put_literal(p, k_lit_time);
  p = json_out::put_number(p, time_[doc]);
  p = out.put_literal(p, k_lit_score);
  p = json_out::put_number(p, r.score);
  p = out.put_literal(p, k_lit_comments);
  p = json_out::put_number(p, r.comments);
  p = out.put_literal(p, k_lit_tags);
  for (uint32_t i = 0; i < r.tag_count; ++i) {
    p = i == 0 ? out.put_literal(p, k_lit_tag_first) : out.put_literal(p, k_lit_tag_next);
    p = put_field(out, p, tag_names_[tags[i]], tag_escape_[tags[i]] != 0);
  }
  p = r.tag_count > 0 ? out.put_literal(p, k_lit_tags_end) : out.put_literal(p, k_lit_no_tags_end);
  if (!with_text) {
    p = out.put_literal(p, k_lit_end);
    out.end_write(base, p);
    return;
  }
  p = out.put_literal(p, k_lit_text);
  out.end_write(base, p);
  char* const tbase =
      out.begin_write(out.escaped_bound(f.text.size()) + json_out::literal_bound(k_lit_text_end));
  p = out.put_escaped(tbase, f.text);
  p = out.put_literal(p, k_lit_text_end);
  out.end_write(tbase, p);
}

size_t local_shard::memory_bytes() const noexcept {
  return arena_bytes_ + docs_.capacity() * sizeof(doc_rec) + time_.capacity() * 8 +
         doc_tags_.capacity() * 4 + title_len_.capacity() * 8 + len_norm_.capacity() * 8 +
         term_chars_.capacity() + terms_.capacity() * sizeof(term_info) +
         term_table_.capacity() * sizeof(term_slot) + doc_stream_bytes_ + pos_stream_bytes_ +
         skips_.capacity() * sizeof(skip_entry) + block_max_.capacity() * 4 +
         block_max_time_.capacity() * 8 + champ_at_.capacity() * 4 + champ_part_.capacity() * 8 +
         champ_doc_.capacity() * 4 + champ_date_.capacity() * 4;
}

}  // namespace tollgate::search
