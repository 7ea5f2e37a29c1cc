// search::backend: the story-search service behind search_stories and get_story, for MCP and
// REST alike. It fans a query out over its shards, merges their answers deterministically and
// renders the payload through json_out, so the MCP text block (nested) and the REST body (raw)
// are the same bytes once unescaped.
//
// Slots: 0..L-1 are in-process shards (shard_source), L..L+R-1 remote shard nodes (the fleet,
// fleet.h). The backend never does I/O: a remote slot's answer arrives in a remote_query that
// the caller filled beforehand; without one, remote slots count as not answered.
//
// Typical use (one scratch per core, created at start-up):
//   auto b = search::load_sample(4);                 // or load_jsonl_file(...)
//   auto s = b->make_scratch();
//   auto r = b->search_stories(args, *s, out, /*nested=*/true);  // r.error(): errc
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/result.h"
#include "tollgate/search/query.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

class backend;
class remote_query;
struct fleet_scratch;  // the shard node's request parsing state (src/search/fleet_impl.h)

/// Per-core state for queries: plan storage, per-shard answers, merge buffers, the in-process
/// shards' workspace. Core-local. Reaches its working size after a few queries; from then on a
/// query allocates nothing.
class scratch {
 public:
  /// `shard_count` slots, the first `local_count` of them in-process (all by default).
  explicit scratch(size_t shard_count, size_t local_count = SIZE_MAX);
  ~scratch();
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

 private:
  friend class backend;
  friend int serve_fleet_request(const backend& b, scratch& s, std::string_view method,
                                 std::string_view path, std::string_view body, out_buffer& out,
                                 pending_read* nowait);
  out_buffer token_chars_;
  std::vector<std::string_view> terms_;
  std::vector<double> idf_;
  std::vector<uint64_t> df_;
  std::vector<phrase_span> phrases_;
  std::vector<uint32_t> phrase_terms_;
  std::vector<double> phrase_idf_;
  std::vector<uint8_t> alone_;
  std::vector<shard_answer> answers_;
  std::vector<uint8_t> answered_;
  std::vector<uint32_t> heads_;
  std::vector<hit> merged_;
  std::vector<std::span<const hit>> lists_;  // per slot: its answer's hits, best first
  std::unique_ptr<shard_workspace> ws_;
  std::unique_ptr<fleet_scratch> fleet_;  // created by the first fleet request served
};

/// A search outcome; views valid until the next search with the same scratch.
struct search_result {
  uint64_t total = 0;
  std::span<const hit> stories;          ///< the page: [offset, offset + limit) of the ranking
  uint32_t answered = 0;                 ///< shards that answered (local and remote slots)
  uint32_t shards = 0;                   ///< shards asked (local and remote slots)
  const remote_query* remote = nullptr;  ///< holds the remote hits' stories (may be null)
  bool partial() const noexcept { return answered < shards; }
};

/// A search evaluated in bounded slices, so that a long one (a phrase of common words, a deep
/// offset, a date sort over a huge match set) never holds its core: backend::start() copies the
/// arguments and plans, each backend::run() does about `budget` postings of work and returns
/// whether the answer is complete. The answer is exactly backend::search()'s. In-process
/// shards only (no remote slots). Owns its own scratch, so other searches of the core run in
/// between. Core-local.
class search_job {
 public:
  explicit search_job(const backend& b);
  ~search_job();
  search_job(const search_job&) = delete;
  search_job& operator=(const search_job&) = delete;

  /// Whether this job was started with exactly these arguments.
  bool matches(const query_args& a) const noexcept;
  bool started() const noexcept { return phase_ != phase::idle; }
  bool done() const noexcept { return phase_ == phase::done; }
  /// Once done(): the outcome; its views stay valid until the job is started again.
  const result<search_result, errc>& outcome() const noexcept { return result_; }
  /// The work its runs have spent since start(), in budget units (postings visited): the same
  /// whether the job ran in one slice or in many, give or take a unit per slice, since each
  /// slice resumes where the last one stopped (nothing is evaluated twice). A run with an
  /// unbounded budget (UINT64_MAX) counts nothing.
  uint64_t work() const noexcept { return work_; }

 private:
  friend class backend;
  enum class phase : uint8_t { idle, doc_freqs, evaluate, done };
  std::unique_ptr<scratch> s_;
  std::string chars_;  // the arguments' query and tags (args_ views into it)
  query_args args_;
  query_plan plan_{};
  query_plan df_plan_{};
  bool phrase_df_ = false;
  phase phase_ = phase::idle;
  uint32_t shard_ = 0;  // the shard being worked on
  bool first_ = true;   // its slice has not begun yet
  uint64_t work_ = 0;
  result<search_result, errc> result_ = unexpected(errc::unavailable);
};

