// filter_eval: local_shard's filters and date order for queries without phrases (taken from
// the pruned evaluation's start, so only when prune_enabled; the leapfrog of evaluate.cc answers
// the same queries without them, which the tests compare).
//
//   Filter bitset (build_filter): since/until is a range of time ranks (prune_index::by_time,
//   docs by time), made of whole buckets from the cumulative bitsets (time_cum: one AND-NOT per
//   word) plus the ranks at both edges set one by one; each tag ANDs in its docs (tag_docs).
//   It holds exactly the docs that pass the time window and the tags.
//   Filtered (filtered_step): when the filter passes no more docs than the rarest term has (a
//   quarter as many by relevance, where every match is scored), its docs, ANDed with the dense
//   terms' bitsets word by word, drive the evaluation: the sparse terms' cursors (and, for
//   scoring, all of them) are sought to each doc, every match is counted and offered. A narrow
//   window or a rare tag costs its own docs, not a common term's.
//   Otherwise the pruned evaluation runs as before with the filter as one more bitset to test
//   before a doc is sought and scored, and to AND into the count.
//   Time walk (time_walk_step): sorted by date with every term dense (a bitset each), the ranks
//   are visited from the window's latest down, each doc tested against the bitsets (and the
//   filter); descending rank is the hit order (latest first, ties by lower doc), so the first k
//   docs that pass are the answer. The total is counted first (the AND of the bitsets,
//   popcounted); the walk is taken when it should visit fewer docs (about k x window / total)
//   than the rarest term has postings, else the pruned walk runs knowing the total.
// Each step stops between docs or bitset words once the budget is spent and resumes from the
// workspace (ev.word, ev.rank, the cursors, the heap).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {
inline bool has(const uint64_t* set, uint32_t doc) noexcept {
  return (set[doc >> 6] >> (doc & 63) & 1) != 0;
}
inline void put(uint64_t* set, uint32_t doc) noexcept {
  set[doc >> 6] |= uint64_t{1} << (doc & 63);
}
}  // namespace

// The ranks [lo, hi) of the docs whose time is in [since, until].
void filter_eval::time_ranks(const local_shard& shard, const query_plan& plan, uint32_t& lo,
                             uint32_t& hi) noexcept {
  const std::span<const uint32_t> bt = shard.prune_.by_time;
  lo = plan.since == std::numeric_limits<int64_t>::min()
           ? 0
           : static_cast<uint32_t>(
                 std::partition_point(bt.begin(), bt.end(),
                                      [&](uint32_t d) { return shard.time_[d] < plan.since; }) -
                 bt.begin());
  hi = plan.until == std::numeric_limits<int64_t>::max()
           ? static_cast<uint32_t>(bt.size())
           : static_cast<uint32_t>(
                 std::partition_point(bt.begin(), bt.end(),
                                      [&](uint32_t d) { return shard.time_[d] <= plan.until; }) -
                 bt.begin());
  hi = std::max(lo, hi);
}

