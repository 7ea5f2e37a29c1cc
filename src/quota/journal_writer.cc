// The usage journal of each core: buffering, writing (write(2) or the engine's io_uring),
// space reservation and the handling of a full or failing data dir.
//
// Durability (per core):
//   - settle(success) appends a journal record to the core's buffer; before_send() writes the
//     pass's records with one write(2) before responses are sent; on_tick fdatasyncs every
//     fsync_ms. With the io_uring engine, take_journal() hands the pass's bytes to the engine
//     instead (a second buffer holds them while the write is in flight; a short or failed
//     write keeps the rest for the next take) and on_tick only flags the fdatasync as due.
//   - reconcile: flush, then under `mu` publish the core's deltas into the shared counters and
//     record `covered[core] = {gen, offset}`: every journal byte of this core before that point
//     is included in the counters. The snapshot copies counters and `covered` under the same
//     lock, so recovery = snapshot + journal bytes after `covered`, exactly once.
//   - a journal past journal_rotate_bytes is rotated to generation gen+1 at reconcile; persist()
//     deletes generations that a durable snapshot covers (compaction).
//
// Disk faults (a full, read-only or failing data dir):
//   1. Space for records is reserved ahead of the journal's end with fallocate(KEEP_SIZE), a
//      step (reserve_step) at a time, topped up once per pass when half a step is left. A full
//      disk therefore fails a reservation, not a write: admit() sees there is no room for one
//      more record and refuses the call as `unavailable` before it runs (not billed, no unit
//      taken). File systems without fallocate skip this and rely on 2.
//   2. A write that fails (EIO, EROFS...) keeps its bytes; the engine (or the next pass) retries
//      them, and admit() refuses billed calls until they are written.
//   3. Failed reservations are retried at most every 100 ms (on_tick too, so recovery needs no
//      traffic); health() tells /readyz and /metrics, and every episode is logged once.
//   4. A write still failing after journal_give_up_ms drops the unwritten records (keeping the
//      rest of one already begun on file) and takes back what they counted; the chunk says so
//      and the engine refuses the answers that waited for them (503, not billed).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "quota/journal.h"
#include "quota/service_impl.h"
#include "tollgate/common/fd_io.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

int core_ledger_impl::open_journal() noexcept {
  const std::string path = svc_.impl_->usage_dir + "/" + journal_name(index_, journal_gen_);
  journal_fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (journal_fd_ < 0) {
    const int e = errno;
    log_error("cannot open usage journal {}: {}", path, std::strerror(e));
    return e;
  }
  off_t end = ::lseek(journal_fd_, 0, SEEK_END);
  journal_size_ = end > 0 ? static_cast<uint64_t>(end) : 0;
  reserved_end_ = journal_size_;
  next_reserve_ns_ = 0;
  reserve(room_needed());
  update_failing();
  recount_room();
  return 0;
}

void core_ledger_impl::recount_room() noexcept {
  if (write_failed_ || journal_fd_ < 0) {
    room_calls_ = 0;
  } else if (reserve_unsupported_) {
    room_calls_ = INT64_MAX / 2;
  } else {
    const uint64_t need = room_needed(0);
    room_calls_ = reserved_end_ > need
                      ? static_cast<int64_t>((reserved_end_ - need) / journal::kRecordSize)
                      : 0;
  }
}

bool core_ledger_impl::make_room() noexcept {
  if (write_failed_) {
    return false;  // records are waiting to be written: nothing new until they are
  }
  if (journal_fd_ < 0) {
    const int64_t now = mono_ns();
    if (now < next_reserve_ns_) {
      return false;
    }
    if (open_journal() != 0) {
      next_reserve_ns_ = now + kReserveRetryNs;
      update_failing();
      return false;
    }
  }
  if (!reserve_unsupported_) {
    reserve(room_needed());
  }
  recount_room();
  return room_calls_ >= 2;
}

bool core_ledger_impl::reserve(uint64_t need) noexcept {
  if (reserve_unsupported_ || journal_fd_ < 0) {
    return reserve_unsupported_;
  }
  const int64_t now = mono_ns();
  if (now < next_reserve_ns_) {
    return reserved_end_ >= need;
  }
  const uint64_t target = need + reserve_step;
  const int r = ::fallocate(journal_fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(journal_size_),
                            static_cast<off_t>(target - journal_size_));
  if (r == 0) {
    reserved_end_ = target;
    recount_room();
    if (reserve_failed_) {
      reserve_failed_ = false;
      log_info("usage journal on core {}: space reserved again; billed calls are answered", index_);
      update_failing();
    }
    return true;
  }
  const int e = errno;
  if (e == EOPNOTSUPP || e == ENOSYS) {
    reserve_unsupported_ = true;
    recount_room();
    log_info(
        "usage journal on core {}: the file system cannot reserve space (fallocate: {}); "
        "a full disk is found by failing writes instead",
        index_, std::strerror(e));
    return true;
  }
  count_error();
  next_reserve_ns_ = now + kReserveRetryNs;
  if (!reserve_failed_) {
    reserve_failed_ = true;
    log_error(
        "usage journal on core {}: cannot reserve space: {}{}; billed calls are refused as "
        "unavailable once the {} byte(s) still reserved are used, until space returns",
        index_, std::strerror(e),
        e == EFBIG ? " (the process's file size limit, ulimit -f, is reached)" : "",
        reserved_end_ > need ? reserved_end_ - need : 0);
    update_failing();
  }
  return reserved_end_ >= need;
}

