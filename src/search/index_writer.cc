// index_writer: appends a shard's checksummed sections to an index file through an O_DIRECT
// staging buffer, then the directory and the header (index_layout.h holds their bytes).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "search/index_file.h"
#include "search/index_layout.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace index_layout;

index_writer::index_writer(int fd, bool direct)
    : fd_(fd), stage_at_(kHeaderRoom), at_(kHeaderRoom) {
  static_assert(kHeaderRoom % kDirectAlign == 0 && kStageBytes % kDirectAlign == 0);
  stage_ = static_cast<uint8_t*>(detail::alloc_build(kStageBytes));  // 2 MB aligned
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
    const size_t k = std::min(n, kStageBytes - staged_);
    std::memcpy(stage_ + staged_, p, k);
    staged_ += k;
    p += k;
    n -= k;
    if (staged_ == kStageBytes) {
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
  static constexpr uint8_t zeros[kAlign] = {};
  const size_t pad = (kAlign - at_ % kAlign) % kAlign;
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
  std::memcpy(fh.magic, kMagic, sizeof kMagic);
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

index_parts index_writer::parts() const { return parts_of(dir_, at_); }

}  // namespace tollgate::search
