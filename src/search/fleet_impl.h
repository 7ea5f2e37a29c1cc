// fleet_impl: what the backend and the fleet code share privately: query planning (so a query is
// planned the same way on a gateway and a single node), the BM25 idf formula (so the gateway's
// global idf is bit-identical to a single node's over the same corpus), and the state behind
// remote_query and the shard node's request parsing.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/remote_query.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

/// Hits a query can ask for: offset + limit at most.
inline constexpr uint32_t kMaxK = max_offset + max_limit;
/// Terms (and phrase term entries) a fleet request may carry.
inline constexpr size_t kMaxFleetTerms = 256;

/// Plans `query`: distinct terms in query order (their characters copied into `chars`, cleared
/// first), phrases of two or more tokens, and per term how often it stands on its own (alone[i];
/// 0: only inside phrases). Views stay valid while `chars` is not touched.
void plan_terms(std::string_view query, out_buffer& chars, std::vector<std::string_view>& terms,
                std::vector<phrase_span>& phrases, std::vector<uint32_t>& phrase_terms,
                std::vector<uint8_t>& alone);

/// FTS5's bm25 idf: ln((N - n + 0.5) / (n + 0.5)), or 1e-6 when that is not positive.
double bm25_idf(uint64_t docs, uint64_t df) noexcept;

/// Whether the phrases' document frequencies change the ranking: sort by relevance and more
/// than one unit (term standing alone or phrase). With a single unit every score is the same
/// positive multiple of its part, so any idf orders alike.
bool needs_phrase_df(std::span<const uint8_t> alone, size_t phrases, sort_order sort) noexcept;

/// The plan's weights from global figures: per term its idf times the times it stands alone
/// (0 for phrase-only terms); per phrase from df[alone.size() + p] when `phrase_df` (else
/// empty: weight 1).
void score_weights(uint64_t docs, std::span<const uint8_t> alone, std::span<const uint64_t> df,
                   size_t phrases, bool phrase_df, std::vector<double>& idf,
                   std::vector<double>& phrase_idf);

/// The stories-first merge order: higher key, then smaller id.
inline bool hit_better(const hit& a, const hit& b) noexcept {
  return a.key > b.key || (a.key == b.key && id_less(a.id, b.id));
}

/// The weighted parts of a plan as both fleet ends hold them: a shard node as read from a
/// search request, a gateway as planned and weighed for its fan-out.
struct plan_lists {
  std::vector<std::string_view> terms;
  std::vector<double> idf;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  std::vector<double> phrase_idf;

  /// Points the plan's terms, idf, phrases, phrase_terms and phrase_idf at these lists.
  void point(query_plan& plan) const noexcept {
    plan.terms = terms;
    plan.idf = idf;
    plan.phrases = phrases;
    plan.phrase_terms = phrase_terms;
    plan.phrase_idf = phrase_idf;
  }
};

/// One remote's answers within a remote_query.
struct remote_query::remote_reply {
  enum class story_state : uint8_t { unanswered, found, absent };
  bool df_ok = false;
  bool search_ok = false;
  story_state story = story_state::unanswered;
  shard_stats stats;
  std::vector<uint64_t> df;
  uint64_t total = 0;
  std::vector<hit> hits;  ///< best first; id views into chars; doc indexes spans
  std::vector<std::pair<uint32_t, uint32_t>> spans;  ///< per hit (or the story): JSON in chars
  out_buffer chars;                                  ///< ids and stories' JSON as received

  std::string_view json(uint32_t i) const noexcept {
    return {chars.data() + spans[i].first, spans[i].second};
  }
  void reset() noexcept {
    df_ok = search_ok = false;
    story = story_state::unanswered;
    stats = {};
    df.clear();
    total = 0;
    hits.clear();
    spans.clear();
    chars.clear();
  }
};

/// The plan (plan_lists: terms are views into term_chars; idf and phrase_idf are global, set by
/// finish_df), the figures behind the global idf, and the per-remote answers.
struct remote_query::state : plan_lists {
  out_buffer term_chars;
  std::vector<uint8_t> alone;  ///< per term: stands on its own in the query
  uint32_t k = 0;
  // phase 1
  bool phrase_df = false;          ///< the phrases' frequencies are asked for too
  std::vector<uint64_t> local_df;  ///< per term, then per phrase when phrase_df
  std::vector<uint8_t> local_ok;   ///< per in-process slice: answered its document frequencies
  shard_stats local_stats;
  std::unique_ptr<scratch> local_scratch;  ///< for the local phrase frequencies
  bool df_done = false;
  std::vector<uint64_t> df;  ///< global, after finish_df
  // idf, phrase_idf (empty: weight 1): global, after finish_df
  double avgdl = 0;   ///< global average length, after finish_df (0: each node's)
  uint64_t docs = 0;  ///< N of the idf
  std::vector<remote_reply> answers;
  simdjson::dom::parser dom;
  simdjson::ondemand::parser od;
};

/// The shard node's per-core parsing state (views into the DOM parser's strings).
struct fleet_scratch : plan_lists {
  simdjson::dom::parser dom;
  std::vector<std::string_view> tags;
  std::vector<uint64_t> df;
  fleet_scratch() {
    phrase_idf.reserve(kMaxFleetTerms / 2);
    terms.reserve(kMaxFleetTerms);
    tags.reserve(max_tags);
    idf.reserve(kMaxFleetTerms);
    df.reserve(kMaxFleetTerms);
    phrases.reserve(kMaxFleetTerms / 2);
    phrase_terms.reserve(kMaxFleetTerms);
  }
};

}  // namespace tollgate::search
