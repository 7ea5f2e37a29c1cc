// The index file's container (checksummed sections, the header, the verified mapping) and
// local_shard::save/load, which lay a sealed shard out in it. See
// include/tollgate/search/index_file.h for the lifecycle and the layout.
#include "search/index_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {

constexpr char k_magic[8] = {'T', 'G', 'I', 'N', 'D', 'E', 'X', '\n'};
constexpr size_t k_header_room = 4096;
constexpr size_t k_align = 64;
// O_DIRECT's alignment of offsets, sizes and buffers: the largest logical block size in use.
constexpr size_t k_direct_align = 4096;

struct file_header {
  char magic[8];
  uint32_t version;
  uint32_t shards;
  uint64_t corpus_size;
  int64_t corpus_mtime_ns;
  uint64_t corpus_sample_hash;
  uint64_t loaded, skipped;
  uint64_t file_bytes;
  uint64_t dir_offset, dir_count, dir_checksum;
  uint64_t header_checksum;  // of the bytes above
};
static_assert(sizeof(file_header) == 96 && sizeof(file_header) <= k_header_room);

uint64_t sum_of(const void* p, size_t n) {
  index_checksum c;
  c.update(p, n);
  return c.final();
}

constexpr uint64_t k_prime = 0x9FB21C651E98DF25ULL;

}  // namespace

// ---- checksum ----

