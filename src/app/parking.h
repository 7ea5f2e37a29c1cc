// parking: the one place a core's requests wait without holding the core (design §1, "One
// gate"). A request parks when its surface says what it waits for (gate_verdict::wait) or when
// work it needs is done off the core; the engine delivers it again, and its
// next delivery goes on where it stopped:
//   1. a search that outlasted its slice: resumed at once, one slice each pass (its search jobs
//      wait with it; the rate was charged on its first delivery, and its figures are carried);
//   2. cluster mode, a billed call whose node holds no units of its key: delivered again when
//      the agent wakes the core (the lease attempt is over) or at its bound (lease_deadline, set
//      once), then admitted again; past the bound the outage rules answer it;
//   3. work off the core (offcore.h: an OAuth client's metadata document, the OAuth store's or
//      the public webhook's writes): delivered again when the fetcher or the worker wakes the
//      core, or at a bound;
//   4. a get_story whose text is not in the page cache: the core's ring reads the bytes
//      (engine_io::read_ahead) and the request is delivered again when the read completes; its
//      text is then read without waiting. Each round reads further; after max_read_rounds
//      (bytes evicted again at once, a failed read) the next delivery reads them on the core,
//      which waits, so that a request never parks for ever and a read error is answered.
// The core serves its other connections meanwhile.
//
// Core-local: one parking per core_handler.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tollgate/http/handler.h"
#include "tollgate/quota/service.h"
#include "tools.h"

namespace tollgate::cluster {
class agent;
}

namespace tollgate::app {

class fleet_client;

class parking {
 public:
  /// Answered parked requests' job groups kept for reuse (at most max_spare_job_groups).
  static constexpr size_t max_spare_job_groups = 16;
  /// Read-aheads one request may wait for before its text is read on the core.
  static constexpr uint8_t max_read_rounds = 4;

  /// One request's wait for its story's bytes (item 4 above), as kept by parking and by the
  /// shard node's handler (its story reads wait the same way).
  struct read_wait {
    uint32_t tag = 0;    ///< the read-ahead it waits for (0: none)
    uint8_t rounds = 0;  ///< read-aheads waited for
    /// Whether its next read may park again (else it reads on the core, which waits).
    bool may_park() const noexcept { return rounds < max_read_rounds; }
    /// Asks `io` for `r`'s bytes under the tag after `last_tag` (advanced) for the deferred
    /// request `token`. An engine without reads: `token` is resumed now, its next read is on
    /// the core.
    void start(http::engine_io& io, http::deferral_token token, const search::pending_read& r,
               uint32_t& last_tag);
    /// Its read-ahead ended (`res`: bytes or -errno): a failed one makes the next read one on
    /// the core, which answers what it finds (an unreadable story: unavailable, logged).
    void ended(int64_t res) noexcept;
  };

  /// `cluster` null: no lease waits. `tools`: the core's tool context, whose search jobs are
  /// the light ones unless a parked request is being delivered.
  parking(const cluster::agent* cluster, tool_context& tools);
  void attach(http::engine_io& io) { io_ = &io; }

  /// A parked request being delivered again: its figures and first delivery's time.
  struct carried {
    const quota::figures* fig = nullptr;  ///< null: not a parked request
    int64_t received_ns = 0;
  };

  /// Start of a delivery: finds the parked request it is, if any, and lends its search jobs to
  /// the tools. False: its searches are still going on (it is parked again for the next pass's
  /// slice, and this delivery answers nothing).
  bool begin();
  carried resuming() const noexcept;
  bool resuming_any() const noexcept { return resuming_ != nullptr; }
  /// Whether a billed call of this delivery may still wait for quota units (cluster mode).
  bool may_wait_lease() const;
  /// Whether this delivery's story read may park for its bytes (an engine, and fewer than
  /// max_read_rounds read-aheads waited for by this request).
  bool may_wait_read() const noexcept;
  /// Parks the request being delivered (`for_lease`: waiting for units, else for its next
  /// slice), with the figures it was charged; `fleet`'s remote answers wait with it.
  http::response_info park(const quota::figures& fig, bool for_lease, size_t used,
                           int64_t received_ns, fleet_client* fleet);
  /// Parks the request being delivered until the core's ring has read `r`'s bytes into the
  /// page cache (on_read_ahead), as park() does (its figures, its search jobs).
  http::response_info park_read(const quota::figures& fig, size_t used, int64_t received_ns,
                                fleet_client* fleet, const search::pending_read& r);
  /// A read-ahead ended (`res`: bytes read or -errno): its request is delivered again.
  void on_read_ahead(uint32_t tag, int64_t res);
  /// A request waiting for work off the core (an OAuth client's metadata document, the OAuth
  /// store's or the public webhook's writes: offcore.h), delivered again by on_wake() or at
  /// `bound_ns` (CLOCK_MONOTONIC).
  http::response_info park_offcore(int64_t bound_ns);
  /// End of a delivery: an answered parked request frees its jobs; the light jobs are lent
  /// again.
  void end(bool deferred);

  /// The core was woken: requests waiting for a document or for units are delivered again.
  void on_wake();
  /// A parked request whose connection closed is never delivered again: its jobs are freed.
  void on_tick();

  size_t spare_job_groups() const noexcept { return spare_.size(); }

 private:
  struct parked {
    http::deferral_token token;
    tool_context::job_group jobs;
    size_t used = 0;  // its search calls (jobs [0, used))
    quota::figures fig;
    int64_t lease_deadline = 0;  // CLOCK_MONOTONIC bound of its wait for units (0: never waited)
    bool lease_wait = false;     // parked for units now (delivered again by on_wake)
    int64_t received_ns = 0;     // its first delivery's time (a later cancellation reaches it)
    read_wait read;              // its wait for a story's bytes
  };
  parked* find_parked();
  // The parked entry of the request being delivered: the one resuming, or a new one taking the
  // light jobs with it.
  parked& hold(const quota::figures& fig, size_t used, int64_t received_ns, fleet_client* fleet);
  // Frees entry `i` (index-stable erase: swapped with the last). Outside a delivery only.
  void drop(size_t i);
  void keep_spare(tool_context::job_group&& jobs);

  const cluster::agent* cluster_;
  tool_context& tools_;
  http::engine_io* io_ = nullptr;
  tool_context::job_group light_jobs_;  // the jobs of requests not parked (yet)
  std::vector<parked> parked_;          // requests whose searches are going on
  // Job groups of answered parked requests, kept for the next ones (their workspaces have grown
  // to a search's needs: bitsets, heaps, kept phrase docs): at most max_spare_job_groups.
  std::vector<tool_context::job_group> spare_;
  parked* resuming_ = nullptr;                       // the parked request being delivered, if any
  std::vector<http::deferral_token> offcore_waits_;  // requests waiting for work off the core
  uint32_t last_read_tag_ = 0;
};

}  // namespace tollgate::app
