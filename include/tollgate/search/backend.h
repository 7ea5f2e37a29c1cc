// search::backend: the story-search service behind search_stories and get_story, for MCP and
// REST alike. It fans a query out over its shards (in-process now, remote later), merges their
// answers deterministically and renders the payload through json_out, so the MCP text block
// (nested) and the REST body (raw) are the same bytes once unescaped.
//
// Typical use (one scratch per core, created at start-up):
//   auto b = search::load_sample(4);                 // or load_jsonl_file(...)
//   auto s = b->make_scratch();
//   auto r = b->search_stories(args, *s, out, /*nested=*/true);  // r.error(): errc
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/common/result.h"
#include "tollgate/search/query.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

/// Per-core state for queries: plan storage, per-shard answers, merge buffers, the in-process
/// shards' workspace. Shard-local. Reaches its working size after a few queries; from then on a
/// query allocates nothing.
class scratch {
 public:
  explicit scratch(size_t shard_count);
  ~scratch();
  scratch(const scratch&) = delete;
  scratch& operator=(const scratch&) = delete;

 private:
  friend class backend;
  out_buffer token_chars_;
  std::vector<std::string_view> terms_;
  std::vector<double> idf_;
  std::vector<uint64_t> df_;
  std::vector<phrase_span> phrases_;
  std::vector<uint32_t> phrase_terms_;
  std::vector<shard_answer> answers_;
  std::vector<uint8_t> answered_;
  std::vector<uint32_t> heads_;
  std::vector<hit> merged_;
  std::unique_ptr<shard_workspace> ws_;
};

/// A search outcome; views valid until the next search with the same scratch.
struct search_result {
  uint64_t total = 0;
  std::span<const hit> stories;  ///< the page: [offset, offset + limit) of the ranking
  uint32_t answered = 0;         ///< shards that answered
  uint32_t shards = 0;           ///< shards asked
  bool partial() const noexcept { return answered < shards; }
};

/// Identifies a story for rendering.
struct story_ref {
  uint32_t shard;
  uint32_t doc;
};

/// Thread-safe: read-only after construction; each core uses its own scratch.
class backend {
 public:
  /// Takes the shards in slot order (slot i holds the ids with shard_of(id, n) == i) and
  /// finalizes them with the corpus-wide statistics.
  explicit backend(std::vector<std::unique_ptr<shard_source>> shards);
  ~backend();

  size_t shard_count() const noexcept { return shards_.size(); }
  uint64_t story_count() const noexcept { return global_.docs; }
  std::unique_ptr<scratch> make_scratch() const;

  /// Runs a search. Precondition: validate(args) passed. unavailable when no shard answered.
  result<search_result, errc> search(const query_args& args, scratch& s) const;
  /// Writes {"total":N,"stories":[...]} (plus "partial" and "shards" when partial).
  void render(const search_result& r, json_out& out) const;
  /// Looks a story up by id: not_found, or unavailable when its shard did not answer.
  result<story_ref, errc> find_story(std::string_view id) const;
  /// Writes the get_story payload: the story with its text.
  void render_story(story_ref ref, json_out& out) const;

  /// search() + render() into `out` (nothing written on error).
  result<void, errc> search_stories(const query_args& args, scratch& s, out_buffer& out,
                                    bool nested) const;
  /// find_story() + render_story() into `out` (nothing written on error).
  result<void, errc> get_story(std::string_view id, out_buffer& out, bool nested) const;

 private:
  std::vector<std::unique_ptr<shard_source>> shards_;
  shard_stats global_;
};

// ---- loading ----

struct load_options {
  uint32_t shards = 4;          ///< shard slots (>= 1)
  bool skip_bad_lines = true;   ///< false: the first bad line fails the load
  uint32_t threads = 0;         ///< index build threads; 0 = hardware concurrency
  uint32_t max_issues = 20;     ///< bad lines kept in the report (all are counted)
};

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
/// ignored). Fails with the first bad line when !skip_bad_lines, or with line 0 on I/O errors.
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
std::unique_ptr<backend> load_sample(uint32_t shards);

}  // namespace tollgate::search
