// remote_query: the gateway side of one query's fan-out over the shard nodes. app/fleet_client
// sends the bodies written here and feeds back the answers; backend::search() then merges the
// remote hits with the local ones. The wire format is fleet_wire.h's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/fleet_wire.h"
#include "tollgate/search/query.h"

namespace tollgate::search {

/// Gateway side: one query's fan-out over the shard nodes, and once done, the remote part of
/// its result. Core-local (one core); reusable (start_* resets it, keeping capacity).
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

  /// Copies `args` (validated) and plans the query with the document frequencies and story
  /// count of the gateway's in-process slices; every remote starts as not answered.
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
  struct remote_reply;
  uint32_t remotes_;
  bool story_ = false;
  query_args args_;
  std::string story_id_;
  std::string arg_chars_;  // owns the strings args_ views
  // plan, idf and per-remote answers (hits, stories' JSON): defined in fleet_impl.h
  struct state;
  std::unique_ptr<state> st_;
};

}  // namespace tollgate::search
