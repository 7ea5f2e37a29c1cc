// The fleet: remote shards. A gateway's backend has its in-process shards (slots 0..L-1) and
// R remote shard nodes (slots L..L+R-1): other tollgate processes started with --role shard,
// reached over HTTP/1.1. This header holds what is protocol and search logic, free of sockets:
// the wire format and the shard node's answers, the gateway's per-query fan-out state
// (remote_query), and the down-marking shared by a gateway's cores (remote_health). The app
// moves the bytes with the engine's outbound client (http::engine_io::fetch).
//
// Wire protocol (JSON bodies; never billed; every request carries the fleet secret header):
//   POST /fleet/v1/df      {"terms":["t",...]}  (+ "phrases", "phrase_terms" as below when the
//                          phrases' own frequencies weigh in the ranking)
//     -> 200 {"docs":N,"title_tokens":T,"text_tokens":X,"df":[n,...]}
//        (df in terms order, then one per phrase when phrases were sent)
//   POST /fleet/v1/search  {"terms":[...],"idf":[...],"phrases":[[first,count],...],
//                           "phrase_terms":[i,...],"phrase_idf":[...],"avgdl":A,"tags":[...],
//                           "since":S,"until":U,"sort":"relevance"|"date","k":K}
//                          (phrase_idf and avgdl optional: weight 1 / the node's own average)
//     -> 200 {"total":N,"hits":[{"key":K,"id":"...","story":{...}},...]}   (best first, <= K)
//   GET  /fleet/v1/stories/{id}  -> 200 the story object with text | 404 {"code":"not_found"}
// Doubles travel with 17 significant digits, so scores merge exactly as computed.
//
// Ranking across nodes is exactly a single node's over the union corpus (query_plan's bm25):
// for a relevance query the gateway first asks every remote for its document frequencies (of
// the terms, and of the phrases when they weigh) and corpus figures, phase 1, then sends the
// global idf and the global average story length with the query, phase 2. A sort=date query
// needs neither and takes one round trip.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/query.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

namespace fleet_wire {
inline constexpr std::string_view df_path = "/fleet/v1/df";
inline constexpr std::string_view search_path = "/fleet/v1/search";
inline constexpr std::string_view story_prefix = "/fleet/v1/stories/";
/// Lower-case, as http::request::header_value() looks names up.
inline constexpr std::string_view secret_header = "x-tollgate-fleet-secret";
/// Appends story_prefix + the id percent-encoded (every byte but A-Z a-z 0-9 - . _ ~): the
/// request-target of a story request (the node's HTTP side decodes it before
/// serve_fleet_request()).
void write_story_path(std::string_view id, out_buffer& out);
}  // namespace fleet_wire

/// Shard node side: answers one fleet request (method, path without query, body) against the
/// node's backend. The path comes decoded: for a story, story_prefix + the id as it is (the
/// caller resolved the percent-escapes of write_story_path()). Writes a JSON body to `out` and returns the HTTP status: 200; 400 with
/// {"code":"invalid_request","message":...} for a malformed body; 404 {"code":"not_found"} for
/// an unknown story, path or method; 503 {"code":"unavailable",...} when no local shard could
/// answer. `body` must be followed by 64 readable bytes (simdjson padding). Authentication (the
/// secret header) is the caller's. Allocation-free in the steady state (the scratch keeps its
/// capacity), except for 400 answers.
int serve_fleet_request(const backend& b, scratch& s, std::string_view method,
                        std::string_view path, std::string_view body, out_buffer& out);

/// Gateway side: one query's fan-out over the remote shards, and once done, the remote part of
/// its result. Shard-local (one core); reusable (start_* resets it, keeping capacity).
///
/// Search: start_search() -> write_df_body() to every remote asked -> on_df() for each (or
/// on_df(r, 0, {}) when it failed) -> finish_df() -> write_search_body() to each remote with
/// df_ok(r) -> on_search() for each -> backend::search(args, scratch, this).
/// Story: start_story() -> GET fleet_wire::write_story_path(id) on every remote -> on_story()
/// for each -> backend::find_story(id, this) / get_story(id, out, nested, this).
/// A remote never reported (no on_* call) simply counts as not answered; calling on_df(r, 0,
/// {}) for it is optional. finish_df() must come after the last on_df() (later ones are
/// ignored) and before write_search_body()/on_search(). Every on_* returns true when the answer
/// was taken, false when it was not usable (bad status, malformed or inconsistent body, wrong
/// phase or remote index, or a second answer from the same remote); a false answer leaves the
/// remote unanswered, so the caller can feed remote_health with it. Bodies given to on_* must be
/// followed by 64 readable bytes (simdjson padding); what is kept is copied, so the body buffer
/// can be reused at once. Results from backend::search() point into this object: do not restart
/// it before they are rendered.
class remote_query {
 public:
  explicit remote_query(uint32_t remotes);
  ~remote_query();
  remote_query(const remote_query&) = delete;
  remote_query& operator=(const remote_query&) = delete;