// Fills ws.filter with the docs that pass the time window and the tags; returns their number.
TOLLGATE_POPCNT_CLONES
uint64_t filter_eval::build_filter(const local_shard& shard, const query_plan& plan,
                                   shard_workspace& ws) {
  const uint32_t words = shard.prune_.words;
  const uint64_t n = shard.docs_.size();
  ws.filter.assign(words, 0);
  uint64_t* f = ws.filter.data();
  const std::span<const uint32_t> bt = shard.prune_.by_time;
  auto set_ranks = [&](uint64_t a, uint64_t b) {
    for (uint64_t r = a; r < b; ++r) {
      put(f, bt[r]);
    }
  };
  uint32_t lo, hi;
  time_ranks(shard, plan, lo, hi);
  size_t tag = 0;
  if (lo == 0 && hi == n && !ws.tag_ids.empty()) {
    // no window: the first tag's docs
    const uint32_t t = ws.tag_ids[tag++];
    for (uint32_t i = shard.prune_.tag_at[t]; i < shard.prune_.tag_at[t + 1]; ++i) {
      put(f, shard.prune_.tag_docs[i]);
    }
  } else if (hi - lo <= 2 * uint64_t{shard.prune_.time_step}) {
    set_ranks(lo, hi);
  } else {
    // whole buckets [a, b) of ranks [a step, b step) from the cumulative bitsets, then the edges
    const uint64_t step = shard.prune_.time_step;
    const uint64_t a = (lo + step - 1) / step, b = hi / step;
    auto cum_word = [&](uint64_t j, uint32_t w) -> uint64_t {
      if (j == 0) {
        return 0;
      }
      if (j * step >= n) {  // every doc
        const uint64_t left = n - uint64_t{w} * 64;
        return left >= 64 ? ~uint64_t{0} : (uint64_t{1} << left) - 1;
      }
      return shard.prune_.time_cum[(j - 1) * words + w];
    };
    for (uint32_t w = 0; w < words; ++w) {
      f[w] = cum_word(b, w) & ~cum_word(a, w);
    }
    set_ranks(lo, a * step);
    set_ranks(b * step, hi);
  }
  if (tag < ws.tag_ids.size()) {
    ws.tag_bits.resize(words);
    for (; tag < ws.tag_ids.size(); ++tag) {
      const uint32_t t = ws.tag_ids[tag];
      std::fill(ws.tag_bits.begin(), ws.tag_bits.end(), 0);
      for (uint32_t i = shard.prune_.tag_at[t]; i < shard.prune_.tag_at[t + 1]; ++i) {
        put(ws.tag_bits.data(), shard.prune_.tag_docs[i]);
      }
      for (uint32_t w = 0; w < words; ++w) {
        f[w] &= ws.tag_bits[w];
      }
    }
  }
  uint64_t count = 0;
  for (uint32_t w = 0; w < words; ++w) {
    count += static_cast<uint64_t>(std::popcount(f[w]));
  }
  return count;
}

// The docs in every term's bitset (all dense) and, when on, the filter.
TOLLGATE_POPCNT_CLONES
uint64_t filter_eval::count_sets(const local_shard& shard, const shard_workspace& ws) noexcept {
  uint64_t count = 0;
  for (uint32_t w = 0; w < shard.prune_.words; ++w) {
    uint64_t x = ws.ev.filter_on ? ws.filter[w] : ~uint64_t{0};
    for (const uint64_t* s : ws.sets) {
      x &= s[w];
    }
    count += static_cast<uint64_t>(std::popcount(x));
  }
  return count;
}

// Sorted by date, no phrases: takes the time walk when every term is dense and the walk is
// expected to be short (true; out.total is set). Else false; having counted the total (then
// ev.total_known is set, and ev.filter_on when the filter was built) or not.
TOLLGATE_POPCNT_CLONES
bool filter_eval::begin_time_walk(const local_shard& shard, const query_plan& plan,
                                  shard_workspace& ws, shard_answer& out) {
  eval_state& ev = ws.ev;
  ev.filter_on = false;
  if (!prune_enabled || !ev.by_date || !plan.phrases.empty()) {
    return false;
  }
  const uint64_t lead_df = ws.cursors[ws.order[0]].df;
  const uint64_t n = shard.docs_.size();
  if (lead_df < 2 * uint64_t{shard.prune_.words}) {
    return false;  // the rarest term's postings cost less than a pass over bitsets
  }
  ws.sets.clear();
  bool dense = true;
  for (uint32_t term : ws.term_ids) {
    ws.sets.push_back(shard.prune_.set(term));
    dense = dense && ws.sets.back() != nullptr;
  }
  if (!dense) {
    return false;
  }
  uint32_t lo, hi;
  time_ranks(shard, plan, lo, hi);
  uint64_t total;
  if (plan.terms.size() == 1 && lo == 0 && hi == n && ws.tag_ids.empty()) {
    total = lead_df;
  } else {
    if (lo != 0 || hi != n || !ws.tag_ids.empty()) {
      build_filter(shard, plan, ws);
      ev.filter_on = true;
    }
    total = count_sets(shard, ws);
    ev.total_known = true;
    ev.known_total = total;
  }
  // about k x window / total ranks to visit, against at least the rarest term's postings
  if (total != 0 && uint64_t{plan.k} * (hi - lo) > total * lead_df) {
    return false;
  }
  out.total = total;
  ev.mode = eval_state::time_walk;
  ev.rank = hi;
  ev.rank_lo = lo;
  return true;
}