void index_checksum::stripe(const uint8_t* p) noexcept {
  for (int i = 0; i < 4; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lane_[i] = std::rotl((lane_[i] ^ w) * k_prime, 31);
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
  uint64_t h = total_ * k_prime;
  for (uint64_t l : c.lane_) {
    h = std::rotl(h ^ (l * 0xC2B2AE3D27D4EB4FULL), 27) * k_prime + 0x165667B19E3779F9ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// ---- writer ----

index_writer::index_writer(int fd, bool direct)
    : fd_(fd), stage_at_(k_header_room), at_(k_header_room) {
  static_assert(k_header_room % k_direct_align == 0 && stage_bytes % k_direct_align == 0);
  stage_ = static_cast<uint8_t*>(detail::alloc_build(stage_bytes));  // 2 MB aligned
  direct_ = direct && set_direct(true);
}

index_writer::~index_writer() { std::free(stage_); }

// Sets or clears O_DIRECT on the file; false when the file system does not allow it.
bool index_writer::set_direct(bool on) {
  const int flags = ::fcntl(fd_, F_GETFL);
  return flags >= 0 && ::fcntl(fd_, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) == 0;
}

// Writes the staged bytes at stage_at_ and empties the buffer. A full buffer goes out with
// O_DIRECT when that is on (its offset and size are 4 KB multiples); a file system that refuses
// it (EINVAL) gets plain writes from then on.
void index_writer::write_stage() {
  size_t off = 0;
  while (off < staged_ && error_.empty()) {
    const ssize_t n =
        ::pwrite(fd_, stage_ + off, staged_ - off, static_cast<off_t>(stage_at_ + off));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EINVAL && direct_) {
      direct_ = false;
      set_direct(false);
      continue;
    }
    if (n <= 0) {
      error_ = n < 0 ? std::strerror(errno) : "short write";
      break;
    }
    off += static_cast<size_t>(n);
  }
  stage_at_ += staged_;
  staged_ = 0;
}

void index_writer::stage(const uint8_t* p, size_t n) {
  while (n > 0) {
    const size_t k = std::min(n, stage_bytes - staged_);
    std::memcpy(stage_ + staged_, p, k);
    staged_ += k;
    p += k;
    n -= k;
    if (staged_ == stage_bytes) {
      write_stage();
    }
  }
}

void index_writer::append(const void* data, size_t n) {
  sum_.update(data, n);
  cur_.bytes += n;
  at_ += n;
  stage(static_cast<const uint8_t*>(data), n);
}

void index_writer::begin_section(uint32_t tag) {
  static constexpr uint8_t zeros[k_align] = {};
  const size_t pad = (k_align - at_ % k_align) % k_align;
  stage(zeros, pad);
  at_ += pad;
  cur_ = entry{tag, 0, at_, 0, 0};
  sum_ = index_checksum();
}

void index_writer::end_section() {
  cur_.checksum = sum_.final();
  dir_.push_back(cur_);
}

std::string index_writer::finish(const head& h) {
  begin_section(0);  // aligns the directory
  const uint64_t dir_offset = at_;
  const uint64_t dir_bytes = dir_.size() * sizeof(entry);
  stage(reinterpret_cast<const uint8_t*>(dir_.data()), dir_bytes);
  at_ += dir_bytes;
  // The last partial buffer (not a multiple of 4 KB) and the header: plain writes.
  if (direct_) {
    set_direct(false);
  }
  write_stage();  // direct_ stays: whether the full buffers went out with O_DIRECT
  file_header fh{};
  std::memcpy(fh.magic, k_magic, sizeof k_magic);
  fh.version = index_format_version;
  fh.shards = h.shards;
  fh.corpus_size = h.corpus.size;
  fh.corpus_mtime_ns = h.corpus.mtime_ns;
  fh.corpus_sample_hash = h.corpus.sample_hash;
  fh.loaded = h.loaded;
  fh.skipped = h.skipped;
  fh.file_bytes = at_;
  fh.dir_offset = dir_offset;
  fh.dir_count = dir_.size();
  fh.dir_checksum = sum_of(dir_.data(), dir_bytes);
  fh.header_checksum = sum_of(&fh, offsetof(file_header, header_checksum));
  if (error_.empty() && ::pwrite(fd_, &fh, sizeof fh, 0) != static_cast<ssize_t>(sizeof fh)) {
    error_ = std::strerror(errno);
  }
  return error_;
}

// ---- reader ----

namespace {

struct dir_entry {  // as index_writer::entry writes it
  uint32_t tag, reserved;
  uint64_t offset, bytes, checksum;
};
static_assert(sizeof(dir_entry) == 32);

// Why a header (of a file of n bytes) is not the one wanted, or "".
std::string check_header(const file_header& fh, const corpus_fingerprint& want, uint32_t shards,
                         size_t n) {
  if (std::memcmp(fh.magic, k_magic, sizeof k_magic) != 0) {
    return "not a tollgate index file";
  }
  if (fh.header_checksum != sum_of(&fh, offsetof(file_header, header_checksum))) {
    return "corrupt header (checksum mismatch)";
  }
  if (fh.version != index_format_version) {
    return fmt::format("format version {} (this build reads version {})", fh.version,
                       index_format_version);
  }
  const corpus_fingerprint got{fh.corpus_size, fh.corpus_mtime_ns, fh.corpus_sample_hash};
  if (got != want) {
    return "built from another corpus (or an older version of it)";
  }
  if (fh.shards != shards) {
    return fmt::format("built for {} shards, not {}", fh.shards, shards);
  }
  if (fh.file_bytes != n) {
    return fmt::format("truncated or extended ({} bytes, written as {})", n, fh.file_bytes);
  }
  if (fh.dir_offset > n || fh.dir_count > (n - fh.dir_offset) / sizeof(dir_entry) ||
      fh.dir_offset % alignof(dir_entry) != 0) {
    return "corrupt directory";
  }
  return {};
}

// Whether every section's checksum holds: largest first, on `threads` threads. Read with pread
// into a small buffer rather than through the mapping: on 4 KB page-cache pages the mapping's
// TLB misses made the check about 3x slower than the copy plus a sum from cache.
bool verify_sections(int fd, const dir_entry* dir, size_t count, uint32_t threads) {
  std::vector<size_t> order(count);
  for (size_t i = 0; i < count; ++i) {
    order[i] = i;
  }
  std::sort(order.begin(), order.end(),
            [dir](size_t a, size_t b) { return dir[a].bytes > dir[b].bytes; });
  std::atomic<size_t> next{0};
  std::atomic<bool> bad{false};
  auto verify = [&] {
    constexpr size_t chunk = size_t{1} << 20;
    std::unique_ptr<uint8_t[]> buf(new uint8_t[chunk]);
    for (size_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < order.size();) {
      const dir_entry& e = dir[order[k]];
      index_checksum sum;
      for (uint64_t at = 0; at < e.bytes && !bad.load(std::memory_order_relaxed);) {
        const ssize_t got = ::pread(fd, buf.get(), std::min<uint64_t>(chunk, e.bytes - at),
                                    static_cast<off_t>(e.offset + at));
        if (got <= 0) {
          if (got < 0 && errno == EINTR) {
            continue;
          }
          bad.store(true, std::memory_order_relaxed);
          break;
        }
        sum.update(buf.get(), static_cast<size_t>(got));
        at += static_cast<uint64_t>(got);
      }
      if (sum.final() != e.checksum) {
        bad.store(true, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> pool;
  for (uint32_t t = 1; t < std::max(1u, threads); ++t) {
    pool.emplace_back(verify);
  }
  verify();
  for (std::thread& th : pool) {
    th.join();
  }
  return !bad.load();
}

}  // namespace

result<index_reader, std::string> index_reader::open(const std::string& path,
                                                     const corpus_fingerprint& want,
                                                     uint32_t shards, uint32_t threads) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return unexpected(errno == ENOENT ? std::string("missing") : std::string(std::strerror(errno)));
  }
  // Closed on every return; the checksums read through it.
  const std::unique_ptr<int, void (*)(int*)> fd_guard(new int(fd), [](int* f) {
    ::close(*f);
    delete f;
  });
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return unexpected(std::string("not a regular file"));
  }
  const size_t n = static_cast<size_t>(st.st_size);
  if (n < k_header_room) {
    return unexpected(fmt::format("truncated ({} bytes, shorter than its header)", n));
  }
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    return unexpected(fmt::format("cannot map it: {}", std::strerror(errno)));
  }
  index_reader r;
  r.map_ =
      std::shared_ptr<const void>(m, [n](const void* p) { ::munmap(const_cast<void*>(p), n); });
  const auto* base = static_cast<const uint8_t*>(m);
  file_header fh;
  std::memcpy(&fh, base, sizeof fh);
  if (std::string why = check_header(fh, want, shards, n); !why.empty()) {
    return unexpected(why);
  }
  const auto* dir = reinterpret_cast<const dir_entry*>(base + fh.dir_offset);
  if (fh.dir_checksum != sum_of(dir, fh.dir_count * sizeof(dir_entry))) {
    return unexpected(std::string("corrupt directory (checksum mismatch)"));
  }
  for (uint64_t i = 0; i < fh.dir_count; ++i) {
    const dir_entry& e = dir[i];
    if (e.offset < k_header_room || e.offset > fh.dir_offset ||
        e.bytes > fh.dir_offset - e.offset || e.offset % k_align != 0) {
      return unexpected(std::string("corrupt directory (a section out of bounds)"));
    }
    r.sections_.push_back({e.tag, base + e.offset, e.bytes});
  }
  if (!verify_sections(fd, dir, fh.dir_count, threads)) {
    return unexpected(std::string("corrupt (a section's checksum does not match)"));
  }
  r.loaded_ = fh.loaded;
  r.skipped_ = fh.skipped;
  r.file_bytes_ = n;
  return r;
}

bool index_reader::bytes(uint32_t tag, std::span<const uint8_t>& out) const {
  for (const section& s : sections_) {
    if (s.tag == tag) {
      out = {s.data, s.bytes};
      return true;
    }
  }
  return false;
}

void index_reader::release(uint32_t slot_plus_one, std::span<const uint32_t> kept) const {
  constexpr uintptr_t page = 4096;
  for (const section& s : sections_) {
    if (s.tag >> 8 != slot_plus_one ||
        std::find(kept.begin(), kept.end(), s.tag & 0xFF) != kept.end()) {
      continue;
    }
    // the whole pages inside the section (a page shared with a kept neighbour stays)
    const uintptr_t from = (reinterpret_cast<uintptr_t>(s.data) + page - 1) & ~(page - 1);
    const uintptr_t to = (reinterpret_cast<uintptr_t>(s.data) + s.bytes) & ~(page - 1);
    if (to > from) {
      ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
    }
  }
}

// ---- a shard's sections ----

namespace {

// What a shard's sections hold (the low byte of their tags). Never renumber: add new ones.
enum shard_field : uint32_t {
  f_stats = 1,
  f_docs,     // disk_doc per doc, in doc order
  f_stories,  // each doc's id, title, url, by back to back (format 3: the text apart)
  f_time,
  f_doc_tags,
  f_tag_chars,  // tag names back to back
  f_tag_lens,
  f_tag_escape,
  f_tag_table,
  f_title_len,
  f_text_len,
  f_term_chars,
  f_terms,
  f_term_table,
  f_doc_stream,  // with its 16 bytes of padding
  f_pos_stream,
  f_skips,
  // What finalize() derived (optional: a file without them is finalized at load)
  f_avgdl,  // the one average length the rest was made with
  f_len_norm,
  f_block_max,
  f_block_max_time,
  f_champ_at,
  f_champ_part,
  f_champ_doc,
  f_champ_date,
  // The table of adjacent pairs of frequent words (format 2)
  f_pair_terms,
  f_pair_docs,
  f_pair_posting_ranks,  // the pair table's ranks that have pair terms
  // The texts (format 3, story_pack.cc): per doc a zstd frame or the raw text (k_text_raw),
  // back to back; each doc's first byte (one more entry: the end); the shard's dictionary
  f_texts,
  f_text_at,
  f_text_dict,
  // The impact terms (prune_index, derived: optional): their term indices, lists (first entry
  // per term, one more at the end; docs; parts) and one row per doc
  f_impact_terms,
  f_impact_at,
  f_impact_doc,
  f_impact_part,
  f_impact_rows,
};

// A doc_rec with its story's place in f_stories instead of a pointer.
struct disk_doc {
  uint64_t off;
  uint32_t id_len, title_len, url_len, by_len, text_len;
  uint32_t tags_off, tag_count, escape;
  int64_t score, comments;
};
static_assert(sizeof(disk_doc) == 56);
// The raw layouts written; a change to one must bump index_format_version.
static_assert(sizeof(term_info) == 32 && sizeof(skip_entry) == 16 && sizeof(shard_stats) == 24);

// A tripwire for whoever adds a member to local_shard: decide whether the index file must save
// it (state made by seal() or finalize(): add a section to save/load or save_derived/
// load_derived, and bump index_format_version if an existing section changes), then update
// this figure. A loaded shard that lacks such state would answer from empty tables. (prune_ is
// derived by finalize() on both paths: only its impact terms are saved, and taken back through
// loaded_impact_ when the rest of finalize()'s output is.)
static_assert(sizeof(local_shard) == 1248, "local_shard changed: see the comment above");

template <class T>
void copy_to(std::vector<T>& v, std::span<const T> s) {
  v.assign(s.begin(), s.end());
}

}  // namespace

void local_shard::save(index_writer& w, uint32_t slot) const {
  const uint32_t s = slot + 1;
  w.add(section_tag(s, f_stats), std::span<const shard_stats>(&stats_, 1));
  std::vector<disk_doc> docs;
  assign_huge(docs, docs_.size(), disk_doc{});
  w.begin_section(section_tag(s, f_stories));
  uint64_t off = 0;
  for (size_t d = 0; d < docs_.size(); ++d) {
    const doc_rec& r = docs_[d];
    const size_t n = size_t{r.id_len} + r.title_len + r.url_len + r.by_len;
    w.append(r.base, n);
    docs[d] = {off,        r.id_len,    r.title_len, r.url_len, r.by_len,  r.text_len,
               r.tags_off, r.tag_count, r.escape,    r.score,   r.comments};
    off += n;
  }
  w.end_section();
  w.add(section_tag(s, f_docs), std::span<const disk_doc>(docs));
  w.add(section_tag(s, f_texts), std::span<const uint8_t>(texts_.get(), texts_bytes_));
  w.add(section_tag(s, f_text_at), text_at_);
  w.add(section_tag(s, f_text_dict), text_dict_);
  w.add(section_tag(s, f_time), std::span<const int64_t>(time_));
  w.add(section_tag(s, f_doc_tags), std::span<const uint32_t>(doc_tags_));
  std::vector<uint32_t> tag_lens;
  w.begin_section(section_tag(s, f_tag_chars));
  for (const std::string& t : tag_names_) {
    w.append(t.data(), t.size());
    tag_lens.push_back(static_cast<uint32_t>(t.size()));
  }
  w.end_section();
  w.add(section_tag(s, f_tag_lens), std::span<const uint32_t>(tag_lens));
  w.add(section_tag(s, f_tag_escape), std::span<const uint8_t>(tag_escape_));
  w.add(section_tag(s, f_tag_table), std::span<const uint32_t>(tag_table_));
  w.add(section_tag(s, f_title_len), std::span<const uint32_t>(title_len_));
  w.add(section_tag(s, f_text_len), std::span<const uint32_t>(text_len_));
  w.add(section_tag(s, f_term_chars), std::span<const char>(term_chars_));
  w.add(section_tag(s, f_terms), std::span<const term_info>(terms_));
  w.add(section_tag(s, f_term_table), std::span<const term_slot>(term_table_));
  w.add(section_tag(s, f_doc_stream),
        std::span<const uint8_t>(doc_stream_.get(), doc_stream_bytes_));
  w.add(section_tag(s, f_pos_stream),
        std::span<const uint8_t>(pos_stream_.get(), pos_stream_bytes_));
  w.add(section_tag(s, f_skips), std::span<const skip_entry>(skips_));
  w.add(section_tag(s, f_pair_terms), std::span<const uint32_t>(pair_terms_));
  w.add(section_tag(s, f_pair_docs), std::span<const uint32_t>(pair_docs_));
  w.add(section_tag(s, f_pair_posting_ranks), std::span<const uint32_t>(&pair_posting_ranks_, 1));
  save_derived(w, slot);
}

// finalize()'s output, when there is one (it is most of a start's work once the rest is mapped).
void local_shard::save_derived(index_writer& w, uint32_t slot) const {
  if (len_norm_.size() != docs_.size() || block_max_.size() != skips_.size() ||
      block_max_time_.size() != skips_.size() || champ_at_.size() != terms_.size()) {
    return;  // not finalized
  }
  const uint32_t s = slot + 1;
  w.add(section_tag(s, f_avgdl), std::span<const double>(&avgdl_, 1));
  w.add(section_tag(s, f_len_norm), std::span<const double>(len_norm_));
  w.add(section_tag(s, f_block_max), std::span<const float>(block_max_));
  w.add(section_tag(s, f_block_max_time), std::span<const int64_t>(block_max_time_));
  w.add(section_tag(s, f_champ_at), std::span<const uint32_t>(champ_at_));
  w.add(section_tag(s, f_champ_part), std::span<const double>(champ_part_));
  w.add(section_tag(s, f_champ_doc), std::span<const uint32_t>(champ_doc_));
  w.add(section_tag(s, f_champ_date), std::span<const uint32_t>(champ_date_));
  w.add(section_tag(s, f_impact_terms), std::span<const uint32_t>(prune_.impact_terms));
  w.add(section_tag(s, f_impact_at), std::span<const uint32_t>(prune_.impact_at));
  w.add(section_tag(s, f_impact_doc), std::span<const uint32_t>(prune_.impact_doc));
  w.add(section_tag(s, f_impact_part), std::span<const float>(prune_.impact_part));
  w.add(section_tag(s, f_impact_rows), prune_.impact_rows);
}

// Restores finalize()'s output when the file has all of it, consistent; else leaves it to
// finalize(). Returns whether it was restored.
bool local_shard::load_derived(const index_reader& r, uint32_t slot) {
  const uint32_t s = slot + 1;
  std::span<const double> avgdl, len_norm, champ_part;
  std::span<const float> block_max;
  std::span<const int64_t> block_max_time;
  std::span<const uint32_t> champ_at, champ_doc, champ_date;
  if (!r.get(section_tag(s, f_avgdl), avgdl) || !r.get(section_tag(s, f_len_norm), len_norm) ||
      !r.get(section_tag(s, f_block_max), block_max) ||
      !r.get(section_tag(s, f_block_max_time), block_max_time) ||
      !r.get(section_tag(s, f_champ_at), champ_at) ||
      !r.get(section_tag(s, f_champ_part), champ_part) ||
      !r.get(section_tag(s, f_champ_doc), champ_doc) ||
      !r.get(section_tag(s, f_champ_date), champ_date)) {
    return false;
  }
  if (avgdl.size() != 1 || len_norm.size() != docs_.size() || block_max.size() != skips_.size() ||
      block_max_time.size() != skips_.size() || champ_at.size() != terms_.size() ||
      champ_part.size() != champ_doc.size() || champ_date.size() != champ_doc.size()) {
    return false;
  }
  for (uint32_t at : champ_at) {
    if (at != UINT32_MAX && (at > champ_doc.size() || champ_doc.size() - at < champ_len)) {
      return false;
    }
  }
  for (size_t i = 0; i < champ_doc.size(); ++i) {
    if (champ_doc[i] >= docs_.size() || champ_date[i] >= docs_.size()) {
      return false;
    }
  }
  avgdl_ = avgdl[0];
  copy_to(len_norm_, len_norm);
  copy_to(block_max_, block_max);
  copy_to(block_max_time_, block_max_time);
  copy_to(champ_at_, champ_at);
  copy_to(champ_part_, champ_part);
  copy_to(champ_doc_, champ_doc);
  copy_to(champ_date_, champ_date);
  loaded_avgdl_ = avgdl_;
  load_impact(r, s);
  return true;
}

// The impact terms' sections, when present and consistent (else finalize() computes them).
void local_shard::load_impact(const index_reader& r, uint32_t s) {
  saved_impact x;
  if (!r.get(section_tag(s, f_impact_terms), x.terms) ||
      !r.get(section_tag(s, f_impact_at), x.at) || !r.get(section_tag(s, f_impact_doc), x.doc) ||
      !r.get(section_tag(s, f_impact_part), x.part) ||
      !r.get(section_tag(s, f_impact_rows), x.rows)) {
    return;
  }
  const size_t m = x.terms.size();
  bool ok = m <= impact_terms_most && x.at.size() == m + 1 && x.at[0] == 0 &&
            x.at[m] == x.doc.size() && x.part.size() == x.doc.size() &&
            x.rows.size() == (m == 0 ? 0 : docs_.size()) &&
            reinterpret_cast<uintptr_t>(x.rows.data()) % alignof(impact_row) == 0;
  for (size_t i = 0; ok && i < m; ++i) {
    ok = x.terms[i] < terms_.size() && x.at[i] <= x.at[i + 1] &&
         x.at[i + 1] - x.at[i] <= terms_[x.terms[i]].df;
  }
  for (size_t j = 0; ok && j < x.doc.size(); ++j) {
    ok = x.doc[j] < docs_.size();
  }
  x.valid = ok;
  loaded_impact_ = x;
}

namespace {

struct disk_term_slot {  // local_shard::term_slot's layout
  uint64_t key, head;
};

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
    case f_time:
    case f_doc_tags:
    case f_tag_chars:
    case f_tag_lens:
    case f_tag_escape:
    case f_tag_table:
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
      p.postings += bytes;
      break;
    case f_pos_stream:
      p.positions += bytes;
      break;
    default:
      break;
  }
}

template <class Sections>
index_parts parts_of(const Sections& sections, uint64_t file_bytes) {
  index_parts p;
  for (const auto& s : sections) {
    count_part(p, s.tag, s.bytes);
  }
  p.other = file_bytes - p.stories - p.postings - p.positions;
  return p;
}

// A shard's sections as read from a file.
struct shard_sections {
  std::span<const shard_stats> stats;
  std::span<const disk_doc> docs;
  std::span<const uint8_t> stories, tag_chars, tag_escape, doc_stream, pos_stream;
  std::span<const uint8_t> texts, text_dict;
  std::span<const uint64_t> text_at;
  std::span<const int64_t> time;
  std::span<const uint32_t> doc_tags, tag_lens, tag_table, title_len, text_len;
  std::span<const char> term_chars;
  std::span<const term_info> terms;
  std::span<const disk_term_slot> term_table;
  std::span<const skip_entry> skips;
  std::span<const uint32_t> pair_terms, pair_docs, pair_posting_ranks;

  // Whether every section is there.
  bool read(const index_reader& r, uint32_t s) {
    return r.get(section_tag(s, f_stats), stats) && r.get(section_tag(s, f_docs), docs) &&
           r.bytes(section_tag(s, f_stories), stories) && r.get(section_tag(s, f_time), time) &&
           r.get(section_tag(s, f_doc_tags), doc_tags) &&
           r.bytes(section_tag(s, f_tag_chars), tag_chars) &&
           r.get(section_tag(s, f_tag_lens), tag_lens) &&
           r.bytes(section_tag(s, f_tag_escape), tag_escape) &&
           r.get(section_tag(s, f_tag_table), tag_table) &&
           r.get(section_tag(s, f_title_len), title_len) &&
           r.get(section_tag(s, f_text_len), text_len) &&
           r.get(section_tag(s, f_term_chars), term_chars) &&
           r.get(section_tag(s, f_terms), terms) &&
           r.get(section_tag(s, f_term_table), term_table) &&
           r.bytes(section_tag(s, f_doc_stream), doc_stream) &&
           r.bytes(section_tag(s, f_pos_stream), pos_stream) &&
           r.get(section_tag(s, f_skips), skips) &&
           r.get(section_tag(s, f_pair_terms), pair_terms) &&
           r.get(section_tag(s, f_pair_docs), pair_docs) &&
           r.get(section_tag(s, f_pair_posting_ranks), pair_posting_ranks) &&
           r.bytes(section_tag(s, f_texts), texts) && r.get(section_tag(s, f_text_at), text_at) &&
           r.bytes(section_tag(s, f_text_dict), text_dict);
  }

  // Checksums already hold; these checks keep a file this build did not write (or a bug) from
  // sending a query out of bounds. "" or what is inconsistent. `text_raw`: the doc flag of a
  // text stored raw.
  std::string check(uint32_t text_raw) const {
    const size_t n = docs.size();
    if (stats.size() != 1 || stats[0].docs != n || time.size() != n || title_len.size() != n ||
        text_len.size() != n || tag_lens.size() != tag_escape.size() || doc_stream.size() < 16 ||
        pos_stream.size() < 16 ||
        (!term_table.empty() && !std::has_single_bit(term_table.size())) ||
        (!tag_table.empty() && !std::has_single_bit(tag_table.size()))) {
      return "sections of inconsistent sizes";
    }
    uint64_t tag_bytes = 0;
    for (uint32_t len : tag_lens) {
      tag_bytes += len;
    }
    if (tag_bytes != tag_chars.size()) {
      return "tag names of inconsistent sizes";
    }
    if (text_at.size() != n + 1 || text_at[0] != 0 || text_at[n] != texts.size()) {
      return "texts of inconsistent sizes";
    }
    for (size_t d = 0; d < n; ++d) {
      const disk_doc& x = docs[d];
      const uint64_t len = uint64_t{x.id_len} + x.title_len + x.url_len + x.by_len;
      if (x.off > stories.size() || len > stories.size() - x.off ||
          uint64_t{x.tags_off} + x.tag_count > doc_tags.size()) {
        return "a story out of bounds";
      }
      // a raw text has its length; a compressed one is a non-empty frame
      const bool raw = (x.escape & text_raw) != 0;
      if (text_at[d + 1] < text_at[d] ||
          (raw ? text_at[d + 1] - text_at[d] != x.text_len : text_at[d + 1] == text_at[d])) {
        return "a text out of bounds";
      }
    }
    for (uint32_t t : doc_tags) {
      if (t >= tag_lens.size()) {
        return "a tag out of bounds";
      }
    }
    for (const term_info& ti : terms) {
      const uint64_t blocks = (uint64_t{ti.df} + block_docs - 1) / block_docs;
      if (ti.doc_off > doc_stream.size() || ti.pos_off > pos_stream.size() ||
          ti.skip_off > skips.size() || blocks > skips.size() - ti.skip_off ||
          uint64_t{ti.name_off} + ti.name_len > term_chars.size()) {
        return "a term out of bounds";
      }
    }
    if (pair_terms.size() > UINT16_MAX ||
        pair_docs.size() != pair_terms.size() * pair_terms.size() ||
        pair_posting_ranks.size() != 1 || pair_posting_ranks[0] > pair_terms.size()) {
      return "a pair table of inconsistent size";
    }
    std::vector<uint8_t> paired(terms.size(), 0);
    for (uint32_t t : pair_terms) {
      if (t >= terms.size() || paired[t]++ != 0) {
        return "a pair table word out of bounds or repeated";
      }
    }
    for (uint32_t docs_with : pair_docs) {
      if (docs_with > n) {
        return "a pair count above the shard's docs";
      }
    }
    for (const disk_term_slot& ts : term_table) {
      if (ts.key != 0 && (ts.key & 0xFFFFFFFFu) > terms.size()) {
        return "the term table points out of bounds";
      }
    }
    return {};
  }
};

}  // namespace