/// Identifies a story for rendering: slot and shard-local handle (for a remote slot L + r, the
/// story is the one remote r sent in the remote_query).
struct story_ref {
  uint32_t shard;
  uint32_t doc;
};

/// Thread-safe: read-only after construction; each core uses its own scratch (and its own
/// remote_query objects).
class backend {
 public:
  /// Takes the in-process shards in slot order (slot i holds the ids with shard_of(id, L) == i)
  /// and finalizes them with their summed statistics (shards from build_shards() come
  /// finalized with those: nothing left to do); `remote_slots` remote shard nodes follow them
  /// as slots L..L+R-1 (remote r = slot L + r).
  explicit backend(std::vector<std::unique_ptr<shard_source>> local, uint32_t remote_slots = 0);
  ~backend();

  /// All slots: local + remote.
  size_t shard_count() const noexcept { return shards_.size() + remote_; }
  size_t local_count() const noexcept { return shards_.size(); }
  /// In-process shard `i` (< local_count()), finalized (the persisted index saves it).
  const shard_source& local_shard(size_t i) const noexcept { return *shards_[i]; }
  size_t remote_count() const noexcept { return remote_; }
  /// Stories in the in-process shards.
  uint64_t story_count() const noexcept { return global_.docs; }
  /// The in-process shards' summed statistics.
  shard_stats local_stats() const noexcept { return global_; }
  std::unique_ptr<scratch> make_scratch() const;

  /// Runs a search. Precondition: validate(args) passed. unavailable when no slot answered.
  /// `remote`: the fan-out done for exactly these args (remote_query::start_search, both
  /// phases); its idf (local + answered remote document frequencies) ranks the local shards
  /// too, and the remotes that answered phase 2 join the merge. Null (or a remote_query started
  /// for other args): every remote slot counts as not answered. The result's views (and its
  /// remote hits) stay valid until the next search with `s` and while `remote` is not reused.
  result<search_result, errc> search(const query_args& args, scratch& s,
                                     const remote_query* remote = nullptr) const;
  /// Writes {"total":N,"stories":[...]} (plus "partial" and "shards" when partial).
  void render(const search_result& r, json_out& out) const;
  /// Looks a story up by id: the local shards first; then, with remote slots, the answers of
  /// `remote` (started for this id): found there, not_found when every remote answered 404
  /// (and no local shard failed), else unavailable.
  result<story_ref, errc> find_story(std::string_view id,
                                     const remote_query* remote = nullptr) const;
  /// Writes the get_story payload: the story with its text (for a remote slot, the story JSON
  /// as received from `remote`, which must be the one passed to find_story). errc::unreadable,
  /// with nothing written, when a local story's stored text cannot be read. `nowait`: the text's
  /// reads do not wait for the disk (shard_source::render_story; errc::would_block).
  result<void, errc> render_story(story_ref ref, json_out& out,
                                  const remote_query* remote = nullptr,
                                  pending_read* nowait = nullptr) const;

  /// Starts `job` on `args` (precondition: validate(args) passed); nothing is evaluated yet.
  void start(const query_args& args, search_job& job) const;
  /// Advances a started job by about `budget` postings of work (at least one step); true when
  /// it is done (see search_job::outcome()).
  bool run(search_job& job, uint64_t budget) const;

  /// search() + render() into `out` (nothing written on error).
  result<void, errc> search_stories(const query_args& args, scratch& s, out_buffer& out,
                                    bool nested, const remote_query* remote = nullptr) const;
  /// find_story() + render_story() into `out` (nothing written on error).
  result<void, errc> get_story(std::string_view id, out_buffer& out, bool nested,
                               const remote_query* remote = nullptr,
                               pending_read* nowait = nullptr) const;

  // ---- pieces for the fleet (shard_node.cc, remote_query.cc) ----

  /// Adds the in-process shards' document frequencies of each plan term into df[i], then of
  /// each plan phrase into df[terms + p]; answered[i] (when given, one per local shard) says
  /// which shards answered. False if one did not.
  bool add_local_doc_freqs(const query_plan& plan, scratch& s, uint64_t* df,
                           uint8_t* answered = nullptr) const;
  /// Shard node, phase 2: searches the in-process shards with a given plan (terms, idf,
  /// phrases, filters, k from the gateway) and merges their best plan.k hits (stories = all of
  /// them; no offset). unavailable when no local shard answered.
  result<search_result, errc> search_plan(const query_plan& plan, scratch& s) const;
  /// Writes a hit's story as in search results (no text).
  void render_hit(const hit& h, json_out& out, const remote_query* remote = nullptr) const;

