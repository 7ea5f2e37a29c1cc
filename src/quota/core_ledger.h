// Private to src/quota: the state of a core's ledger. core_ledger (tollgate/quota/service.h)
// declares the methods, once; their definitions (core_ledger.cc, journal_writer.cc) reach this
// state through impl_of(*this), the d-pointer idiom without the pointer: service makes every
// ledger a core_ledger_impl, so the cast is free. Core-local.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string_view>
#include <vector>

#include "quota/journal.h"
#include "tollgate/common/buffer.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

class alignas(64) core_ledger_impl final : public core_ledger {
 public:
  core_ledger_impl(service& svc, int index);
  ~core_ledger_impl();

 private:
  friend class core_ledger;
  friend class service;

  // What core_ledger's methods reach of the service, whose friend this class is (theirs is not).
  const service_options& opt() const noexcept { return svc_.opt_; }
  const key_table* newest_table() const noexcept {
    return svc_.current_.load(std::memory_order_acquire);
  }
  service::impl& shared() const noexcept;  // core_ledger.cc (service_impl.h)
  void maybe_background(int64_t now_ns) { svc_.maybe_background(now_ns); }

  struct local_key {
    key_state* state = nullptr;
    uint64_t key_id = 0;
    int64_t lease = 0;        ///< units this core may still admit (current month)
    uint32_t plan_epoch = 0;  ///< the key's plan_epoch when the lease was taken
    int64_t used_delta = 0;   ///< billed successes not yet published
    int64_t overage_delta = 0;
    int64_t first_s = 0;  ///< unix seconds of the first and last of them (0: none)
    int64_t last_s = 0;
    bool dirty = false;   ///< listed in dirty_
    bool active = false;  ///< admitted since the last reconcile (keeps its lease)
  };
  struct late_entry {  ///< successes settled after this core moved to a newer month
    key_state* state;
    uint32_t month;
    int64_t count;
    bool overage;
    int64_t first_s;  ///< unix seconds of the first and last of them
    int64_t last_s;
  };

  /// Lists `lk` for the next reconcile (publish deltas, return lease). No allocation: dirty_
  /// has capacity for every slot.
  void touch(local_key& lk, uint32_t slot, key_state* state, uint64_t key_id) noexcept {
    if (!lk.dirty) {
      lk.dirty = true;
      lk.state = state;
      lk.key_id = key_id;
      dirty_.push_back(slot);
    }
  }
  void refresh_table() noexcept;
  void switch_table(const key_table* t) noexcept;
  void roll_month(uint32_t month) noexcept;
  bool take_lease(const key_record& k, local_key& lk) noexcept;
  /// Counts one billed success (and whether it was overage) in the open (not yet encoded)
  /// record, sealing the previous one when the key or month differs: consecutive successes of a
  /// key cost an increment, and the CRC is computed once per record, not per call.
  void append_record(uint32_t month, uint64_t key_id, bool overage) noexcept {
    if (open_count_ != 0 && open_key_ == key_id && open_month_ == month &&
        open_count_ < UINT32_MAX) {
      ++open_count_;
      open_overage_ += overage ? 1 : 0;
      return;
    }
    seal_record();
    open_month_ = month;
    open_key_ = key_id;
    open_count_ = 1;
    open_overage_ = overage ? 1 : 0;
  }
  void seal_record() noexcept;
  /// Room check of admit(): true when the journal can take one more call's record (space
  /// reserved on disk for it, or reservation unsupported by the file system, and no write
  /// failing). room_calls_ counts records, taken at seal_record(): two left cover the open
  /// record and one this call may open. Else tries to reserve more (at most every 100 ms).
  bool journal_room() noexcept { return room_calls_ >= 2 || make_room(); }
  /// Bytes the journal needs on disk for what is buffered, the open record and `calls` more
  /// records. (Calls admitted and not yet settled hold no bytes yet; at the pass boundaries
  /// where this is counted an HTTP core has none: admit and settle happen in one handle().)
  uint64_t room_needed(uint64_t calls = 1) const noexcept {
    return journal_size_ + journal_out_.size() + journal_buf_.size() +
           (calls + 1) * journal::kRecordSize;
  }
  /// Sets room_calls_ from the reservation: how many more calls may be admitted before the
  /// reservation must be looked at again.
  void recount_room() noexcept;
  bool make_room() noexcept;
  /// fallocate(KEEP_SIZE) so the file has room for `need` bytes and one more step. Rate
  /// limited after a failure. Returns whether there is room for `need`.
  bool reserve(uint64_t need) noexcept;
  void count_error() noexcept;
  void update_failing() noexcept;
  /// Every byte handed out was written: clears a write failure.
  void note_written() noexcept;
  void note_write_failed() noexcept;
  /// Once per pass with records to write: dates the oldest, tops the reservation up.
  void note_unwritten() noexcept;
  /// take_journal() after journal_give_up_ms of failed writes: drops the unwritten records
  /// (all but the rest of one already started on file) and takes back what they counted.
  void drop_unwritten() noexcept;
  /// Takes back the calls of one dropped record: usage, overage and the billed counters; the
  /// units of a current-month record go back to the lease, as a failed call's do.
  void uncount(uint32_t month, uint64_t key_id, int64_t count, int64_t overage) noexcept;
  /// Opens the journal of the current generation: 0, or the errno of the failure (logged).
  int open_journal() noexcept;
  bool write_buffer(out_buffer& b) noexcept;
  void publish_locked(bool return_all_leases) noexcept;
  /// Returns lk's unused lease to its key's pool (paying the key's debt first); lease = 0.
  void give_back_lease_locked(local_key& lk) noexcept;

