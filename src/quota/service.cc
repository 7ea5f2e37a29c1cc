// The quota service: shared key state, lookup tables, reconciliation, persistence, recovery.
//
// Table reclamation (quiescent-state based, lock-free for readers):
//   1. The service publishes the current table through `current_` (release store).
//   2. A shard uses exactly one table at a time (`table_`). Only at its quiescent points
//      (before_send and on_tick, where it holds no key_record*) does it load `current_`
//      (acquire) and then store that table's epoch into its own `seen_epoch_` (release).
//   3. A replaced table goes on a retired list with its epoch. The reclaimer (under reload_mu)
//      frees a retired table once every shard's seen_epoch_ is greater than that table's epoch:
//      each shard has by then switched to a newer table at a quiescent point and cannot hold
//      a pointer into the old one.
// Request paths never lock and never write shared memory for lookups. Key state lives outside
// tables (owned by the service for its lifetime), so swapping tables never loses a counter.
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
//      step (kReserveStep) at a time, topped up once per pass when half a step is left. A full
//      disk therefore fails a reservation, not a write: admit() sees there is no room for one
//      more record and refuses the call as `unavailable` before it runs (not billed, no unit
//      taken). File systems without fallocate skip this and rely on 2.
//   2. A write that fails (EIO, EROFS...) keeps its bytes; the engine (or the next pass) retries
//      them, and admit() refuses billed calls until they are written.
//   3. Failed reservations are retried at most every 100 ms (on_tick too, so recovery needs no
//      traffic); health() tells /readyz and /metrics, and every episode is logged once.
#include "tollgate/quota/service.h"

#include <dirent.h>
#include <fcntl.h>
#include <time.h>
// The low-level SHA256_* calls are deprecated in OpenSSL 3 but allocation-free (see
// authenticate); this file opts out of the deprecation warnings for them.
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "quota/journal.h"
#include "quota/state.h"
#include "tollgate/common/assert.h"
#include "tollgate/common/fd_io.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"

namespace tollgate::quota {

namespace {
constexpr int64_t kNsPerSec = 1000000000;
constexpr int64_t kNsPerMs = 1000000;

int64_t ceil_secs(int64_t ns) noexcept { return ns <= 0 ? 0 : (ns + kNsPerSec - 1) / kNsPerSec; }

// Cold paths only (reservations): the hot path uses the engine's clock.
int64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}
constexpr int64_t kReserveRetryNs = 100 * kNsPerMs;
static_assert(journal::kRecordSize == 28, "core_shard::room_needed() counts 28-byte records");

struct covered_pos {
  uint64_t gen = 0;
  uint64_t offset = 0;
};

std::string journal_name(int core, uint64_t gen) {
  return fmt::format("journal-{}-{}.bin", core, gen);
}

// Parses "journal-C-G.bin".
bool parse_journal_name(std::string_view n, int& core, uint64_t& gen) {
  if (n.substr(0, 8) != "journal-" || n.size() < 13 || n.substr(n.size() - 4) != ".bin") {
    return false;
  }
  std::string_view mid = n.substr(8, n.size() - 12);
  size_t dash = mid.find('-');
  if (dash == std::string_view::npos) {
    return false;
  }
  auto a = std::from_chars(mid.data(), mid.data() + dash, core);
  auto b = std::from_chars(mid.data() + dash + 1, mid.data() + mid.size(), gen);
  return a.ec == std::errc() && a.ptr == mid.data() + dash && b.ec == std::errc() &&
         b.ptr == mid.data() + mid.size() && core >= 0;
}

std::string month_label(uint32_t m) {
  return fmt::format("{:04}-{:02}", month_year(m), month_of_year(m));
}

}  // namespace

struct service::impl {
  impl(const std::string& dir, bool cluster)
      : store(dir), usage_dir(dir + "/usage"), cluster(cluster) {}

  key_store store;
  std::string usage_dir;
  const bool cluster;  // pools are filled by a lease_source; keys come from install_keys()
  store_contents installed;  // cluster: the keys and accounts last installed (reload_mu)
  bool installed_new = false;
  std::unordered_map<uint64_t, double> rate_share;  // cluster: key -> this node's share (reload_mu)
  double default_share = 1.0;                       // keys without one (reload_mu)

  // Guards: states/by_slot (structure and key_state's plain fields), closed, covered,
  // publication into the shared counters, month rollover.
  std::mutex mu;
  std::unordered_map<uint64_t, std::unique_ptr<key_state>> states;
  std::vector<key_state*> by_slot;
  std::map<uint32_t, std::map<uint64_t, usage_totals>> closed;  // month -> key -> totals
  std::vector<uint32_t> closed_dirty;                            // months to export
  std::vector<covered_pos> covered;                              // per core

  // Guards table building and reclamation.
  std::mutex reload_mu;
  std::unique_ptr<key_table> current;
  std::vector<std::unique_ptr<key_table>> retired;
  fs::file_stamp keys_stamp, accounts_stamp;
  uint64_t next_epoch = 1;
  size_t loaded_keys = 0;  // entries of the files the table in force was built from
  size_t loaded_accounts = 0;

  std::mutex persist_mu;
  bool persist_failing = false;  // guarded by persist_mu

  key_state* state_for_locked(uint64_t key_id, int64_t quota, uint32_t month) {
    auto it = states.find(key_id);
    if (it != states.end()) {
      key_state* s = it->second.get();
      if (quota != s->quota && cluster) {
        // The budget is Redis's: the next lease is judged against the new quota there. Leases
        // taken under the old one go back to the node's pool at their core's next admit.
        s->quota = quota;
        s->plan_epoch.fetch_add(1, std::memory_order_relaxed);
      }
      if (quota != s->quota) {  // plan changed: shift the remaining budget by the difference
        // pool - debt + leases out + used == quota holds before and after. A cut below what
        // the pool holds becomes debt, paid by the leases the cores hand back (at their next
        // admit of the key, or reconcile), so a lowered quota is never overrun.
        uint64_t p = s->pool.load(std::memory_order_relaxed);
        int64_t debt = 0;
        for (;;) {
          int64_t units = quota - s->used.load(std::memory_order_relaxed);
          if (pool_month(p) == month) {
            units = pool_units(p) - s->debt + quota - s->quota;
          }
          debt = units < 0 ? -units : 0;
          if (s->pool.compare_exchange_weak(p, make_pool(month, units),
                                            std::memory_order_relaxed)) {
            break;
          }
        }
        s->debt = pool_month(p) == month ? debt : 0;
        s->quota = quota;
        // Leases taken before this point are handed back at their core's next admit of the
        // key (or reconcile), paying the debt; relaxed: the give-back takes the mutex.
        s->plan_epoch.fetch_add(1, std::memory_order_relaxed);
      }
      return s;
    }
    auto s = std::make_unique<key_state>();
    s->key_id = key_id;
    s->quota = quota;
    s->slot = static_cast<uint32_t>(by_slot.size());
    s->pool.store(make_pool(month, cluster ? 0 : quota), std::memory_order_relaxed);
    by_slot.push_back(s.get());
    key_state* raw = s.get();
    states.emplace(key_id, std::move(s));
    return raw;
  }
};

// ---------------------------------------------------------------------------------------------
// Headers

namespace {
// A header fragment copied with one fixed-size move.
template <size_t N>
char* put_text(char* dst, const char (&s)[N]) noexcept {
  std::memcpy(dst, s, N - 1);
  return dst + (N - 1);
}

// Writes v at dst and remembers where its digits are, so a second use copies them instead of
// converting again (six values appear twice in the headers).
struct number_run {
  const char* at = nullptr;
  size_t len = 0;
};
char* put_remembered(char* dst, int64_t v, number_run& r) noexcept {
  r.at = dst;
  char* e = json_out::put_number(dst, v);
  r.len = static_cast<size_t>(e - dst);
  return e;
}
char* put_again(char* dst, const number_run& r) noexcept {
  std::memcpy(dst, r.at, r.len);  // an earlier part of the same reservation: no overlap
  return dst + r.len;
}

constexpr char kRateHeaderText[] =
    "X-RateLimit-Limit: \r\nX-RateLimit-Remaining: \r\nX-RateLimit-Reset: \r\nX-Quota-Limit: "
    "\r\nX-Quota-Used: \r\nX-Quota-Remaining: \r\nX-Quota-Reset: \r\nRateLimit-Policy: "
    "\"burst\";q=;w=, \"monthly\";q=;w=2592000\r\nRateLimit: \"burst\";r=;t=, \"monthly\";r=;t="
    "\r\nRetry-After: \r\n";
// The most write_rate_headers() can write: its fixed text and 15 numbers of at most 20
// characters each (an int64 with its sign).
constexpr size_t kRateHeaderBound = sizeof kRateHeaderText - 1 + 15 * 20;
}  // namespace

