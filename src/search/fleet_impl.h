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
#include "tollgate/search/fleet.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

/// Hits a query can ask for: offset + limit at most.
inline constexpr uint32_t max_k = max_offset + max_limit;
/// Terms (and phrase term entries) a fleet request may carry.
inline constexpr size_t max_fleet_terms = 256;

/// Plans `query`: distinct terms in query order (their characters copied into `chars`, cleared
/// first), phrases of two or more tokens. Views stay valid while `chars` is not touched.
void plan_terms(std::string_view query, out_buffer& chars, std::vector<std::string_view>& terms,
                std::vector<phrase_span>& phrases, std::vector<uint32_t>& phrase_terms);

/// BM25 idf: ln(1 + (N - df + 0.5) / (df + 0.5)).
double bm25_idf(uint64_t docs, uint64_t df) noexcept;

/// The stories-first merge order: higher key, then smaller id.
inline bool hit_better(const hit& a, const hit& b) noexcept {
  return a.key > b.key || (a.key == b.key && id_less(a.id, b.id));
}

/// One remote's answers within a remote_query.
struct remote_query::answer {
  enum class story_state : uint8_t { unanswered, found, absent };
  bool df_ok = false;
  bool search_ok = false;
  story_state story = story_state::unanswered;
  shard_stats stats;
  std::vector<uint64_t> df;
  uint64_t total = 0;
  std::vector<hit> hits;  ///< best first; id views into chars; doc indexes spans
  std::vector<std::pair<uint32_t, uint32_t>> spans;  ///< per hit (or the story): JSON in chars
  out_buffer chars;  ///< ids and stories' JSON as received

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

struct remote_query::state {
  // the plan (views into term_chars)
  out_buffer term_chars;
  std::vector<std::string_view> terms;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  uint32_t k = 0;
  // phase 1
  std::vector<uint64_t> local_df;
  std::vector<uint8_t> local_ok;  ///< per local shard: answered its document frequencies
  uint64_t local_docs = 0;
  bool df_done = false;
  std::vector<uint64_t> df;  ///< global, after finish_df
  std::vector<double> idf;   ///< global, after finish_df
  uint64_t docs = 0;         ///< N of the idf
  std::vector<answer> answers;
  simdjson::dom::parser dom;
  simdjson::ondemand::parser od;
};

/// The shard node's per-core parsing state (views into the DOM parser's strings).
struct fleet_scratch {
  simdjson::dom::parser dom;
  std::vector<std::string_view> terms;
  std::vector<std::string_view> tags;
  std::vector<double> idf;
  std::vector<uint64_t> df;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  fleet_scratch() {
    terms.reserve(max_fleet_terms);
    tags.reserve(max_tags);
    idf.reserve(max_fleet_terms);
    df.reserve(max_fleet_terms);
    phrases.reserve(max_fleet_terms / 2);
    phrase_terms.reserve(max_fleet_terms);
  }
};

}  // namespace tollgate::search
