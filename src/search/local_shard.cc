// local_shard: the storage side of an in-process shard (story arena, tags, the term table,
// sealing), the stable hashes and lookup by id. The index build,
// finalize, query evaluation, phrase matching, the reference evaluator and rendering live in
// index_build.cc, finalize.cc, evaluate.cc, reference.cc and render.cc. See
// local_shard.h for the lifecycle and the postings layout.
#include "search/local_shard.h"

#include <fmt/format.h>
#include <malloc.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {

static_assert(std::endian::native == std::endian::little, "posting decoding reads LE words");

constexpr size_t chunk_bytes = size_t{1} << 20;
constexpr size_t huge_page_bytes = size_t{2} << 20;
// A shard's arena switches to chunks of this size (huge-page backed) once it holds 4 MB.
constexpr size_t big_chunk_bytes = size_t{8} << 20;

inline uint64_t mix64(uint64_t h) noexcept {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

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

namespace {

// The blocks recycle_build() keeps: each allocated [base, base + end), its pages from `at` on
// written and not yet moved out (those before `at` are fresh, untouched ones).
struct spare_block {
  char* base;
  size_t at, end;
};
std::mutex g_spare_mu;
std::vector<spare_block> g_spare;  // guarded by g_spare_mu

void out_of_memory() {
  std::fputs("tollgate: out of memory\n", stderr);
  std::abort();
}

// Moves spare pages to the front of [p, p + n) (p and n multiples of the huge page size).
void take_spare_pages(char* p, size_t n) {
  const std::lock_guard<std::mutex> lock(g_spare_mu);
  size_t filled = 0;
  while (!g_spare.empty() && n - filled >= huge_page_bytes) {
    spare_block& b = g_spare.back();
    const size_t m = std::min(b.end - b.at, (n - filled) & ~(huge_page_bytes - 1));
    char* from = b.base + b.at;
    // The pages (and their huge-page advice) move to p + filled, replacing its untouched ones.
    // MREMAP_DONTUNMAP keeps [from, from + m) mapped, empty, in the same step: the block stays
    // whole for free(). Moving the pages out and then mapping fresh ones over the hole would
    // leave a window in which another thread's mmap (a malloc of a large block, a thread's
    // stack) can be placed in the hole, and the second mapping would then replace its pages.
    // A kernel without the flag (before 5.7) fails the call: the block is freed instead.
    const bool moved = ::mremap(from, m, m, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP,
                                p + filled) != MAP_FAILED;
    if (moved) {
      filled += m;
      b.at += m;
    }
    if (!moved || b.at == b.end) {
      std::free(b.base);
      g_spare.pop_back();
    }
  }
}

}  // namespace

void detail::recycle_build(void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const size_t n = p == nullptr ? 0 : ::malloc_usable_size(p) & ~(huge_page_bytes - 1);
  if (n < 2 * huge_page_bytes || (a & (huge_page_bytes - 1)) != 0) {
    std::free(p);
    return;
  }
  const std::lock_guard<std::mutex> lock(g_spare_mu);
  g_spare.push_back({static_cast<char*>(p), 0, n});
}

void detail::drop_spare_build_pages() {
  const std::lock_guard<std::mutex> lock(g_spare_mu);
  for (const spare_block& b : g_spare) {
    std::free(b.base);
  }
  std::vector<spare_block>().swap(g_spare);
}

void* detail::alloc_build(size_t n) {
  void* p;
  if (n >= 2 * huge_page_bytes) {
    const size_t rounded = (n + huge_page_bytes - 1) & ~(huge_page_bytes - 1);
    p = std::aligned_alloc(huge_page_bytes, rounded);
    if (p != nullptr) {
      ::madvise(p, rounded, MADV_HUGEPAGE);
      take_spare_pages(static_cast<char*>(p), rounded);
    }
  } else {
    p = std::malloc(n == 0 ? 1 : n);
  }
  if (p == nullptr) {
    out_of_memory();
  }
  return p;
}

void detail::advise_huge(void* p, size_t n) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t from = (a + huge_page_bytes - 1) & ~(uintptr_t{huge_page_bytes} - 1);
  const uintptr_t to = (a + n) & ~(uintptr_t{huge_page_bytes} - 1);
  if (to > from) {
    ::madvise(reinterpret_cast<void*>(from), to - from, MADV_HUGEPAGE);
  }
}

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

uint32_t usable_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) {
      return static_cast<uint32_t>(n);
    }
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

uint32_t shard_of(std::string_view id, uint32_t shard_count) noexcept {
  return shard_count <= 1 ? 0 : static_cast<uint32_t>(hash_bytes(id) % shard_count);
}

// ---- building ----

local_shard::local_shard() = default;
local_shard::~local_shard() = default;