 private:
  // Fans `plan` out over the local shards whose s.answered_ flag is set and the remotes that
  // answered phase 2 of `remote`, then merges the best plan.k; the page starts at `offset`.
  result<search_result, errc> fan_out(const query_plan& plan, uint32_t offset, scratch& s,
                                      const remote_query* remote) const;
  // The rest of fan_out once the local answers are in s.answers_ (r: their count and total):
  // the remotes' lists, then the merge.
  result<search_result, errc> merge(const query_plan& plan, uint32_t offset, scratch& s,
                                    const remote_query* remote, search_result r) const;
  // run()'s phases from where the job stands; true when it is done.
  bool run_phases(search_job& job, uint64_t& budget) const;
  // One phase of a job; true when the phase is complete.
  bool run_doc_freqs(search_job& job, uint64_t& budget) const;
  bool run_evaluate(search_job& job, uint64_t& budget) const;

  std::vector<std::unique_ptr<shard_source>> shards_;
  uint32_t remote_ = 0;
  shard_stats global_;
};

// ---- loading ----

struct load_options {
  uint32_t shards = 4;         ///< shard slots (>= 1)
  bool skip_bad_lines = true;  ///< false: the first bad line fails the load
  uint32_t threads = 0;        ///< index build threads; 0 = hardware concurrency
  uint32_t max_issues = 20;    ///< bad lines kept in the report (all are counted)
  uint32_t remote_slots = 0;   ///< a gateway's remote shard nodes, after the loaded shards
  /// Progress (optional; advanced by the parsing threads about every MiB): stories parsed and
  /// bytes of the text parsed.
  std::atomic<uint64_t>* stories_parsed = nullptr;
  std::atomic<uint64_t>* bytes_parsed = nullptr;
  /// Progress of the work after the parse (optional): each story adds build_steps_total steps
  /// by the time the build is done (see build_steps_indexed and build_share()).
  std::atomic<uint64_t>* build_steps = nullptr;
};

/// The steps a story adds to load_options::build_steps, per stage of the build after its
/// parse, in proportion to the stage's share of the build's time (1M stories, one core):
/// its tokens recorded (tokenizing, the records, the pair table), its shard sealed (postings
/// laid out, text compressed), ranked (finalize: impacts, block maxima) and written to an index
/// file.
inline constexpr uint64_t build_steps_indexed = 9;
inline constexpr uint64_t build_steps_sealed = 7;
inline constexpr uint64_t build_steps_ranked = 3;
inline constexpr uint64_t build_steps_written = 1;
inline constexpr uint64_t build_steps_total =
    build_steps_indexed + build_steps_sealed + build_steps_ranked + build_steps_written;

/// The share (0-1) of a build of a corpus of `whole` bytes done, from load_options' counters:
/// the parse (a tenth) by bytes, the rest by build steps over the stories parsed. < 0 when the
/// size is unknown.
double build_share(const load_options& opts, uint64_t whole) noexcept;

/// A bad line (line numbers start at 1; 0 = the file itself).
struct load_issue {
  uint64_t line = 0;
  std::string reason;
};

struct load_report {
  uint64_t loaded = 0;
  uint64_t skipped = 0;
  std::vector<load_issue> issues;  ///< the first max_issues bad lines
};

/// Builds in-process shards from JSON Lines text (one story object per line; blank lines are
/// ignored), finalized with their summed statistics (as a backend of just them would). Fails with
/// the first bad line when !skip_bad_lines, or with line 0 on I/O errors.
result<std::vector<std::unique_ptr<shard_source>>, load_issue> build_shards(
    std::string_view jsonl, const load_options& opts, load_report& report);
/// build_shards() + backend.
result<std::unique_ptr<backend>, load_issue> load_jsonl(std::string_view jsonl,
                                                        const load_options& opts,
                                                        load_report& report);
result<std::unique_ptr<backend>, load_issue> load_jsonl_file(const std::string& path,
                                                             const load_options& opts,
                                                             load_report& report);

inline constexpr uint64_t sample_count = 10000;
inline constexpr uint64_t sample_seed = 20260501;
/// The embedded --sample corpus: sample_count stories generated with sample_seed.
std::unique_ptr<backend> load_sample(uint32_t shards, uint32_t remote_slots = 0);

}  // namespace tollgate::search