void core_ledger_impl::count_error() noexcept {
  ++journal_errors_;
  health_.errors.store(journal_errors_, std::memory_order_relaxed);
}

void core_ledger_impl::update_failing() noexcept {
  health_.failing.store(write_failed_ || reserve_failed_ || journal_fd_ < 0,
                        std::memory_order_relaxed);
}

void core_ledger_impl::note_written() noexcept {
  if (write_failed_) {
    write_failed_ = false;
    log_info("usage journal on core {}: records written again", index_);
    update_failing();
    recount_room();
  }
  // relaxed: a figure for /metrics. Records settled while a write was in flight are the oldest
  // unwritten ones now.
  const bool left = !journal_buf_.empty() || !journal_out_.empty() || open_count_ != 0;
  health_.unwritten_since_ns.store(left ? pass_now_ns_ : 0, std::memory_order_relaxed);
}

void core_ledger_impl::note_write_failed() noexcept {
  count_error();
  if (!write_failed_) {
    write_failed_ = true;
    write_failed_since_ns_ = mono_ns();
    update_failing();
  }
  room_calls_ = 0;
}

void core_ledger_impl::note_unwritten() noexcept {
  if (health_.unwritten_since_ns.load(std::memory_order_relaxed) == 0) {
    health_.unwritten_since_ns.store(pass_now_ns_ == 0 ? 1 : pass_now_ns_,
                                     std::memory_order_relaxed);
  }
  // Top the reservation up once half a step is left (one compare per pass when there is room).
  if (!reserve_unsupported_ && journal_fd_ >= 0 &&
      reserved_end_ < room_needed() + reserve_step / 2) {
    reserve(room_needed() + reserve_step / 2);
  }
  recount_room();
}

bool core_ledger_impl::write_buffer(out_buffer& b) noexcept {
  const size_t done = write_all(journal_fd_, {b.data(), b.size()});
  journal_size_ += done;
  unsynced_bytes_ += done;
  if (done != b.size()) {
    const int e = errno;
    b.consume(done);
    note_write_failed();
    log_error("usage journal write failed on core {}: {}", index_, std::strerror(e));
    return false;
  }
  b.clear();
  return true;
}

bool core_ledger::flush_journal() noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.seal_record();
  if (self.journal_busy_) {
    return false;  // an engine write is in flight: writing now could interleave with its rest
  }
  if (self.journal_buf_.empty() && self.journal_out_.empty()) {
    return true;
  }
  self.note_unwritten();
  if (self.journal_fd_ < 0) {
    self.open_journal();
    if (self.journal_fd_ < 0) {
      return false;
    }
  }
  // A taken chunk's unwritten rest goes first: it holds whole records only from its start.
  if (self.write_buffer(self.journal_out_) && self.write_buffer(self.journal_buf_)) {
    self.note_written();
    return true;
  }
  return false;
}

core_ledger::journal_chunk core_ledger::take_journal() noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.engine_journal_ = true;
  journal_chunk c;
  if (self.journal_busy_) {
    return c;  // misuse: one chunk at a time
  }
  if (self.write_failed_ &&
      mono_ns() - self.write_failed_since_ns_ >= self.opt().journal_give_up_ms * kNsPerMs) {
    self.drop_unwritten();  // the answers waiting for these records are refused instead
    c.dropped = true;
  }
  if (self.journal_out_.empty()) {
    self.seal_record();
    std::swap(self.journal_buf_, self.journal_out_);  // both keep their capacity: no allocation
  }
  if (!self.journal_out_.empty()) {
    self.note_unwritten();
  }
  if (!self.journal_out_.empty() && self.journal_fd_ < 0) {
    self.open_journal();
  }
  c.fd = self.journal_fd_;
  if (self.sync_requested_ && !self.sync_inflight_ && self.journal_fd_ >= 0) {
    c.sync_due = true;
    self.sync_requested_ = false;
    self.sync_inflight_ = true;
    self.sync_bytes_ = self.unsynced_bytes_;  // the chunk written alongside may land after the sync
  }
  if (!self.journal_out_.empty() && self.journal_fd_ >= 0) {
    c.bytes = self.journal_out_.view();
    self.journal_busy_ = true;
  } else if (!self.journal_out_.empty()) {
    c.bytes = self.journal_out_.view();  // fd -1: the engine reports a failure and retries later
  }
  return c;
}