  uint32_t remotes() const noexcept { return remotes_; }

  /// Copies `args` (validated) and plans the query with the gateway's local shards' document
  /// frequencies and story count; every remote starts as not answered.
  void start_search(const backend& b, const query_args& args);
  void start_story(std::string_view id);
  bool is_story() const noexcept { return story_; }
  /// The copy of the arguments (views into this object).
  const query_args& args() const noexcept { return args_; }
  std::string_view story_id() const noexcept { return story_id_; }

  /// Phase 1 request body (the same for every remote).
  void write_df_body(out_buffer& out) const;
  /// A phase 1 answer: status 200 and a well-formed body counts; anything else (status 0 for a
  /// transport failure) leaves remote `r` unanswered. False when the answer was not usable.
  bool on_df(uint32_t r, int status, std::string_view body);
  /// Ends phase 1: global idf and average length from the local and the answered remote
  /// frequencies and corpus figures.
  void finish_df();
  /// False when the ranking depends on no corpus figure: sort=date. (Even a one-term relevance
  /// query needs phase 1: the order of its matches depends on the average story length.) Then
  /// skip_df() replaces phase 1 (one round trip instead of two) and every remote may be asked
  /// in phase 2.
  bool needs_df() const noexcept;
  /// Ends phase 1 without asking anyone: idf 1 for every term (see needs_df()).
  void skip_df();
  bool df_ok(uint32_t r) const noexcept;
  /// Phase 2 request body (the same for every remote asked).
  void write_search_body(out_buffer& out) const;
  /// A phase 2 answer (hits are copied into this object). False when not usable.
  bool on_search(uint32_t r, int status, std::string_view body);
  /// A story answer: 200 (found; the story is copied), 404 (not there), anything else: failed.
  bool on_story(uint32_t r, int status, std::string_view body);

  /// The planned terms (distinct, in query order) and, after finish_df(), their global weights
  /// (idf, 0 for a term only inside phrases), the phrases' idf (empty when they need none) and
  /// the fleet's average story length (0 after skip_df: each node ranks with its own).
  std::span<const std::string_view> terms() const noexcept;
  std::span<const double> idf() const noexcept;
  std::span<const double> phrase_idf() const noexcept;
  double avgdl() const noexcept;

  /// Whether this object was started for exactly these arguments / this id.
  bool matches(const query_args& args) const noexcept;
  bool matches_story(std::string_view id) const noexcept;

 private:
  friend class backend;
  struct answer;
  uint32_t remotes_;
  bool story_ = false;
  query_args args_;
  std::string story_id_;
  std::string arg_chars_;  // owns the strings args_ views
  // plan, idf and per-remote answers (hits, stories' JSON): defined in fleet.cc
  struct state;
  std::unique_ptr<state> st_;
};

/// Down-marking of the remote shards, shared by all cores of a gateway. Thread-safe
/// (lock-free). A remote that failed `failures_to_down` queries in a row is down for
/// `down_ns`; then one query at a time probes it (should_ask() lets one caller through per
/// down period) until a success brings it back.
class remote_health {
 public:
  explicit remote_health(uint32_t remotes, uint32_t failures_to_down = 3,
                         int64_t down_ns = 2'000'000'000);
  /// Whether a query should ask remote `r` now (monotonic clock). While down: false, except
  /// once the down period is over, when exactly one caller gets true (the probe; the period is
  /// renewed at the same time). Report its outcome with success() or failure().
  bool should_ask(uint32_t r, int64_t now_ns) noexcept;
  void success(uint32_t r) noexcept;
  void failure(uint32_t r, int64_t now_ns) noexcept;
  /// Marked down and inside the down period (should_ask() would refuse everyone).
  bool is_down(uint32_t r, int64_t now_ns) const noexcept;
  uint32_t remotes() const noexcept { return static_cast<uint32_t>(n_); }

 private:
  struct slot {
    std::atomic<uint32_t> failures{0};
    std::atomic<int64_t> down_until{0};  // 0: up
  };
  size_t n_;
  std::unique_ptr<slot[]> slots_;
  uint32_t failures_to_down_;
  int64_t down_ns_;
};

}  // namespace tollgate::search