  /// One remembered key: the presented bytes that authenticated to `rec` in the table of
  /// `epoch` (0: empty). Valid only while that table is this core's table_: refresh_table()
  /// wipes every slot when the core moves to a new table (a reload after a revocation,
  /// suspension or plan change), so an answer from the cache is always one the current table
  /// gives. Only successful look-ups are remembered: an unknown key (attacker-chosen bytes)
  /// never evicts a real one, and is always hashed.
  struct key_cache_slot {
    uint64_t epoch = 0;
    const key_record* rec = nullptr;
    uint32_t len = 0;
    char bytes[100] = {};
  };
  static constexpr size_t kKeyCacheSlots = 8;  // power of two
  static constexpr size_t kKeyCacheMaxLen = sizeof(key_cache_slot::bytes);
  void clear_key_cache() noexcept;

  service& svc_;
  int index_;
  const key_table* table_ = nullptr;
  key_cache_slot key_cache_[kKeyCacheSlots];
  uint64_t key_cache_hits_ = 0;
  uint64_t billed_calls_ = 0;
  uint64_t overage_calls_ = 0;
  uint64_t key_cache_misses_ = 0;
  alignas(64) std::atomic<uint64_t> seen_epoch_{0};  // written here, read by the reclaimer
  std::vector<local_key> locals_;
  std::vector<uint32_t> dirty_;
  std::vector<late_entry> late_;
  uint32_t month_ = 0;
  int64_t month_end_ns_ = 0;
  out_buffer journal_buf_;
  out_buffer journal_out_;       // taken by take_journal(), not yet (fully) written
  bool journal_busy_ = false;    // a taken chunk's write is in flight
  bool engine_journal_ = false;  // take_journal() is in use: the engine writes and syncs
  bool sync_requested_ = false;  // fdatasync due, not yet handed out
  bool sync_inflight_ = false;
  uint64_t sync_bytes_ = 0;  // unsynced_bytes_ when the in-flight sync was handed out
  uint64_t journal_errors_ = 0;
  uint64_t open_key_ = 0;  // the record being coalesced (count 0: none)
  uint32_t open_month_ = 0;
  uint32_t open_count_ = 0;
  uint32_t open_overage_ = 0;  // of open_count_, the successes billed as overage
  int journal_fd_ = -1;
  uint64_t journal_gen_ = 0;
  uint64_t journal_size_ = 0;  // bytes written to the current file
  uint64_t unsynced_bytes_ = 0;
  int64_t last_reconcile_ns_ = 0;
  int64_t last_fsync_ns_ = 0;
  // Disk faults (see "Disk faults" in journal_writer.cc).
  uint64_t reserved_end_ = 0;          // file offset up to which space is reserved
  bool reserve_unsupported_ = false;   // the file system has no fallocate: rely on write errors
  bool reserve_failed_ = false;        // the last reservation failed (ENOSPC, EROFS, EIO...)
  bool write_failed_ = false;          // the last journal write failed; its bytes are kept
  int64_t write_failed_since_ns_ = 0;  // CLOCK_MONOTONIC of the first failure of this episode
  int64_t next_reserve_ns_ = 0;        // CLOCK_MONOTONIC: no reservation attempt before this
  int64_t pass_now_ns_ = 0;            // CLOCK_REALTIME of the current pass (before_send)
  int64_t pass_now_s_ = 0;             // the same in unix seconds: billed calls' times
  int64_t room_calls_ = 0;             // records the reservation still holds (see journal_room)
  journal_health health_;
};

inline core_ledger_impl& impl_of(core_ledger& l) noexcept {
  return static_cast<core_ledger_impl&>(l);
}
inline const core_ledger_impl& impl_of(const core_ledger& l) noexcept {
  return static_cast<const core_ledger_impl&>(l);
}

}  // namespace tollgate::quota
