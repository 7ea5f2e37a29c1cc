// impact_eval (evaluators.h): the pruned evaluation's shortcut for a query of the shard's
// commonest words, read from prune_index's impact lists and rows instead of their postings: it
// answers the top k, or seeds the pruned walk's heap (impact_top below).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

// The top k of a conjunction of impact terms by relevance (no phrases, no filters, the shard's
// own norms), by the threshold algorithm over their lists of best docs: the lists are read in
// turns, each doc seen the first time is tested against every term's bitset and, when it
// matches, scored from the impact terms' frequencies per doc (the same products summed in the
// same order as score()) and offered. A doc not seen yet has in each term a part no larger than
// the part at that term's next entry, so its key is at most their weighted sum: once that is
// below the k-th key of a full heap, the heap is the top k (true; the total is then counted by
// the bitsets). When a list runs out first (deeper than impact_depth), the docs offered become
// the walk's seeds (false), as seed_heap's would.
namespace {
constexpr uint32_t impact_prefetch = 16;  // list entries ahead whose rows are fetched
}  // namespace

bool impact_eval::impact_top(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                             shard_answer& out) {
  eval_state& ev = ws.ev;
  const size_t m = ws.cursors.size();
  if (m < 2 || m > impact_max_query_terms || plan.k > impact_max_k || ev.by_date ||
      !plan.phrases.empty() || ev.filter_on || ev.time_filtered || !ws.tag_ids.empty() ||
      ev.avgdl != shard.avgdl_ || ev.bound_scale != 1 || !ev.all_dense) {
    return false;
  }
  ws.impact_pos.resize(m);
  for (size_t i = 0; i < m; ++i) {
    const uint32_t imp = shard.prune_.impact_of(ws.term_ids[i]);
    if (imp == UINT32_MAX) {
      return false;
    }
    ws.impact_pos[i] = imp;
  }
  std::vector<hit>& heap = out.hits;
  ws.seeds.clear();
  ws.ev.seed_at = 0;
  ws.seen.resize(shard.prune_.words, 0);
  ws.seen_docs.clear();
  // per term: its list [at, end) and the next entry
  uint32_t next[kImpactTermsMost], end[kImpactTermsMost];
  if (m > kImpactTermsMost) {
    return false;
  }
  for (size_t i = 0; i < m; ++i) {
    const uint32_t imp = ws.impact_pos[i];
    next[i] = shard.prune_.impact_at[imp];
    end[i] = shard.prune_.impact_at[imp + 1];
  }
  bool done = false;
  while (true) {
    for (size_t i = 0; i < m; ++i) {
      if (next[i] == end[i]) {
        continue;
      }
      if (next[i] + impact_prefetch < end[i]) {
        __builtin_prefetch(shard.prune_.impact_rows.data() +
                           shard.prune_.impact_doc[next[i] + impact_prefetch]);
      }
      const uint32_t doc = shard.prune_.impact_doc[next[i]++];
      uint64_t& word = ws.seen[doc >> 6];
      const uint64_t bit = uint64_t{1} << (doc & 63);
      if ((word & bit) != 0) {
        continue;
      }
      word |= bit;
      ws.seen_docs.push_back(doc);
      const impact_row& row = shard.prune_.impact_rows[doc];
      bool in = true;
      for (size_t j = 0; j < m && in; ++j) {
        in = row.wf[ws.impact_pos[j]] != 0;
      }
      if (!in) {
        continue;
      }
      // len_norm_[doc], without its cache miss when the row holds the length
      const double kn =
          row.len < 65535 ? length_norm_of(row.len, shard.avgdl_) : shard.len_norm_[doc];
      hit h{};
      h.doc = doc;
      for (size_t j = 0; j < m; ++j) {
        if (plan.idf[j] == 0) {
          continue;  // as score(): a phrase-only term adds nothing
        }
        uint32_t f = row.wf[ws.impact_pos[j]];
        if (f == 255) {  // 255 or more: the postings hold it
          posting_cursor c = shard.cursor_for(shard.terms_[ws.term_ids[j]]);
          c.next();
          c.seek(doc);
          f = 3 * c.tf_title + c.tf_text;
        }
        h.key += plan.idf[j] * unit_part(static_cast<double>(f), kn);
      }
      ws.seeds.push_back(doc);
      offer(heap, plan.k, h);
    }
    // A doc not seen yet has, per term, at most the part of its next entry. A list read to its
    // end that held every doc of its term: no unseen doc matches. One cut at impact_depth: no
    // bound is left, the walk finishes the top k.
    double ub = 0;
    bool complete = false, bounded = true;
    for (size_t j = 0; j < m; ++j) {
      if (next[j] < end[j]) {
        ub += plan.idf[j] * static_cast<double>(shard.prune_.impact_part[next[j]]);
      } else if (end[j] - shard.prune_.impact_at[ws.impact_pos[j]] ==
                 shard.terms_[ws.term_ids[j]].df) {
        complete = true;
      } else {
        bounded = false;
      }
    }
    if (complete || (bounded && heap.size() == plan.k && ub < heap.front().key)) {
      done = true;
      break;
    }
    if (!bounded) {
      break;
    }
  }
  for (uint32_t doc : ws.seen_docs) {
    ws.seen[doc >> 6] = 0;
  }
  ev.impact = done ? eval_state::impact_found : eval_state::impact_seeded;
  if (done) {
    ws.seeds.clear();
    ev.one_pass = false;
    ev.counting = true;  // the total: the bitsets' AND (every term is dense)
  } else {
    std::sort(ws.seeds.begin(), ws.seeds.end());
  }
  return true;
}

}  // namespace tollgate::search