void core_ledger_impl::drop_unwritten() noexcept {
  seal_record();
  int64_t calls = 0;
  // Bytes leave a buffer only from its front and records enter whole, so a size that is not a
  // whole number of records starts with the rest of a record already begun on file: that rest
  // is kept (the file would otherwise hold a torn record before the next ones). Only the buffer
  // written first can hold one: the second is written only after the first is empty.
  auto drop = [&](out_buffer& b) {
    const size_t keep = b.size() % journal::kRecordSize;
    journal::scan(std::string_view(b.data() + keep, b.size() - keep), 0,
                  [&](const journal::record& r) {
                    uncount(r.month, r.key_id, r.count, r.overage);
                    calls += r.count;
                  });
    b.resize(keep);
  };
  drop(journal_out_);
  drop(journal_buf_);
  log_error(
      "usage journal on core {}: writes failed for {} ms; {} call(s) answered meanwhile "
      "are not billed and are refused as unavailable",
      index_, svc_.opt_.journal_give_up_ms, calls);
  // relaxed: figures for /metrics.
  health_.refused.store(health_.refused.load(std::memory_order_relaxed) + calls,
                        std::memory_order_relaxed);
  health_.dropped.store(health_.dropped.load(std::memory_order_relaxed) + calls,
                        std::memory_order_relaxed);
  if (!journal_out_.empty() || !journal_buf_.empty()) {
    write_failed_since_ns_ = mono_ns();  // a record's rest is still to be written
    return;
  }
  // Nothing is waiting any more: billed calls are admitted again once space can be reserved
  // (a read-only or full file system fails that at once), and held no longer than this again.
  write_failed_ = false;
  next_reserve_ns_ = 0;
  if (!reserve_unsupported_) {
    reserve(room_needed());
  }
  update_failing();
  recount_room();
  health_.unwritten_since_ns.store(0, std::memory_order_relaxed);
}

void core_ledger_impl::uncount(uint32_t month, uint64_t key_id, int64_t count,
                               int64_t overage) noexcept {
  billed_calls_ -= static_cast<uint64_t>(count);
  overage_calls_ -= static_cast<uint64_t>(overage);
  if (month == month_) {
    // Not published yet (reconcile publishes only once every record is written): the key is
    // still listed with these calls in its deltas.
    for (const uint32_t slot : dirty_) {
      local_key& lk = locals_[slot];
      if (lk.key_id == key_id) {
        lk.used_delta -= count;
        lk.overage_delta -= overage;
        lk.lease += count - overage;  // as settle(failure) gives a unit back
        if (lk.used_delta == 0) {
          lk.first_s = 0;  // no billed call left to date (else the times may span a dropped one)
          lk.last_s = 0;
        }
        return;
      }
    }
  } else {
    // Billed to a month this core has left: held as late entries, overage and not apart.
    int64_t plain = count - overage;
    for (late_entry& e : late_) {
      if (e.month == month && e.state->key_id == key_id) {
        int64_t& want = e.overage ? overage : plain;
        const int64_t n = std::min(want, e.count);
        e.count -= n;
        want -= n;
      }
    }
    if (plain == 0 && overage == 0) {
      return;
    }
  }
  log_error(
      "usage journal on core {}: a dropped record of key {} was not found in the "
      "core's counts",
      index_, key_id_string(key_id));
}

void core_ledger::journal_done(int64_t res) noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.journal_busy_ = false;
  if (res < 0) {
    self.note_write_failed();
    log_error("usage journal write failed on core {}: {}; {} byte(s) kept for a retry", self.index_,
              std::strerror(static_cast<int>(-res)), self.journal_out_.size());
    return;
  }
  const auto n = std::min(static_cast<size_t>(res), self.journal_out_.size());
  self.journal_out_.consume(n);  // a short write keeps the rest (moved to the front) for next time
  self.journal_size_ += n;
  self.unsynced_bytes_ += n;
  if (self.journal_out_.empty()) {
    self.note_written();
  }
}

void core_ledger::journal_synced(int res) noexcept {
  core_ledger_impl& self = impl_of(*this);
  self.sync_inflight_ = false;
  if (res < 0) {
    self.count_error();
    log_error("usage journal fdatasync failed on core {}: {}", self.index_, std::strerror(-res));
    self.sync_requested_ = true;
    return;
  }
  self.unsynced_bytes_ -= std::min(self.unsynced_bytes_, self.sync_bytes_);
}

}  // namespace tollgate::quota
