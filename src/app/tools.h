// The MCP tools of design §4 (search_stories, get_story, get_usage), adapters from validated
// MCP arguments to the search backend and the quota figures. Their payloads are written by the
// same renderers as the REST bodies, so the text block equals the REST body byte for byte.
//
// What a tool may use is declared here, and nothing else of the app is reachable from one:
//   1. The endpoint runs a tool with the context the app lent it (mcp::endpoint::lend, the
//      call_context's env); the tool takes its tool_context from it with tool_context::of
//      (checked).
//   2. The tool_context holds the core's search state: the backend and scratch, the search jobs
//      of searches in slices, the answer cache, the fleet client (each set up by the app).
//   3. Through tool_context::caller() the tool reads the request's caller: the key and its
//      figures (get_usage), and notes what the access log records (a partial search). The app's
//      MCP host implements tool_caller (app::core_host, which owns the core's tool_context).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "tollgate/mcp/endpoint.h"
#include "tollgate/mcp/tool.h"
#include "tollgate/search/backend.h"

namespace tollgate::quota {
struct key_record;
struct figures;
}  // namespace tollgate::quota

namespace tollgate::app {

class fleet_client;
class search_cache;

/// The request a tool call belongs to, as the app's MCP host keeps it (core_host). Core-local.
class tool_caller {
 public:
  /// The caller's key; valid during the call.
  virtual const quota::key_record& key() const = 0;
  /// The caller's rate and quota figures as of now (the quota part filled on demand).
  virtual const quota::figures& figures_now() = 0;
  /// A search answered by some shards only: the access log records `answered` of `total`.
  virtual void note_partial(uint32_t answered, uint32_t total) = 0;
  /// Whether a call earlier in this delivery was billed: a later call must then not yield,
  /// since the delivery's answer would be discarded and its re-delivery bill that one again
  /// (the rule a wait for quota units follows too, core_host::admit).
  virtual bool billed_earlier() const = 0;

 protected:
  ~tool_caller() = default;
};

/// What the tools use, one per core: core-local. The app sets it up once per core (the cache,
/// the fleet client, the search slice) and arms it per request (begin_request(), use_jobs());
/// the tools read it during a call.
class tool_context final : public mcp::tool_env {
 public:
  /// `backend` and `caller` outlive the context.
  tool_context(const search::backend& backend, tool_caller& caller);
  /// A context whose corpus is still loading (local stdio's start): set_backend() gives it
  /// one; until then a tool that needs the corpus waits at the gate (set_corpus_gate).
  explicit tool_context(tool_caller& caller);
  ~tool_context();

  /// What a tool that needs the corpus waits on while it loads. wait() returns the backend once
  /// loaded, or null when it is not loaded within the gate's bound (or failed to load).
  class corpus_gate {
   public:
    virtual const search::backend* wait() = 0;

   protected:
    ~corpus_gate() = default;
  };
  void set_corpus_gate(corpus_gate* g) noexcept { gate_ = g; }
  /// The corpus, from now on (`backend` outlives the context).
  void set_backend(const search::backend& backend);
  /// The corpus the tools search, waiting at the gate when it is still loading; null when it
  /// did not load within the gate's bound (the tool answers `corpus_loading`).
  const search::backend* corpus();

  /// The one way a tool reaches its context: the call's env, checked (fatal, TOLLGATE_CHECK)
  /// to be a tool_context.
  static tool_context& of(mcp::call_context& ctx);

  // ---- set up per core by the app ----

  /// The core's search answer cache (null: off).
  void set_search_cache(search_cache* c) noexcept { cache_ = c; }
  /// A gateway with remote shards: the core's fleet client (null otherwise).
  void set_fleet(fleet_client* f) noexcept { fleet_ = f; }
  /// Search calls run as jobs of about `postings` postings of work per slice (0: each search
  /// runs whole, as on stdio and shard nodes).
  void set_search_slice(uint64_t postings) noexcept { slice_ = postings; }

  // ---- searches in slices, armed per request by the app (see core_handler::handle) ----

  /// The search jobs of one request: its n-th search call uses the n-th job, on every delivery.
  using job_group = std::vector<std::unique_ptr<search::search_job>>;
  /// A new request (or a new delivery of a deferred one): its first search call takes job 0.
  void begin_request() noexcept {
    job_next_ = 0;
    yielded_ = false;
    read_ = {};
  }
  /// The jobs of the request being handled (set by the handler before each delivery).
  void use_jobs(job_group* g) noexcept { jobs_ = g; }
  /// Search calls made so far in this delivery.
  size_t jobs_used() const noexcept { return job_next_; }
  /// A search call ran out of its slice (yield()): the request is deferred and delivered again
  /// once advance_jobs() reports every job done; the rest of this delivery answers nothing, but
  /// its later search calls start their jobs (not run), so that one more delivery answers all.
  bool yielded() const noexcept { return yielded_; }
  /// One slice of the first of jobs [0, used) that is not done; true when all of them are.
  bool advance_jobs(size_t used);

  // ---- story reads that must not wait, armed per delivery by the app ----

  /// Whether this delivery's get_story may park for its text's bytes (an engine parks it; not
  /// after a number of rounds, see parking::may_wait_read).
  void set_reads_may_park(bool on) noexcept { reads_may_park_ = on; }
  /// The bytes a get_story that yielded waits for (fd -1: none).
  const search::pending_read& wanted_read() const noexcept { return read_; }

  // ---- what a tool uses ----

  /// Where get_story's text read reports bytes not in memory (search::pending_read), or null
  /// when it must read them here (no engine, a call billed earlier in this delivery, or too
  /// many rounds). After would_block the tool yield()s: the request parks until they are read.
  search::pending_read* read_slot() noexcept {
    return reads_may_park_ && !caller_.billed_earlier() ? &read_ : nullptr;
  }
  /// The corpus; only after corpus() returned it.
  const search::backend& backend() const noexcept { return *backend_; }
  search::scratch& scratch() noexcept { return *scratch_; }
  search_cache* answer_cache() const noexcept { return cache_; }
  fleet_client* fleet() const noexcept { return fleet_; }
  uint64_t search_slice() const noexcept { return slice_; }
  /// The job of the request's next search call (searches in slices only).
  search::search_job& next_job();
  void yield() noexcept { yielded_ = true; }
  tool_caller& caller() noexcept { return caller_; }

 private:
  static constexpr char kind_tag_ = 0;  // its address is tool_context's tool_env::kind()

  const search::backend* backend_ = nullptr;
  corpus_gate* gate_ = nullptr;
  tool_caller& caller_;
  std::unique_ptr<search::scratch> scratch_;
  search_cache* cache_ = nullptr;
  fleet_client* fleet_ = nullptr;
  uint64_t slice_ = 0;
  job_group* jobs_ = nullptr;
  size_t job_next_ = 0;
  bool yielded_ = false;
  bool reads_may_park_ = false;
  search::pending_read read_;
};

/// Registers the three tools. They run against the tool_context lent to the endpoint
/// (mcp::endpoint::lend); an endpoint lent none cannot run them (fatal).
void register_tools(mcp::registry& reg);

/// A gateway's look-ahead (fleet_client step 1): the remote searches and story look-ups of the
/// tool calls the endpoint decided for a request (mcp::endpoint::decide_calls), recorded in
/// `fleet` as the tools would ask for them. Core-local.
class fleet_calls final : public mcp::call_visitor {
 public:
  explicit fleet_calls(fleet_client& fleet) : fleet_(fleet) {}
  void on_call(const mcp::decided_call& call) override;

 private:
  fleet_client& fleet_;
};

}  // namespace tollgate::app