std::string local_shard::load(const index_reader& r, uint32_t slot) {
  static_assert(sizeof(term_slot) == sizeof(disk_term_slot));
  shard_sections x;
  if (!x.read(r, slot + 1)) {
    return fmt::format("shard {}: a section is missing", slot);
  }
  if (std::string why = x.check(k_text_raw); !why.empty()) {
    return fmt::format("shard {}: {}", slot, why);
  }
  stats_ = x.stats[0];
  docs_.clear();
  docs_.reserve(x.docs.size());  // filled without a zeroing pass first
  const char* story_base = reinterpret_cast<const char*>(x.stories.data());
  for (const disk_doc& d : x.docs) {
    docs_.push_back({story_base + d.off, d.id_len, d.title_len, d.url_len, d.by_len, d.text_len,
                     d.tags_off, d.tag_count, d.escape, d.score, d.comments});
  }
  copy_to(time_, x.time);
  copy_to(doc_tags_, x.doc_tags);
  tag_names_.clear();
  for (size_t t = 0, at = 0; t < x.tag_lens.size(); at += x.tag_lens[t++]) {
    tag_names_.emplace_back(reinterpret_cast<const char*>(x.tag_chars.data()) + at, x.tag_lens[t]);
  }
  copy_to(tag_escape_, x.tag_escape);
  copy_to(tag_table_, x.tag_table);
  copy_to(title_len_, x.title_len);
  copy_to(text_len_, x.text_len);
  copy_to(term_chars_, x.term_chars);
  copy_to(terms_, x.terms);
  term_table_.resize(x.term_table.size());
  std::memcpy(term_table_.data(), x.term_table.data(), x.term_table.size_bytes());
  copy_to(skips_, x.skips);
  copy_to(pair_terms_, x.pair_terms);
  copy_to(pair_docs_, x.pair_docs);
  pair_posting_ranks_ = x.pair_posting_ranks[0];
  pair_rank_.assign(terms_.size(), UINT16_MAX);
  for (size_t r = 0; r < pair_terms_.size(); ++r) {
    pair_rank_[pair_terms_[r]] = static_cast<uint16_t>(r);
  }
  // The streams and the stories are read in place; the mapping lives as long as the shard.
  doc_stream_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.doc_stream.data()),
                                                       free_deleter{false});
  pos_stream_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.pos_stream.data()),
                                                       free_deleter{false});
  doc_stream_bytes_ = x.doc_stream.size();
  pos_stream_bytes_ = x.pos_stream.size();
  texts_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.texts.data()),
                                                  free_deleter{false});
  texts_bytes_ = x.texts.size();
  text_at_store_.clear();
  text_at_ = x.text_at;
  text_dict_store_.clear();
  text_dict_ = x.text_dict;
  if (!digest_text_dict()) {
    return fmt::format("shard {}: a text dictionary zstd does not take", slot);
  }
  mapping_ = r.mapping();
  load_derived(r, slot);
  // What was copied (or only checked) leaves the process' resident set: its pages stay in the
  // page cache, and nothing reads them through the mapping again (a section left off this list
  // by mistake still reads right: its pages fault back in, a cost only).
  // (The impact rows are read in place too, but released as well: a query of common words
  // touches few of them, and their pages fault back in one by one.)
  static constexpr uint32_t in_place[] = {f_stories,   f_texts,      f_text_at,
                                          f_text_dict, f_doc_stream, f_pos_stream};
  r.release(slot + 1, in_place);
  return {};
}

index_parts index_writer::parts() const { return parts_of(dir_, at_); }

index_parts index_reader::parts() const { return parts_of(sections_, file_bytes_); }

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