// Called by begin_search once the pruned evaluation is set up for a plan without phrases:
// takes over with the time walk or the filter-led evaluation (true), or leaves the pruned one
// to run, with the filter on when it was built (false).
bool filter_eval::begin_filtered(const local_shard& shard, const query_plan& plan,
                                 shard_workspace& ws, shard_answer& out) {
  eval_state& ev = ws.ev;
  if (begin_time_walk(shard, plan, ws, out)) {
    return true;
  }
  if (ev.filter_on || (!ev.time_filtered && ws.tag_ids.empty())) {
    return false;
  }
  // A bitset word costs a few cheap operations; a posting of the lead, a time_ (or tag) load
  // that mostly misses the cache: the filter pays once the lead has an eighth as many docs.
  const uint64_t lead_df = ws.cursors[ws.order[0]].df;
  if (lead_df * 8 < shard.prune_.words) {
    return false;
  }
  const uint64_t passing = build_filter(shard, plan, ws);  // (ws.sets: begin_search's)
  ev.filter_on = true;
  // Led by the filter, every match is visited (and, by relevance, scored); the pruned walk
  // tests the filter bit per lead doc and scores only docs that may enter the top k.
  if (passing > (ev.by_date ? lead_df : lead_df / 4)) {
    return false;
  }
  ev.mode = eval_state::filtered;
  ev.word = 0;
  out.total = 0;
  return true;
}

TOLLGATE_POPCNT_CLONES
bool filter_eval::filtered_step(const local_shard& shard, const query_plan& plan,
                                shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  eval_state& ev = ws.ev;
  const uint32_t words = shard.prune_.words;
  const bool by_date = ev.by_date;
  uint32_t w = ev.word;
  for (; w < words; ++w) {
    if (budget == 0) {
      ev.word = w;
      budget_left = 0;
      return false;
    }
    uint64_t x = ws.filter[w];
    for (const uint64_t* s : ws.sets) {
      x &= s == nullptr ? ~uint64_t{0} : s[w];
    }
    budget -= std::min<uint64_t>(budget, 1 + static_cast<uint64_t>(std::popcount(x)));
    for (; x != 0; x &= x - 1) {
      const uint32_t doc = w * 64 + static_cast<uint32_t>(std::countr_zero(x));
      bool on = true;
      for (size_t i = 0; i < ws.cursors.size() && on; ++i) {
        if (ws.sets[i] != nullptr && (by_date || (ws.rows_on && ws.row_slot[i] != UINT32_MAX))) {
          continue;  // in its bitset; no frequency needed, or it is in the doc's row
        }
        posting_cursor& c = ws.cursors[i];
        if (!c.seek(doc)) {
          ev.word = words;  // this term has no doc left: nothing more matches
          budget_left = budget;
          return true;
        }
        on = c.doc == doc;
      }
      if (!on) {
        continue;
      }
      ++out.total;
      hit h{};
      h.doc = doc;
      if (by_date) {
        h.key = static_cast<double>(shard.time_[doc]);
      } else {
        shard.score(plan, ws, doc, false, 0.0, h.key);
      }
      offer(out.hits, plan.k, h);
    }
  }
  ev.word = w;
  budget_left = budget;
  return true;
}

bool filter_eval::time_walk_step(const local_shard& shard, const query_plan& plan,
                                 shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  eval_state& ev = ws.ev;
  std::vector<hit>& heap = out.hits;
  const uint32_t* by_time = shard.prune_.by_time.data();
  const uint64_t* filter = ev.filter_on ? ws.filter.data() : nullptr;
  while (ev.rank > ev.rank_lo && heap.size() < plan.k) {
    if (budget == 0) {
      budget_left = 0;
      return false;
    }
    --budget;
    const uint32_t doc = by_time[--ev.rank];
    bool in = filter == nullptr || has(filter, doc);
    for (size_t i = 0; i < ws.sets.size() && in; ++i) {
      in = has(ws.sets[i], doc);
    }
    if (in) {
      hit h{};
      h.doc = doc;
      h.key = static_cast<double>(shard.time_[doc]);
      offer(heap, plan.k, h);
    }
  }
  budget_left = budget;
  return true;
}

}  // namespace tollgate::search