void write_rate_headers(out_buffer& out, const figures& f) {
  // One reservation for the worst case, then plain stores: no per-piece capacity checks and no
  // fmt.
  char* const begin = out.prepare(kRateHeaderBound);
  char* p = begin;
  number_run rate_limit;
  number_run rate_remaining;
  number_run rate_reset;
  number_run quota_limit;
  number_run quota_remaining;
  number_run quota_reset;
  p = put_text(p, "X-RateLimit-Limit: ");
  p = put_remembered(p, f.rate_limit, rate_limit);
  p = put_text(p, "\r\nX-RateLimit-Remaining: ");
  p = put_remembered(p, f.rate_remaining, rate_remaining);
  p = put_text(p, "\r\nX-RateLimit-Reset: ");
  p = put_remembered(p, f.rate_reset_secs, rate_reset);
  p = put_text(p, "\r\nX-Quota-Limit: ");
  p = put_remembered(p, f.quota_limit, quota_limit);
  p = put_text(p, "\r\nX-Quota-Used: ");
  p = json_out::put_number(p, f.quota_used);
  p = put_text(p, "\r\nX-Quota-Remaining: ");
  p = put_remembered(p, f.quota_remaining, quota_remaining);
  p = put_text(p, "\r\nX-Quota-Reset: ");
  p = put_remembered(p, f.quota_reset_secs, quota_reset);
  p = put_text(p, "\r\nRateLimit-Policy: \"burst\";q=");
  p = put_again(p, rate_limit);
  p = put_text(p, ";w=");
  p = json_out::put_number(p, f.rate_window_secs);
  p = put_text(p, ", \"monthly\";q=");
  p = put_again(p, quota_limit);
  p = put_text(p, ";w=2592000\r\nRateLimit: \"burst\";r=");
  p = put_again(p, rate_remaining);
  p = put_text(p, ";t=");
  p = put_again(p, rate_reset);
  p = put_text(p, ", \"monthly\";r=");
  p = put_again(p, quota_remaining);
  p = put_text(p, ";t=");
  p = put_again(p, quota_reset);
  p = put_text(p, "\r\n");
  if (f.retry_after_secs > 0) {
    p = put_text(p, "Retry-After: ");
    p = json_out::put_number(p, f.retry_after_secs);
    p = put_text(p, "\r\n");
  }
  TOLLGATE_ASSERT(static_cast<size_t>(p - begin) <= kRateHeaderBound);
  out.commit(static_cast<size_t>(p - begin));
}

// ---------------------------------------------------------------------------------------------
// core_shard

core_shard::core_shard(service& svc, int index) : svc_(svc), index_(index) {
  journal_buf_.reserve(64 * 1024);
  journal_out_.reserve(64 * 1024);
  late_.reserve(64);
  refresh_table();  // the journal is opened by service::open once its generation is known
}

core_shard::~core_shard() {
  if (journal_fd_ >= 0) {
    ::close(journal_fd_);
  }
}

void core_shard::refresh_table() noexcept {
  // acquire: pairs with the release store in reload_if_changed, so the table's contents are
  // visible before we use it.
  const key_table* t = svc_.current_.load(std::memory_order_acquire);
  if (t == table_) {
    return;
  }
  table_ = t;
  clear_key_cache();  // remembered records belong to the old table
  if (t->slot_count > locals_.size()) {  // allocation only when keys were added
    locals_.resize(t->slot_count + 64);
    dirty_.reserve(locals_.size());
  }
  // release: the reclaimer reading this epoch knows we are done with older tables.
  seen_epoch_.store(t->epoch, std::memory_order_release);
}

