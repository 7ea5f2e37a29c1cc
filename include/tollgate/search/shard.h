// shard_source: one slice of the corpus as the backend sees it. The embedded default is an
// in-process shard (src/search/local_shard.h); a remote shard (another tollgate node over HTTP)
// implements the same interface. A shard either answers a query or reports that it could not,
// and the backend turns those into partial results or the `unavailable` error.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tollgate/common/json_out.h"
#include "tollgate/common/result.h"
#include "tollgate/search/query.h"

namespace tollgate::search {

/// Errors of the search tools (design §2).
enum class errc : uint8_t {
  not_found,    ///< no story has this id (tool error not_found / REST 404)
  unavailable,  ///< no shard answered (tool error unavailable / REST 503 + Retry-After)
  unreadable,   ///< the story's stored text cannot be read: a damaged index (tool error
                ///< unavailable with its own message / REST 503)
  would_block,  ///< only for a read that must not wait (a pending_read given): the story's
                ///< text is not in memory yet; the pending_read says which bytes it needs
};
/// A full sentence for the error's "message" field.
std::string_view message(errc e) noexcept;
/// The error code string ("not_found", "unavailable"; unreadable is written "unavailable").
std::string_view code(errc e) noexcept;

/// A story's text read by a core, which must not wait for the disk: a read the page cache
/// cannot answer at once stops (errc::would_block) and says here which bytes it needs. The
/// caller brings them into the page cache without waiting (the core's ring reads them), then
/// asks again; each round gets further, since the bytes already read are not asked for again.
struct pending_read {
  int fd = -1;  ///< -1: nothing pending
  uint64_t at = 0;
  uint64_t len = 0;
};

/// Corpus statistics a shard contributes to the global BM25 figures.
struct shard_stats {
  uint64_t docs = 0;
  uint64_t title_tokens = 0;
  uint64_t text_tokens = 0;
  /// Adds another shard's (or fleet member's) figures: the global figures are their sum.
  shard_stats& operator+=(const shard_stats& o) noexcept {
    docs += o.docs;
    title_tokens += o.title_tokens;
    text_tokens += o.text_tokens;
    return *this;
  }
};

/// The average story length in tokens (title + text) BM25 normalises by; 1 for an empty corpus.
inline double average_length(const shard_stats& s) noexcept {
  const uint64_t tokens = s.title_tokens + s.text_tokens;
  return s.docs > 0 && tokens > 0 ? static_cast<double>(tokens) / static_cast<double>(s.docs) : 1.0;
}

/// One phrase: `count` consecutive entries of query_plan::phrase_terms starting at `first`.
struct phrase_span {
  uint32_t first;
  uint32_t count;
};

/// A parsed query as every shard receives it. Views point into the caller's scratch.
///
/// Relevance is SQLite FTS5's bm25() with column weights title 3, text 1: the query's units
/// are its terms that stand on their own and its phrases; a unit's frequency in a story is
/// F = 3 * (occurrences in the title) + (occurrences in the text), and
///   score = sum over units of idf * F (k1 + 1) / (F + k1 (1 - b + b * D / avgdl))
/// with k1 = 1.2, b = 0.75, D the story's length in tokens (title + text), avgdl the corpus'
/// average, idf = ln((N - n + 0.5) / (n + 0.5)) (at least 1e-6) over the n stories holding the
/// unit. A term that occurs only inside phrases has weight 0 of its own.
struct query_plan {
  std::span<const std::string_view> terms;  ///< distinct tokens, in query order; all must match
  std::span<const double> idf;              ///< per term: its weight (idf, or 0: phrase-only)
  std::span<const phrase_span> phrases;     ///< each must occur in order in title or text
  std::span<const uint32_t> phrase_terms;   ///< indices into terms
  std::span<const double> phrase_idf;       ///< per phrase (empty: 1 for every phrase)
  double avgdl = 0;                         ///< the corpus' average D; 0: the shard's own
  std::span<const std::string_view> tags;   ///< a match carries all of them
  int64_t since;
  int64_t until;
  sort_order sort;
  uint32_t k;  ///< hits wanted: offset + limit
};

/// One ranked match. Better = higher key, then smaller id (id_less).
struct hit {
  double key;           ///< BM25 score, or the story time for sort=date
  std::string_view id;  ///< valid while the shard (or its answer buffer) lives
  uint32_t doc;         ///< shard-local handle for render_story
  uint32_t shard;       ///< set by the backend
};

/// A shard's answer: exact match count and its best hits, best first, at most plan.k.
struct shard_answer {
  uint64_t total = 0;
  std::vector<hit> hits;  ///< capacity reserved by the scratch; cleared by the shard
};

/// Story id order used for ties: shorter first, then bytewise (numeric order for decimal ids).
inline bool id_less(std::string_view a, std::string_view b) noexcept {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

/// The shard a story id lives in (stable across nodes and runs).
uint32_t shard_of(std::string_view id, uint32_t shard_count) noexcept;

struct shard_workspace;  // per-core evaluation state of in-process shards (opaque here)

/// How far one resumable step got (shard_source::search_slice, doc_freqs_slice).
enum class slice : uint8_t {
  done,    ///< the answer (or the frequencies) are final
  more,    ///< the budget ran out first: call again with first = false and the same workspace
  failed,  ///< the shard did not answer
};

/// Thread-safe for concurrent calls once constructed and finalized (read-only); each core
/// passes its own workspace and answer.
class shard_source {
 public:
  virtual ~shard_source() = default;

  virtual shard_stats stats() const = 0;
  /// Called by the backend with the corpus-wide statistics before any query; again with the
  /// same ones (a build finalizes its shards as it goes), it has nothing to do.
  virtual void finalize(const shard_stats& global) = 0;
  /// Adds this shard's document frequency of each plan term to df[i], then of each phrase of
  /// plan.phrases (the stories holding it) to df[terms + p]. False: shard unavailable.
  virtual bool add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const = 0;
  /// Answers the plan into `out` (cleared first). False: the shard did not answer.
  virtual bool search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const = 0;
  /// Resumable search(): `first` starts it (clears `out`), later calls continue the evaluation
  /// `ws` holds for the same plan (the plan's views must stay valid in between, and `ws` must
  /// not evaluate anything else meanwhile). Spends about `budget` units of work (postings
  /// visited), subtracting what it spent. The answer is the one search() gives, bit for bit.
  /// The default answers whole in the first call.
  virtual slice search_slice(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                             bool first, uint64_t& budget) const {
    (void)budget;
    if (!first) {
      return slice::done;
    }
    return search(plan, ws, out) ? slice::done : slice::failed;
  }
  /// Resumable add_doc_freqs() (the same contract as search_slice; adds into df as it goes).
  virtual slice doc_freqs_slice(const query_plan& plan, shard_workspace& ws, uint64_t* df,
                                bool first, uint64_t& budget) const {
    (void)budget;
    if (!first) {
      return slice::done;
    }
    return add_doc_freqs(plan, ws, df) ? slice::done : slice::failed;
  }
  /// Finds a story: its doc handle, not_found, or unavailable.
  virtual result<uint32_t, errc> find(std::string_view id) const = 0;
  /// Writes story `doc` as a JSON object (with "text" when asked) through `out`, or fails
  /// (errc::unreadable: its text cannot be read) having written nothing. Without the text it
  /// never fails. `nowait` (may be null): its text's reads do not wait for the disk; bytes not
  /// in the page cache fail it with errc::would_block, `nowait` saying which.
  virtual result<void, errc> render_story(uint32_t doc, bool with_text, json_out& out,
                                          pending_read* nowait) const = 0;
  result<void, errc> render_story(uint32_t doc, bool with_text, json_out& out) const {
    return render_story(doc, with_text, out, nullptr);
  }
};

}  // namespace tollgate::search