char* local_shard::arena_alloc(size_t n) {
  if (n > chunk_left_) {
    size_t size = std::max(n, arena_bytes_ >= 4 * chunk_bytes ? big_chunk_bytes : chunk_bytes);
    chunks_.emplace_back(
        static_cast<char*>(detail::alloc_build(size)));  // filled by add(): no zeroing
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
  const uint32_t escape =
      (needs_escape(s.id) ? kEscapeId : 0) | (needs_escape(s.title) ? kEscapeTitle : 0) |
      (needs_escape(s.url) ? kEscapeUrl : 0) | (needs_escape(s.by) ? kEscapeBy : 0);
  const size_t head = head_size(s.id, s.title, s.url, s.by, s.score, s.comments);
  char* p = arena_alloc(head + s.text.size());
  doc_rec r{};
  r.base = p;
  p = put_head(p, s.id, s.title, s.url, s.by, escape, s.score, s.comments);
  if (!s.text.empty()) {
    std::memcpy(p, s.text.data(), s.text.size());
  }
  r.text_len = static_cast<uint32_t>(s.text.size());
  r.tags_off = static_cast<uint32_t>(doc_tags_.size());
  for (std::string_view t : s.tags) {
    push_huge(doc_tags_, intern_tag(t));
  }
  push_huge(docs_, r);
  push_huge(time_, s.time);
  push_huge(line_, line);
  push_huge(line_store_, corpus_line{s.line_at, s.line_len});
}

void local_shard::absorb(local_shard&& o, uint64_t line_base) {
  for (auto& c : o.chunks_) {
    chunks_.push_back(std::move(c));
  }
  arena_bytes_ += o.arena_bytes_;
  // Grown geometrically: a shard absorbs many pieces (an exact reserve each time copied the
  // whole vector per piece).
  auto grow = [](auto& v, size_t more) {
    if (v.capacity() - v.size() < more) {
      v.reserve(std::max(v.size() + more, 2 * v.capacity()));
    }
  };
  grow(docs_, o.docs_.size());
  grow(time_, o.time_.size());
  grow(line_, o.line_.size());
  grow(line_store_, o.line_store_.size());
  grow(doc_tags_, o.doc_tags_.size());
  // Each of o's tags interned once, at its first use (so in the order a story by story intern
  // would give them numbers), not hashed again at every story that has it: the pieces' join
  // runs on one thread, and with many pieces it goes through most stories.
  std::vector<uint32_t> tag_of(o.tag_names_.size(), UINT32_MAX);
  for (size_t i = 0; i < o.docs_.size(); ++i) {
    doc_rec r = o.docs_[i];
    r.tags_off = static_cast<uint32_t>(doc_tags_.size());
    for (uint32_t t : o.tags_of(static_cast<uint32_t>(i))) {
      if (tag_of[t] == UINT32_MAX) {
        tag_of[t] = intern_tag(o.tag_names_[t]);
      }
      doc_tags_.push_back(tag_of[t]);
    }
    docs_.push_back(r);
    time_.push_back(o.time_[i]);
    line_.push_back(o.line_[i] + line_base);
    line_store_.push_back(o.line_store_[i]);  // offsets in the whole text already
  }
  o.chunks_.clear();
  o.chunk_ptr_ = nullptr;
  o.chunk_left_ = 0;
  o.arena_bytes_ = 0;
  o.docs_.clear();
  o.time_.clear();
  o.line_.clear();
  o.line_store_.clear();
  o.doc_tags_.clear();
}

void local_shard::seal(std::vector<load_issue>& dups, out_buffer* records,
                       std::atomic<uint64_t>* steps, std::atomic<uint32_t>* counted) {
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
  std::vector<corpus_line> lines;
  std::vector<uint32_t> tags;  // in the new doc order, so that a doc's run ends at the next's
  reserve_huge(docs, docs_.size());
  reserve_huge(times, docs_.size());
  reserve_huge(tags, doc_tags_.size());
  if (corpus_) {
    reserve_huge(lines, docs_.size());
  }
  for (size_t k = 0; k < order.size(); ++k) {
    uint32_t i = order[k];
    if (!docs.empty() && head_id(docs.back().base) == id(i)) {
      dups.push_back({line_[i], fmt::format("duplicate id \"{}\" (first seen on line {})", id(i),
                                            line_[order[k - 1]])});
      // keep order[k-1] pointing at the first occurrence for later duplicates
      order[k] = order[k - 1];
      continue;
    }
    docs.push_back(docs_[i]);
    docs.back().tags_off = static_cast<uint32_t>(tags.size());
    const std::span<const uint32_t> t = tags_of(i);
    tags.insert(tags.end(), t.begin(), t.end());
    times.push_back(time_[i]);
    if (corpus_) {
      lines.push_back(line_store_[i]);
    }
  }
  docs_.swap(docs);
  doc_tags_.swap(tags);
  time_.swap(times);
  line_store_.swap(lines);
  std::vector<uint64_t>().swap(line_);
  build_index(records, steps, counted);
  pack_stories();
  if (steps != nullptr) {
    steps->fetch_add(docs_.size() * build_steps_sealed, std::memory_order_relaxed);
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
  push_huge(terms_, ti);
  const term_slot slot{term_tag(h, tok.size()) << 32 | terms_.size(), term_head(tok)};
  if (terms_.size() * 2 > term_table_.size()) {
    size_t size = term_table_.empty() ? 4096 : term_table_.size() * 2;
    std::vector<term_slot> t;
    assign_huge(t, size, term_slot{0, 0});
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
//      sequential stream [term][doc delta, frequencies, positions length][positions] and
//      count each term's df and exact byte sizes;

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

}  // namespace tollgate::search