int core_shard::open_journal() noexcept {
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

void core_shard::recount_room() noexcept {
  if (write_failed_ || journal_fd_ < 0) {
    room_calls_ = 0;
  } else if (reserve_unsupported_) {
    room_calls_ = INT64_MAX / 2;
  } else {
    const uint64_t need = room_needed(0);
    room_calls_ = reserved_end_ > need ? static_cast<int64_t>((reserved_end_ - need) / 28) : 0;
  }
}

bool core_shard::make_room() noexcept {
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

bool core_shard::reserve(uint64_t need) noexcept {
  if (reserve_unsupported_ || journal_fd_ < 0) {
    return reserve_unsupported_;
  }
  const int64_t now = mono_ns();
  if (now < next_reserve_ns_) {
    return reserved_end_ >= need;
  }
  const uint64_t target = need + kReserveStep;
  const int r = ::fallocate(journal_fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(journal_size_),
                            static_cast<off_t>(target - journal_size_));
  if (r == 0) {
    reserved_end_ = target;
    recount_room();
    if (reserve_failed_) {
      reserve_failed_ = false;
      log_info("usage journal on core {}: space reserved again; billed calls are answered",
               index_);
      update_failing();
    }
    return true;
  }
  const int e = errno;
  if (e == EOPNOTSUPP || e == ENOSYS) {
    reserve_unsupported_ = true;
    recount_room();
    log_info("usage journal on core {}: the file system cannot reserve space (fallocate: {}); "
             "a full disk is found by failing writes instead",
             index_, std::strerror(e));
    return true;
  }
  count_error();
  next_reserve_ns_ = now + kReserveRetryNs;
  if (!reserve_failed_) {
    reserve_failed_ = true;
    log_error("usage journal on core {}: cannot reserve space: {}; billed calls are refused as "
              "unavailable once the {} byte(s) still reserved are used, until space returns",
              index_, std::strerror(e), reserved_end_ > need ? reserved_end_ - need : 0);
    update_failing();
  }
  return reserved_end_ >= need;
}

void core_shard::count_error() noexcept {
  ++journal_errors_;
  health_.errors.store(journal_errors_, std::memory_order_relaxed);
}

void core_shard::update_failing() noexcept {
  health_.failing.store(write_failed_ || reserve_failed_ || journal_fd_ < 0,
                        std::memory_order_relaxed);
}

void core_shard::note_written() noexcept {
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

void core_shard::note_write_failed() noexcept {
  count_error();
  if (!write_failed_) {
    write_failed_ = true;
    write_failed_since_ns_ = mono_ns();
    update_failing();
  }
  room_calls_ = 0;
}

void core_shard::note_unwritten() noexcept {
  if (health_.unwritten_since_ns.load(std::memory_order_relaxed) == 0) {
    health_.unwritten_since_ns.store(pass_now_ns_ == 0 ? 1 : pass_now_ns_,
                                     std::memory_order_relaxed);
  }
  // Top the reservation up once half a step is left (one compare per pass when there is room).
  if (!reserve_unsupported_ && journal_fd_ >= 0 &&
      reserved_end_ < room_needed() + kReserveStep / 2) {
    reserve(room_needed() + kReserveStep / 2);
  }
  recount_room();
}

void core_shard::clear_key_cache() noexcept {
  for (key_cache_slot& e : key_cache_) {
    OPENSSL_cleanse(e.bytes, sizeof e.bytes);  // no secret outlives its table here
    e.epoch = 0;
    e.rec = nullptr;
    e.len = 0;
  }
}

namespace {
// Constant-time equality of two n-byte strings (n is public): 8 bytes at a time, no
// data-dependent branch. CRYPTO_memcmp compares a byte per iteration through a library call;
// this runs on every request.
bool equal_ct(const char* a, const char* b, size_t n) noexcept {
  uint64_t diff = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x;
    uint64_t y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    diff |= x ^ y;
  }
  for (; i < n; ++i) {
    diff |= static_cast<uint64_t>(static_cast<unsigned char>(a[i] ^ b[i]));
  }
  return diff == 0;
}

// The cache slot of a presented key: a multiplicative hash of its last 8 bytes (the random part
// of a tg_live_ secret) and its length. It only picks which remembered key the constant-time
// comparison runs against; a caller can learn from timing whether the bytes it presented were
// remembered, which needs them to be a valid key already.
size_t key_slot_of(std::string_view k, size_t slots) noexcept {
  uint64_t w = k.size();
  if (k.size() >= 8) {
    uint64_t tail;
    std::memcpy(&tail, k.data() + k.size() - 8, 8);
    w ^= tail;
  } else {
    for (char c : k) {
      w = (w << 8) | static_cast<unsigned char>(c);
    }
  }
  return static_cast<size_t>((w * 0x9E3779B97F4A7C15ull) >> 58) & (slots - 1);
}
}  // namespace

const key_record* core_shard::authenticate(std::string_view presented) noexcept {
  if (presented.empty() || table_ == nullptr || table_->records.empty()) {
    return nullptr;
  }
  key_cache_slot* slot = nullptr;
  if (presented.size() <= kKeyCacheMaxLen) {
    slot = &key_cache_[key_slot_of(presented, kKeyCacheSlots)];
    // The length is not secret (every key has the same format); the bytes are compared in
    // constant time, as the digests are below.
    if (slot->epoch == table_->epoch && slot->len == presented.size() &&
        equal_ct(slot->bytes, presented.data(), presented.size())) {
      ++key_cache_hits_;
      return slot->rec;
    }
  }
  ++key_cache_misses_;
  // SHA-256 through OpenSSL's low-level interface: on OpenSSL 3.0 every EVP_DigestInit
  // allocates a fresh provider context, and this runs on every request. The digest is the same
  // one key_store::sha256 (EVP) stores.
  digest d;
  SHA256_CTX c;
  if (SHA256_Init(&c) != 1 || SHA256_Update(&c, presented.data(), presented.size()) != 1 ||
      SHA256_Final(d.data(), &c) != 1) {
    return nullptr;
  }
  uint64_t h;
  std::memcpy(&h, d.data(), sizeof h);
  const key_table& t = *table_;
  for (uint64_t i = h & t.mask;; i = (i + 1) & t.mask) {
    int32_t idx = t.index[i];
    if (idx < 0) {
      return nullptr;
    }
    const key_record& r = t.records[static_cast<size_t>(idx)];
    // Constant-time comparison of the full digest (the secret's hash never leaks by timing).
    if (CRYPTO_memcmp(r.hash.data(), d.data(), d.size()) == 0) {
      if (slot != nullptr) {
        slot->epoch = t.epoch;
        slot->rec = &r;
        slot->len = static_cast<uint32_t>(presented.size());
        std::memcpy(slot->bytes, presented.data(), presented.size());
      }
      return &r;
    }
  }
}

rate_verdict core_shard::check_rate(const key_record& k, int64_t now_ns, figures& f) noexcept {
  // GCRA: the key's theoretical arrival time (tat) advances by one emission interval T per
  // admitted request; a request is admitted if, after advancing, tat - now <= burst * T. One
  // CAS per request makes it exact across cores. relaxed: the value itself is the only data.
  std::atomic<int64_t>& a = k.state->tat_ns;
  int64_t tat = a.load(std::memory_order_relaxed);
  int64_t ntat;
  for (;;) {
    ntat = std::max(tat, now_ns) + k.emission_ns;
    if (ntat - now_ns > k.tolerance_ns) {
      break;
    }
    if (a.compare_exchange_weak(tat, ntat, std::memory_order_relaxed)) {
      f.rate_limit = k.burst;
      f.rate_remaining = (k.tolerance_ns - (ntat - now_ns)) / k.emission_ns;
      f.rate_reset_secs = ceil_secs(ntat - now_ns);
      f.rate_window_secs = k.window_secs;
      f.retry_after_secs = 0;
      return rate_verdict::ok;
    }
  }
  f.rate_limit = k.burst;
  f.rate_remaining = 0;
  f.rate_reset_secs = std::max<int64_t>(1, ceil_secs(tat - now_ns));
  f.rate_window_secs = k.window_secs;
  f.retry_after_secs = std::max<int64_t>(1, ceil_secs(ntat - now_ns - k.tolerance_ns));
  return rate_verdict::limited;
}

void core_shard::refund_rate(const key_record& k, int64_t now_ns, figures& f) noexcept {
  // The admission advanced tat by T from max(tat, now); stepping it back by T leaves the key
  // where it would be without that request (an earlier tat below now means the same as now).
  // relaxed: as in check_rate.
  std::atomic<int64_t>& a = k.state->tat_ns;
  int64_t tat = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(tat, tat - k.emission_ns, std::memory_order_relaxed)) {
  }
  const int64_t ahead = std::max<int64_t>(0, tat - k.emission_ns - now_ns);
  f.rate_remaining = (k.tolerance_ns - ahead) / k.emission_ns;
  f.rate_reset_secs = ceil_secs(ahead);
}

bool core_shard::take_lease(const key_record& k, local_key& lk) noexcept {
  std::atomic<uint64_t>& pool = k.state->pool;
  // Read before the pool: a rebase between the two leaves this lease tagged with the older
  // epoch, so it is handed back at the next admit (harmless), never kept past a cut.
  lk.plan_epoch = k.state->plan_epoch.load(std::memory_order_relaxed);
  uint64_t p = pool.load(std::memory_order_relaxed);
  for (;;) {
    const uint32_t pm = pool_month(p);
    if (pm != month_) {
      if (pm < month_) {  // this core is first into the new month: roll the service over
        {
          std::lock_guard g(svc_.impl_->mu);
          svc_.ensure_month_locked(month_);
        }
        p = pool.load(std::memory_order_relaxed);
        continue;
      }
      roll_month(pm);  // another core already rolled over (our clock lags slightly)
      p = pool.load(std::memory_order_relaxed);
      continue;
    }
    const int64_t avail = pool_units(p);
    if (avail == 0) {
      return false;
    }
    // Leases shrink with the budget: a quarter of the remainder per core, at most max_lease,
    // at least 1. Near zero every unit is taken singly, so no core hoards the last ones.
    const int64_t cores = static_cast<int64_t>(svc_.shards_.empty() ? 1 : svc_.shards_.size());
    const int64_t n = std::clamp<int64_t>(avail / (4 * cores), 1, svc_.opt_.max_lease);
    // relaxed: a count; no other data is published through the pool.
    if (pool.compare_exchange_weak(p, make_pool(month_, avail - n), std::memory_order_relaxed)) {
      lk.lease += n;
      return true;
    }
  }
}

lease_outcome core_shard::refill_from_cluster(const key_record& k, local_key& lk) noexcept {
  // Other cores may take the fresh units first; a few rounds settle it. Still empty after
  // them: reported as out of reach (never as a spent quota, which it may not be).
  for (int round = 0; round < 8; ++round) {
    const lease_outcome o = svc_.opt_.leases->refill(*k.state, month_);
    if (o != lease_outcome::refilled) {
      return o;
    }
    if (take_lease(k, lk)) {
      return o;
    }
  }
  return lease_outcome::unreachable;
}

admit_verdict core_shard::admit(const key_record& k, int64_t now_ns, figures& f,
                                ticket& t) noexcept {
  if (now_ns >= month_end_ns_) {
    roll_month(month_index_of_ns(now_ns));
  }
  const int64_t reset = std::max<int64_t>(1, ceil_secs(month_end_ns_ - now_ns));
  f.quota_limit = k.monthly_quota;
  f.quota_reset_secs = reset;
  if (k.suspended) {
    fill_quota(k, now_ns, f);
    return admit_verdict::suspended;
  }
  if (!journal_room()) {
    // Not recordable: not made, not billed (design §6). The figures are the key's as they stand.
    fill_quota(k, now_ns, f);
    f.retry_after_secs = 1;
    health_.refused.store(health_.refused.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
    return admit_verdict::unavailable;
  }
  local_key& lk = locals_[k.slot];
  bool over = false;
  if (lk.lease > 0 &&
      lk.plan_epoch != k.state->plan_epoch.load(std::memory_order_relaxed)) {
    // A reload changed the key's quota since this lease was taken: hand it back (paying a
    // cut first) and take a new one from the rebased pool. Rare: once per core and reload.
    std::lock_guard g(svc_.impl_->mu);
    give_back_lease_locked(lk);
  }
  if (lk.lease == 0 && svc_.opt_.leases != nullptr && !take_lease(k, lk)) {
    // Cluster mode: the node's pool is filled from Redis; wait (bounded) for units.
    const lease_outcome lo = refill_from_cluster(k, lk);
    if (lo == lease_outcome::unreachable && k.overage == overage_policy::stop) {
      // An outage is not a bill: the figures stay as they are, the caller retries shortly.
      fill_quota(k, now_ns, f);
      f.retry_after_secs = 1;
      return admit_verdict::quota_unreachable;
    }
  }
  if (lk.lease == 0 && !take_lease(k, lk)) {
    if (k.overage == overage_policy::stop) {
      // Every unit is spent or leased to a core that is spending it. Used is what was used
      // (more than the limit after a reload cut the quota below it, as /v1/usage says), and at
      // least the limit: the units leased out are committed to calls in flight on other cores.
      // Cluster mode adds what the other nodes billed (0 on a single node).
      const int64_t used = k.state->used.load(std::memory_order_relaxed) +
                           k.state->remote_used.load(std::memory_order_relaxed) + lk.used_delta;
      f.quota_used = std::max(used, k.monthly_quota);
      f.quota_remaining = 0;
      f.retry_after_secs = reset;
      return admit_verdict::quota_exceeded;
    }
    over = true;
  }
  if (!over) {
    --lk.lease;
  }
  touch(lk, k.slot, k.state, k.key_id);  // after take_lease: a month roll there clears flags
  lk.active = true;
  t.state = k.state;
  t.key_id = k.key_id;
  t.slot = k.slot;
  t.month = month_;
  t.overage = over;
  // The figures count this call, as X-RateLimit-Remaining counts this request: a response
  // reports the month as it stands once the call it answers is billed, so the answer to the
  // last call a quota allows says 0 remaining. A call that fails after admission is not billed;
  // REST re-reads the figures for its error, MCP's headers are written before the tool runs and
  // count it until the next response.
  const int64_t used = k.state->used.load(std::memory_order_relaxed) +
                       k.state->remote_used.load(std::memory_order_relaxed) + lk.used_delta + 1;
  f.quota_used = used;
  f.quota_remaining = std::max<int64_t>(0, k.monthly_quota - used);
  return admit_verdict::ok;
}

void core_shard::seal_record() noexcept {
  if (open_count_ == 0) {
    return;
  }
  char* dst = journal_buf_.prepare(journal::kRecordSize);
  journal::encode(dst, journal::record{open_month_, open_key_, open_count_, open_overage_});
  journal_buf_.commit(journal::kRecordSize);
  --room_calls_;
  open_count_ = 0;
}

void core_shard::settle(const ticket& t, bool success) noexcept {
  if (success) {
    ++billed_calls_;
    overage_calls_ += t.overage ? 1 : 0;
  }
  if (t.month != month_) {
    // Admitted before this core moved to a new month: bill it to the month it was admitted in.
    if (success) {
      append_record(t.month, t.key_id, t.overage);
      late_.push_back({t.state, t.month, 1, t.overage});
    }
    return;  // a failure's unit belonged to the closed month's budget: nothing to return
  }
  local_key& lk = locals_[t.slot];
  // A reconcile may have run since admit (asynchronous outcomes): list the key again.
  touch(lk, t.slot, t.state, t.key_id);
  if (success) {
    ++lk.used_delta;
    if (t.overage) {
      ++lk.overage_delta;
    }
    append_record(t.month, t.key_id, t.overage);
  } else if (!t.overage) {
    ++lk.lease;  // refund: the unit goes back to this core's lease
  }
}

void core_shard::fill_quota(const key_record& k, int64_t now_ns, figures& f) const noexcept {
  int64_t end_ns = month_end_ns_;
  int64_t used = k.state->used.load(std::memory_order_relaxed) +
                 k.state->remote_used.load(std::memory_order_relaxed);
  if (now_ns >= end_ns) {  // month ended but this core has not rolled yet
    end_ns = month_end_secs(month_index_of_ns(now_ns)) * kNsPerSec;
    used = 0;
  } else if (k.slot < locals_.size()) {
    used += locals_[k.slot].used_delta;
  }
  f.quota_limit = k.monthly_quota;
  f.quota_used = used;
  f.quota_remaining = std::max<int64_t>(0, k.monthly_quota - used);
  f.quota_reset_secs = std::max<int64_t>(1, ceil_secs(end_ns - now_ns));
}

bool core_shard::write_buffer(out_buffer& b) noexcept {
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

bool core_shard::flush_journal() noexcept {
  seal_record();
  if (journal_busy_) {
    return false;  // an engine write is in flight: writing now could interleave with its rest
  }
  if (journal_buf_.empty() && journal_out_.empty()) {
    return true;
  }
  note_unwritten();
  if (journal_fd_ < 0) {
    open_journal();
    if (journal_fd_ < 0) {
      return false;
    }
  }
  // A taken chunk's unwritten rest goes first: it holds whole records only from its start.
  if (write_buffer(journal_out_) && write_buffer(journal_buf_)) {
    note_written();
    return true;
  }
  return false;
}

core_shard::journal_chunk core_shard::take_journal() noexcept {
  engine_journal_ = true;
  journal_chunk c;
  if (journal_busy_) {
    return c;  // misuse: one chunk at a time
  }
  if (write_failed_ &&
      mono_ns() - write_failed_since_ns_ >= svc_.opt_.journal_give_up_ms * kNsPerMs) {
    drop_unwritten();  // the answers waiting for these records are refused instead
    c.dropped = true;
  }
  if (journal_out_.empty()) {
    seal_record();
    std::swap(journal_buf_, journal_out_);  // both keep their capacity: no allocation
  }
  if (!journal_out_.empty()) {
    note_unwritten();
  }
  if (!journal_out_.empty() && journal_fd_ < 0) {
    open_journal();
  }
  c.fd = journal_fd_;
  if (sync_requested_ && !sync_inflight_ && journal_fd_ >= 0) {
    c.sync_due = true;
    sync_requested_ = false;
    sync_inflight_ = true;
    sync_bytes_ = unsynced_bytes_;  // the chunk written alongside may land after the sync
  }
  if (!journal_out_.empty() && journal_fd_ >= 0) {
    c.bytes = journal_out_.view();
    journal_busy_ = true;
  } else if (!journal_out_.empty()) {
    c.bytes = journal_out_.view();  // fd -1: the engine reports a failure and retries later
  }
  return c;
}

void core_shard::drop_unwritten() noexcept {
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
  log_error("usage journal on core {}: writes failed for {} ms; {} call(s) answered meanwhile "
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

void core_shard::uncount(uint32_t month, uint64_t key_id, int64_t count,
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
  log_error("usage journal on core {}: a dropped record of key {} was not found in the "
            "core's counts",
            index_, key_id_string(key_id));
}

void core_shard::journal_done(int64_t res) noexcept {
  journal_busy_ = false;
  if (res < 0) {
    note_write_failed();
    log_error("usage journal write failed on core {}: {}; {} byte(s) kept for a retry", index_,
              std::strerror(static_cast<int>(-res)), journal_out_.size());
    return;
  }
  const auto n = std::min(static_cast<size_t>(res), journal_out_.size());
  journal_out_.consume(n);  // a short write keeps the rest (moved to the front) for next time
  journal_size_ += n;
  unsynced_bytes_ += n;
  if (journal_out_.empty()) {
    note_written();
  }
}

void core_shard::journal_synced(int res) noexcept {
  sync_inflight_ = false;
  if (res < 0) {
    count_error();
    log_error("usage journal fdatasync failed on core {}: {}", index_, std::strerror(-res));
    sync_requested_ = true;
    return;
  }
  unsynced_bytes_ -= std::min(unsynced_bytes_, sync_bytes_);
}

// Publishes every listed key's deltas. Leases go back to the pool only from keys this core did
// not admit since the last reconcile (or all, at a month roll): a core still serving a key keeps
// spending its lease, so a key whose pool ran dry stays refused on the other cores instead of
// flickering back when a busy core reconciles; an idle core's units return within one interval.
void core_shard::publish_locked(bool return_all_leases) noexcept {
  service& s = svc_;
  if (month_ > s.month_.load(std::memory_order_relaxed)) {
    s.ensure_month_locked(month_);
  }
  const uint32_t svc_month = s.month_.load(std::memory_order_relaxed);
  auto add = [&](key_state* st, uint32_t month, int64_t used, int64_t over) {
    if (used == 0 && over == 0) {
      return;
    }
    if (month == svc_month) {
      // relaxed: readers only want an approximate figure; persist reads under the mutex.
      st->used.fetch_add(used, std::memory_order_relaxed);
      st->overage.fetch_add(over, std::memory_order_relaxed);
    } else {
      usage_totals& u = s.impl_->closed[month][st->key_id];
      u.used += used;
      u.overage += over;
      s.impl_->closed_dirty.push_back(month);
    }
  };
  size_t kept = 0;
  for (uint32_t slot : dirty_) {
    local_key& lk = locals_[slot];
    add(lk.state, month_, lk.used_delta, lk.overage_delta);
    lk.used_delta = 0;
    lk.overage_delta = 0;
    if (lk.lease > 0 && lk.active && !return_all_leases) {
      lk.active = false;
      dirty_[kept++] = slot;  // still listed: its lease is reconsidered next time
      continue;
    }
    give_back_lease_locked(lk);
    lk.active = false;
    lk.dirty = false;
  }
  dirty_.resize(kept);  // shrinking: no allocation
  for (const late_entry& e : late_) {
    add(e.state, e.month, e.count, e.overage ? e.count : 0);
  }
  late_.clear();
}

void core_shard::give_back_lease_locked(local_key& lk) noexcept {
  if (lk.lease > 0) {  // return the unused lease, unless its month's budget is gone
    uint64_t p = lk.state->pool.load(std::memory_order_relaxed);
    if (pool_month(p) == month_) {
      // A quota cut by a reload is paid first (the month only changes under the mutex we hold).
      const int64_t pay = std::min(lk.lease, lk.state->debt);
      lk.state->debt -= pay;
      const int64_t give = lk.lease - pay;
      while (give > 0 && pool_month(p) == month_ &&
             !lk.state->pool.compare_exchange_weak(p, make_pool(month_, pool_units(p) + give),
                                                   std::memory_order_relaxed)) {
      }
    }
  }
  lk.lease = 0;
}

void core_shard::reconcile(int64_t now_ns) noexcept {
  if (journal_busy_) {
    return;  // an engine write is in flight: the next tick reconciles
  }
  last_reconcile_ns_ = now_ns;
  if (!flush_journal()) {
    return;  // publishing now would let replay count the still-buffered records twice
  }
  // No rotation while space is short: the new file could not reserve any, and the old one
  // still has what it reserved.
  const bool rotate = journal_size_ >= static_cast<uint64_t>(svc_.opt_.journal_rotate_bytes) &&
                      !reserve_failed_;
  int old_fd = -1;
  if (rotate && journal_fd_ >= 0) {
    ::fdatasync(journal_fd_);
    old_fd = journal_fd_;
    const uint64_t old_size = journal_size_;
    const uint64_t old_reserved = reserved_end_;
    ++journal_gen_;
    open_journal();
    if (journal_fd_ < 0 || reserve_failed_) {  // could not rotate: keep the old file
      if (journal_fd_ >= 0) {
        ::close(journal_fd_);  // the new file stays empty; a later rotation appends to it
      }
      --journal_gen_;
      journal_fd_ = old_fd;
      old_fd = -1;
      journal_size_ = old_size;
      reserved_end_ = old_reserved;
      update_failing();
      recount_room();
    } else {
      unsynced_bytes_ = 0;
    }
  }
  {
    std::lock_guard g(svc_.impl_->mu);
    publish_locked(false);
    auto& cov = svc_.impl_->covered;
    if (cov.size() <= static_cast<size_t>(index_)) {
      cov.resize(static_cast<size_t>(index_) + 1);
    }
    cov[static_cast<size_t>(index_)] = {journal_gen_, old_fd >= 0 ? 0 : journal_size_};
  }
  if (old_fd >= 0) {
    ::close(old_fd);
  }
}

void core_shard::roll_month(uint32_t month) noexcept {
  if (month <= month_ && month_end_ns_ != 0) {
    return;
  }
  // Publish (and drop leases of) the old month first, then move on.
  if (flush_journal()) {
    std::lock_guard g(svc_.impl_->mu);
    publish_locked(true);
    auto& cov = svc_.impl_->covered;
    if (cov.size() <= static_cast<size_t>(index_)) {
      cov.resize(static_cast<size_t>(index_) + 1);
    }
    cov[static_cast<size_t>(index_)] = {journal_gen_, journal_size_};
  } else {
    // Records not yet written cannot be published; their counts stay the old month's, as late
    // entries (published to that month once written), never the new month's deltas.
    for (const uint32_t slot : dirty_) {
      local_key& lk = locals_[slot];
      if (lk.used_delta > lk.overage_delta) {
        late_.push_back({lk.state, month_, lk.used_delta - lk.overage_delta, false});
      }
      if (lk.overage_delta > 0) {
        late_.push_back({lk.state, month_, lk.overage_delta, true});
      }
      lk.used_delta = 0;
      lk.overage_delta = 0;
    }
  }
  month_ = month;
  month_end_ns_ = month_end_secs(month) * kNsPerSec;
  for (local_key& lk : locals_) {
    lk.lease = 0;
  }
}

void core_shard::before_send(int64_t now_ns) noexcept {
  pass_now_ns_ = now_ns;
  if (!engine_journal_) {
    flush_journal();  // else the engine writes the pass's bytes (take_journal)
  }
  refresh_table();
}

void core_shard::on_tick(int64_t now_ns) noexcept {
  pass_now_ns_ = now_ns;
  refresh_table();
  if ((reserve_failed_ || journal_fd_ < 0) && !write_failed_) {
    make_room();  // recovery needs no traffic: /readyz turns ready once space returns
  }
  if (now_ns >= month_end_ns_) {
    roll_month(month_index_of_ns(now_ns));
  }
  if (now_ns - last_reconcile_ns_ >= svc_.opt_.reconcile_ms * kNsPerMs) {
    reconcile(now_ns);
  }
  if (now_ns - last_fsync_ns_ >= svc_.opt_.fsync_ms * kNsPerMs) {
    last_fsync_ns_ = now_ns;
    if (engine_journal_) {
      // Off the request path: the engine submits an io_uring fdatasync with its next pass.
      sync_requested_ = sync_requested_ || unsynced_bytes_ > 0;
    } else {
      flush_journal();
      if (unsynced_bytes_ > 0 && journal_fd_ >= 0) {
        ::fdatasync(journal_fd_);
        unsynced_bytes_ = 0;
      }
    }
  }
  svc_.maybe_background(now_ns);
  refresh_table();
}

// ---------------------------------------------------------------------------------------------
// service

service::service(service_options opt)
    : opt_(std::move(opt)), impl_(new impl(opt_.data_dir, opt_.leases != nullptr)) {}

service::~service() { shards_.clear(); }

void service::ensure_month_locked(uint32_t month) {
  const uint32_t cur = month_.load(std::memory_order_relaxed);
  if (month <= cur) {
    return;
  }
  for (key_state* s : impl_->by_slot) {
    const int64_t used = s->used.load(std::memory_order_relaxed);
    const int64_t over = s->overage.load(std::memory_order_relaxed);
    if (used != 0 || over != 0) {
      usage_totals& u = impl_->closed[cur][s->key_id];
      u.used += used;
      u.overage += over;
    }
    s->used.store(0, std::memory_order_relaxed);
    s->overage.store(0, std::memory_order_relaxed);
    s->remote_used.store(0, std::memory_order_relaxed);
    s->pool.store(make_pool(month, impl_->cluster ? 0 : s->quota), std::memory_order_relaxed);
    s->debt = 0;  // a cut applied to the old month's budget
  }
  impl_->closed_dirty.push_back(cur);
  // release: a shard reading month() after this sees the reset counters.
  month_.store(month, std::memory_order_release);
  log_info("usage month {} closed; now counting {}", month_label(cur), month_label(month));
}

namespace {
// "N what (a, b, c, ...)": at most 8 names listed.
std::string counted(const std::vector<std::string>& names, std::string_view what) {
  std::string s = fmt::format("{} {}", names.size(), what);
  for (size_t i = 0; i < names.size() && i < 8; ++i) {
    s += i == 0 ? " (" : ", ";
    s += names[i];
  }
  if (!names.empty()) {
    s += names.size() > 8 ? ", ...)" : ")";
  }
  return s;
}

// Logs what a new table changes against the one in force (none: the first load).
void log_reload_effect(const key_table* old, const key_table& now) {
  if (old == nullptr) {
    log_info("keys loaded: {} key(s) in force", now.records.size());
    return;
  }
  std::unordered_map<uint64_t, const key_record*> before;
  for (const key_record& r : old->records) {
    before.emplace(r.key_id, &r);
  }
  std::vector<std::string> added, revoked, suspended, resumed;
  size_t unchanged = 0;
  for (const key_record& r : now.records) {
    auto it = before.find(r.key_id);
    if (it == before.end()) {
      added.push_back(key_id_string(r.key_id));
      continue;
    }
    if (r.suspended != it->second->suspended) {
      (r.suspended ? suspended : resumed).push_back(key_id_string(r.key_id));
    } else {
      ++unchanged;
    }
    before.erase(it);
  }
  for (const auto& [id, r] : before) {
    revoked.push_back(key_id_string(id));
  }
  log_info("keys reloaded: {}, {}, {}, {}, {} unchanged", counted(added, "added"),
           counted(revoked, "revoked"), counted(suspended, "suspended"),
           counted(resumed, "resumed"), unchanged);
}
}  // namespace

bool service::reload_if_changed(bool force, std::string* why) {
  std::lock_guard rl(impl_->reload_mu);
  const bool external = impl_->cluster;
  const fs::file_stamp ks = external ? fs::file_stamp{} : fs::stamp(impl_->store.keys_path());
  const fs::file_stamp as = external ? fs::file_stamp{} : fs::stamp(impl_->store.accounts_path());
  bool made = false;
  if (external ? force || impl_->installed_new
               : force || !(ks == impl_->keys_stamp) || !(as == impl_->accounts_stamp)) {
    impl_->installed_new = false;
    auto contents = external ? result<store_contents, store_error>(impl_->installed)
                             : impl_->store.load();
    // The CLI rewrites these files whole (temp file + rename) and never drops an entry (revoked
    // keys stay, flagged), so a file that held entries and now is gone or holds none was not
    // written by tollgate: a deletion, a truncation, a restore gone wrong. Revoking every key
    // (or resuming every account) on that is refused; the table in force stays. (Cluster mode:
    // the agent guards the key set it installs from Redis.)
    std::string suspect;
    if (!external && contents && impl_->loaded_keys > 0 && contents->keys.empty()) {
      suspect = fmt::format("{} {} (it held {} key(s))", impl_->store.keys_path(),
                            ks.ino == 0 ? "is gone" : "holds no key", impl_->loaded_keys);
    } else if (!external && contents && impl_->loaded_accounts > 0 &&
               contents->accounts.empty()) {
      suspect = fmt::format("{} {} (it held {} account(s))", impl_->store.accounts_path(),
                            as.ino == 0 ? "is gone" : "holds no account",
                            impl_->loaded_accounts);
    }
    if (!contents || !suspect.empty()) {
      std::string msg = contents ? suspect + "; the tollgate CLI never writes that, so it is "
                                             "taken as damage. Restore the file (or revoke keys "
                                             "with `tollgate keys revoke`)"
                                 : contents.error().message;
      log_error("keys not reloaded (the previous table stays in force): {}", msg);
      if (!suspect.empty()) {
        impl_->keys_stamp = ks;  // logged once per change of the files, not every second
        impl_->accounts_stamp = as;
      }
      if (why != nullptr) {
        *why = std::move(msg);
      }
    } else {
      impl_->keys_stamp = ks;
      impl_->accounts_stamp = as;
      impl_->loaded_keys = contents->keys.size();
      impl_->loaded_accounts = contents->accounts.size();
      auto t = std::make_unique<key_table>();
      t->epoch = impl_->next_epoch++;
      std::unordered_map<std::string_view, bool> suspended;
      for (const auto& a : contents->accounts) {
        suspended[a.name] = a.suspended;
      }
      {
        std::lock_guard g(impl_->mu);
        const uint32_t month = month_.load(std::memory_order_relaxed);
        for (const key_entry& e : contents->keys) {
          if (e.revoked) {
            continue;
          }
          auto pit = opt_.plans.find(e.plan);
          if (pit == opt_.plans.end()) {
            log_error("key {} of account {} names unknown plan \"{}\"; it is refused",
                      key_id_string(e.id), e.account, e.plan);
            continue;
          }
          const plan& p = pit->second;
          key_record r;
          r.hash = e.hash;
          r.key_id = e.id;
          r.state = impl_->state_for_locked(e.id, p.monthly_quota, month);
          r.slot = r.state->slot;
          auto sit = suspended.find(e.account);
          r.suspended = sit != suspended.end() && sit->second;
          r.overage = p.overage;
          r.monthly_quota = p.monthly_quota;
          r.burst = p.burst;
          r.emission_ns = std::max<int64_t>(1, static_cast<int64_t>(1e9 / p.rate_per_sec));
          r.tolerance_ns = r.emission_ns * p.burst;
          if (impl_->cluster) {
            // This node's share of the key's rate and burst (cluster::agent sets it by demand).
            r.state->base_emission_ns = r.emission_ns;
            r.state->base_burst = p.burst;
            auto sit = impl_->rate_share.find(e.id);
            const double share = sit != impl_->rate_share.end() ? sit->second
                                                                : impl_->default_share;
            if (share < 1.0) {
              r.burst = std::max<int64_t>(1, static_cast<int64_t>(p.burst * share));
              r.emission_ns = std::max<int64_t>(
                  1, static_cast<int64_t>(static_cast<double>(r.emission_ns) / share));
              r.tolerance_ns = r.emission_ns * r.burst;
            }
          }
          r.window_secs = std::max<int64_t>(1, ceil_secs(r.tolerance_ns));
          r.account = e.account;
          r.plan = e.plan;
          t->records.push_back(std::move(r));
        }
        t->slot_count = static_cast<uint32_t>(impl_->by_slot.size());
      }
      size_t cap = 16;
      while (cap < t->records.size() * 2) {
        cap *= 2;
      }
      t->mask = cap - 1;
      t->index.assign(cap, -1);
      for (size_t i = 0; i < t->records.size(); ++i) {
        uint64_t h;
        std::memcpy(&h, t->records[i].hash.data(), sizeof h);
        uint64_t j = h & t->mask;
        while (t->index[j] >= 0) {
          j = (j + 1) & t->mask;
        }
        t->index[j] = static_cast<int32_t>(i);
      }
      log_reload_effect(impl_->current.get(), *t);
      if (impl_->current) {
        impl_->retired.push_back(std::move(impl_->current));
      }
      impl_->current = std::move(t);
      // release: shards that acquire-load the pointer see the fully built table.
      current_.store(impl_->current.get(), std::memory_order_release);
      made = true;
    }
  }
  // Reclaim tables no shard can still be using.
  uint64_t min_seen = UINT64_MAX;
  for (const auto& s : shards_) {
    min_seen = std::min(min_seen, s->seen_epoch_.load(std::memory_order_acquire));
  }
  std::erase_if(impl_->retired, [&](const std::unique_ptr<key_table>& t) {
    return t->epoch < min_seen;
  });
  return made;
}

result<void, std::string> service::replace_plans(plan_map plans) {
  if (auto v = validate_plans(plans); !v) {
    return unexpected(v.error());
  }
  {
    std::lock_guard rl(impl_->reload_mu);
    // A key of a plan that disappeared would start getting 401s: refuse instead, naming it.
    if (impl_->current) {
      for (const key_record& r : impl_->current->records) {
        if (plans.find(r.plan) == plans.end()) {
          return unexpected(fmt::format(
              "plan \"{}\" is still used by key {} (account {}); move or revoke its keys "
              "before removing it",
              r.plan, key_id_string(r.key_id), r.account));
        }
      }
    }
    std::swap(opt_.plans, plans);  // `plans` now holds the previous set
  }
  std::string why;
  if (!reload_if_changed(true, &why)) {
    // The keys files could not be read: nothing changes, the previous plans included (the
    // table in force was built from them).
    std::lock_guard rl(impl_->reload_mu);
    opt_.plans = std::move(plans);
    return unexpected(why);
  }
  return {};
}

void service::install_keys(store_contents c) {
  {
    std::lock_guard rl(impl_->reload_mu);
    impl_->installed = std::move(c);
    impl_->installed_new = true;
  }
  reload_if_changed(false);
}

void service::set_rate_shares(double default_share,
                              const std::vector<std::pair<uint64_t, double>>& shares) {
  {
    std::lock_guard rl(impl_->reload_mu);
    impl_->default_share = std::clamp(default_share, 1e-6, 1.0);
    for (const auto& [id, s] : shares) {
      impl_->rate_share[id] = std::clamp(s, 1e-6, 1.0);
    }
    impl_->installed_new = true;
  }
  reload_if_changed(false);
}

void service::for_each_state(const std::function<void(key_state&)>& fn) {
  std::lock_guard g(impl_->mu);
  for (key_state* s : impl_->by_slot) {
    fn(*s);
  }
}

size_t service::key_count() const {
  std::lock_guard rl(impl_->reload_mu);
  return impl_->current ? impl_->current->records.size() : 0;
}

bool service::wait_until_in_force(int64_t timeout_ms) const {
  const key_table* t = current_.load(std::memory_order_acquire);
  if (t == nullptr) {
    return true;
  }
  for (int64_t waited = 0;; ++waited) {
    bool all = true;
    for (const auto& s : shards_) {
      all = all && s->seen_epoch_.load(std::memory_order_acquire) >= t->epoch;
    }
    if (all) {
      return true;
    }
    if (waited >= timeout_ms) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void service::maybe_background(int64_t now_ns) {
  int64_t due = next_reload_ns_.load(std::memory_order_relaxed);
  const bool requested = reload_requested_.exchange(false, std::memory_order_relaxed);
  if (requested || now_ns >= due) {
    if (requested || next_reload_ns_.compare_exchange_strong(
                         due, now_ns + opt_.reload_ms * kNsPerMs, std::memory_order_relaxed)) {
      reload_if_changed(requested);
    }
  }
  due = next_persist_ns_.load(std::memory_order_relaxed);
  if (now_ns >= due && next_persist_ns_.compare_exchange_strong(
                           due, now_ns + opt_.reconcile_ms * kNsPerMs,
                           std::memory_order_relaxed)) {
    persist(now_ns);
  }
}

void service::persist(int64_t /*now_ns*/) {
  std::lock_guard pl(impl_->persist_mu);
  std::string snap = "tollgate-usage v1\n";
  std::vector<covered_pos> covered;
  std::vector<std::pair<uint32_t, std::string>> exports;
  {
    std::lock_guard g(impl_->mu);
    const uint32_t month = month_.load(std::memory_order_relaxed);
    snap += fmt::format("month {}\n", month);
    covered = impl_->covered;
    for (size_t c = 0; c < covered.size(); ++c) {
      snap += fmt::format("covered {} {} {}\n", c, covered[c].gen, covered[c].offset);
    }
    for (key_state* s : impl_->by_slot) {
      const int64_t used = s->used.load(std::memory_order_relaxed);
      const int64_t over = s->overage.load(std::memory_order_relaxed);
      if (used != 0 || over != 0) {
        snap += fmt::format("used {} {} {} {}\n", month, key_id_string(s->key_id), used, over);
      }
    }
    for (const auto& [m, keys] : impl_->closed) {
      for (const auto& [id, u] : keys) {
        snap += fmt::format("used {} {} {} {}\n", m, key_id_string(id), u.used, u.overage);
      }
    }
    std::sort(impl_->closed_dirty.begin(), impl_->closed_dirty.end());
    impl_->closed_dirty.erase(
        std::unique(impl_->closed_dirty.begin(), impl_->closed_dirty.end()),
        impl_->closed_dirty.end());
    for (uint32_t m : impl_->closed_dirty) {
      std::string e = fmt::format(
          "# tollgate usage for {} (closed month, UTC): used <month> <key_id> <billed> "
          "<overage>\n",
          month_label(m));
      for (const auto& [id, u] : impl_->closed[m]) {
        e += fmt::format("used {} {} {} {}\n", m, key_id_string(id), u.used, u.overage);
      }
      exports.emplace_back(m, std::move(e));
    }
    impl_->closed_dirty.clear();
  }
  auto r = fs::write_file_atomic(impl_->usage_dir + "/snapshot.txt", snap);
  if (!r) {
    // Journals stay until a snapshot covers them: nothing is lost, the data dir only grows.
    // Logged once per episode (this runs every reconcile_ms), counted for /metrics.
    snapshot_errors_.fetch_add(1, std::memory_order_relaxed);
    if (!impl_->persist_failing) {
      impl_->persist_failing = true;
      log_error("usage snapshot not written: {}; journals are kept until one is", r.error());
    }
    return;
  }
  if (impl_->persist_failing) {
    impl_->persist_failing = false;
    log_info("usage snapshot written again");
  }
  for (const auto& [m, text] : exports) {
    auto w = fs::write_file_atomic(impl_->usage_dir + "/month-" + month_label(m) + ".txt", text);
    if (!w) {
      log_error("closed-month usage not written: {}", w.error());
    }
  }
  // Compaction: journal generations wholly covered by the durable snapshot go.
  DIR* d = ::opendir(impl_->usage_dir.c_str());
  if (d == nullptr) {
    return;
  }
  while (dirent* e = ::readdir(d)) {
    int core;
    uint64_t gen;
    if (parse_journal_name(e->d_name, core, gen) && static_cast<size_t>(core) < covered.size() &&
        gen < covered[static_cast<size_t>(core)].gen) {
      ::unlink((impl_->usage_dir + "/" + e->d_name).c_str());
    }
  }
  ::closedir(d);
}

void service::close(int64_t now_ns) {
  for (auto& s : shards_) {
    s->reconcile(now_ns);
    if (s->journal_fd_ >= 0) {
      ::fdatasync(s->journal_fd_);
    }
  }
  persist(now_ns);
}

usage_totals service::usage(uint64_t key_id, uint32_t month) const {
  std::lock_guard g(impl_->mu);
  if (month == month_.load(std::memory_order_relaxed)) {
    auto it = impl_->states.find(key_id);
    if (it == impl_->states.end()) {
      return {};
    }
    return {it->second->used.load(std::memory_order_relaxed),
            it->second->overage.load(std::memory_order_relaxed)};
  }
  auto mit = impl_->closed.find(month);
  if (mit == impl_->closed.end()) {
    return {};
  }
  auto kit = mit->second.find(key_id);
  return kit == mit->second.end() ? usage_totals{} : kit->second;
}

result<std::unique_ptr<service>, std::string> service::open(service_options opt, int64_t now_ns) {
  if (auto v = validate_plans(opt.plans); !v) {
    return unexpected(v.error());
  }
  if (opt.cores < 1 || opt.reconcile_ms < 1 || opt.fsync_ms < 1 || opt.reload_ms < 1 ||
      opt.max_lease < 1 || opt.journal_rotate_bytes < 1) {
    return unexpected(std::string("quota: cores, reconcile_ms, fsync_ms, reload_ms, max_lease "
                                  "and journal_rotate_bytes must be positive"));
  }
  std::unique_ptr<service> svc(new service(std::move(opt)));
  impl& im = *svc->impl_;
  if (auto d = fs::ensure_dir(im.usage_dir); !d) {
    return unexpected(d.error());
  }
  const uint32_t month = month_index_of_ns(now_ns);
  svc->month_.store(month, std::memory_order_relaxed);

  // 1. Snapshot: counters and how much of each core's journal they cover.
  std::unordered_map<uint64_t, usage_totals> current;
  auto add_usage = [&](uint32_t m, uint64_t id, int64_t used, int64_t over) {
    usage_totals& u = m >= month ? current[id] : im.closed[m][id];
    u.used += used;
    u.overage += over;
  };
  const std::string snap_path = im.usage_dir + "/snapshot.txt";
  bool missing = false;
  auto snap = fs::read_file(snap_path, &missing);
  if (!snap) {
    return unexpected(snap.error());
  }
  std::vector<covered_pos> covered;
  // Empty: nothing but blanks (persist() always writes its header line).
  const bool snap_empty =
      !missing && snap->find_first_not_of(" \t\r\n") == std::string::npos;
  if (!missing) {
    svc->recovery_.snapshot_loaded = true;
    size_t pos = 0;
    int lineno = 0;
    while (pos < snap->size()) {
      size_t nl = snap->find('\n', pos);
      if (nl == std::string::npos) {
        nl = snap->size();
      }
      std::string line = snap->substr(pos, nl - pos);
      pos = nl + 1;
      ++lineno;
      char idbuf[32];
      unsigned long long a = 0, b = 0, c = 0;
      long long u = 0, o = 0;
      unsigned mm = 0;
      if (line.empty() || line.rfind("tollgate-usage", 0) == 0 || line.rfind("month ", 0) == 0) {
        continue;
      }
      if (std::sscanf(line.c_str(), "covered %llu %llu %llu", &a, &b, &c) == 3) {
        if (covered.size() <= a) {
          covered.resize(a + 1);
        }
        covered[a] = {b, c};
        continue;
      }
      if (std::sscanf(line.c_str(), "used %u %31s %lld %lld", &mm, idbuf, &u, &o) == 4) {
        auto id = parse_key_id(idbuf);
        if (id) {
          add_usage(mm, *id, u, o);
          continue;
        }
      }
      return unexpected(fmt::format("{}:{}: malformed usage snapshot line", snap_path, lineno));
    }
  }

  // 2. Journals: replay what the snapshot does not cover; corrupt or torn bytes are skipped.
  std::vector<covered_pos> next(static_cast<size_t>(svc->opt_.cores));
  std::unordered_set<uint64_t> overage_unrecorded;  // keys with current-month TGJ1 records
  for (size_t c = 0; c < covered.size() && c < next.size(); ++c) {
    next[c].gen = covered[c].gen + 1;
  }
  if (DIR* d = ::opendir(im.usage_dir.c_str())) {
    std::vector<std::pair<int, uint64_t>> files;
    while (dirent* e = ::readdir(d)) {
      int core;
      uint64_t gen;
      if (parse_journal_name(e->d_name, core, gen)) {
        files.emplace_back(core, gen);
      }
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
    // Generation 0 is every core's first journal; a later one exists only once a snapshot
    // covered the earlier ones (they were compacted into it). Without that snapshot, usage
    // would silently go back to what the remaining journals hold.
    auto compacted = std::find_if(files.begin(), files.end(),
                                  [](const auto& f) { return f.second > 0; });
    if ((missing || snap_empty) && compacted != files.end()) {
      const std::string what = fmt::format(
          "usage snapshot {} is {} but the usage journals show one was written ({} is "
          "generation {}: earlier journals were compacted into a snapshot)",
          snap_path, missing ? "missing" : "empty",
          journal_name(compacted->first, compacted->second), compacted->second);
      if (!svc->opt_.accept_usage_loss) {
        return unexpected(fmt::format(
            "{}; starting would reset the usage it counted. Restore the snapshot from a backup, "
            "or start with --accept-usage-loss to count only what the remaining journals hold",
            what));
      }
      log_error("{}; --accept-usage-loss: counting only what the remaining journals hold", what);
    }
    for (auto [core, gen] : files) {
      const size_t c = static_cast<size_t>(core);
      if (c >= next.size()) {
        next.resize(c + 1);
      }
      next[c].gen = std::max(next[c].gen, gen + 1);
      uint64_t from = 0;
      if (c < covered.size()) {
        if (gen < covered[c].gen) {
          continue;  // compacted into the snapshot already
        }
        if (gen == covered[c].gen) {
          from = covered[c].offset;
        }
      }
      const std::string path = im.usage_dir + "/" + journal_name(core, gen);
      auto data = fs::read_file(path, &missing);
      if (!data) {
        return unexpected(data.error());
      }
      ++svc->recovery_.journal_files;
      auto st = journal::scan(*data, std::min<size_t>(from, data->size()),
                              [&](const journal::record& r) {
                                add_usage(r.month, r.key_id, r.count, r.overage);
                                if (!r.has_overage && r.month >= month) {
                                  overage_unrecorded.insert(r.key_id);
                                }
                              });
      svc->recovery_.records_replayed += st.records;
      svc->recovery_.units_replayed += st.units;
      svc->recovery_.corrupt_records += st.corrupt;
      svc->recovery_.torn_bytes += st.torn_bytes;
      if (st.corrupt > 0 || st.torn_bytes > 0) {
        log_error("usage journal {}: skipped {} corrupt stretch(es) ({} bytes) and a torn tail of "
                  "{} bytes",
                  path, st.corrupt, st.corrupt_bytes, st.torn_bytes);
      }
    }
  }
  // TGJ1 records (journals from before the overage field) do not say which of their units were
  // overage: for the keys they name, it is recomputed against the plan below.

  // 3. Keys and the first table; restored usage goes into the key states.
  for (const auto& [id, u] : current) {
    std::lock_guard g(im.mu);
    key_state* s = im.state_for_locked(id, 0, month);
    s->used.store(u.used, std::memory_order_relaxed);
    s->overage.store(u.overage, std::memory_order_relaxed);
  }
  if (!svc->reload_if_changed(true) && svc->current_.load() == nullptr) {
    return unexpected(fmt::format("cannot load keys from {}", svc->opt_.data_dir));
  }
  {
    std::lock_guard g(im.mu);
    for (key_state* s : im.by_slot) {
      const int64_t used = s->used.load(std::memory_order_relaxed);
      s->pool.store(make_pool(month, im.cluster ? 0 : s->quota - used), std::memory_order_relaxed);
      if (overage_unrecorded.count(s->key_id) == 0) {
        continue;
      }
      // Units past the quota are overage (stop keys never get there). Exact unless the quota
      // changed since they were admitted, which is why records now carry the figure.
      const int64_t over = std::max<int64_t>(0, used - s->quota);
      if (over > s->overage.load(std::memory_order_relaxed)) {
        s->overage.store(over, std::memory_order_relaxed);
      }
    }
    im.covered = next;
    for (auto& c : im.covered) {
      c.offset = 0;
    }
  }
  if (svc->recovery_.units_replayed > 0 || svc->recovery_.corrupt_records > 0) {
    log_info("usage recovered: {} journal file(s), {} record(s), {} billed call(s) replayed",
             svc->recovery_.journal_files, svc->recovery_.records_replayed,
             svc->recovery_.units_replayed);
  }
  // 4. A fresh snapshot covering everything replayed; older journals are deleted by it.
  svc->persist(now_ns);
  for (int i = 0; i < svc->opt_.cores; ++i) {
    svc->shards_.emplace_back(new core_shard(*svc, i));
  }
  for (auto& s : svc->shards_) {
    s->journal_gen_ = im.covered[static_cast<size_t>(s->index_)].gen;
    if (s->journal_fd_ >= 0) {
      ::close(s->journal_fd_);
      s->journal_fd_ = -1;
    }
    if (const int e = s->open_journal(); e != 0) {
      // A server that cannot record a billed call must not start answering (it would refuse
      // every one of them): refuse the start instead, as for a data dir another process holds.
      return unexpected(fmt::format(
          "cannot open usage journal {}/{}: {} (errno {}); the data dir must be writable",
          im.usage_dir, journal_name(s->index_, s->journal_gen_), std::strerror(e), e));
    }
    s->month_ = month;
    s->month_end_ns_ = month_end_secs(month) * kNsPerSec;
    s->last_reconcile_ns_ = now_ns;
    s->last_fsync_ns_ = now_ns;
  }
  svc->next_reload_ns_.store(now_ns + svc->opt_.reload_ms * kNsPerMs);
  svc->next_persist_ns_.store(now_ns + svc->opt_.reconcile_ms * kNsPerMs);
  return svc;
}

}  // namespace tollgate::quota
