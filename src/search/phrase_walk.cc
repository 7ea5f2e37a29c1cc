// phrase_walk_eval: a two-word phrase alone (the query "a b", or the sub-search that counts a
// phrase's matches for its document frequency, doc_freqs_slice), a batch of the lead's docs at
// a time.
//
// The leapfrog (intersect_step) takes the lead's docs one by one, and for each the other word's
// skip search, its block's first postings and its positions are loads that depend on one
// another: with a rare word beside a common one, nearly every lead doc costs three or four
// cache misses in a row (perf/notes/search-2026-12-07.md). Here each step of a batch is done for
// the whole batch before the next: the lead's docs gathered (the other word's bit tested), the
// other word's blocks found by searches whose loads do not depend on one another, those blocks
// and the positions prefetched, the blocks scanned, and only then the positions compared. The
// misses of a batch overlap instead of following one another. The docs, the count, the kept
// docs and the keys are the leapfrog's: the same docs in the same order, scored by the same
// score() with the cursors showing what they read at each doc.
#include <cstdint>
#include <limits>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {
// Lead docs per batch: enough misses in flight for the core. Where the other word has a bitset
// the batch is longer (its bits pass only some of the docs); else every doc is sought, each
// from the block the other cursor stood on at the batch's start, and the longer the batch the
// fewer land in that block or the next (blocks_of's shortcut) and the more are searched.
constexpr uint32_t kBatch = 64;
constexpr uint32_t kBatchSought = 16;
}  // namespace

bool phrase_walk_eval::fits(const query_plan& plan, const shard_workspace& ws) noexcept {
  return !ws.rows_on && plan.terms.size() == 2 && ws.cursors.size() == 2 &&
         plan.phrases.size() == 1 && plan.phrases[0].count == 2 &&
         plan.phrase_terms[plan.phrases[0].first] != plan.phrase_terms[plan.phrases[0].first + 1] &&
         plan.tags.empty() && plan.since == std::numeric_limits<int64_t>::min() &&
         plan.until == std::numeric_limits<int64_t>::max();
}

namespace {
// What a cursor reads at one doc, kept for the batch's last step (scoring reads these).
struct at_doc {
  const uint8_t* pos;
  uint32_t pos_len;
  uint32_t block;
  uint32_t tf_title;
  uint32_t tf_text;
};

at_doc keep(const posting_cursor& c) noexcept {
  return at_doc{c.pos, c.pos_len, c.block, c.tf_title, c.tf_text};
}

void put(posting_cursor& c, const at_doc& a) noexcept {
  c.pos = a.pos;
  c.pos_len = a.pos_len;
  c.block = a.block;
  c.tf_title = a.tf_title;
  c.tf_text = a.tf_text;
}
}  // namespace

template <bool Bounded>
bool phrase_walk_eval::walk_step(const local_shard& shard, const query_plan& plan,
                                 shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  const uint64_t step_cost = 1 + kPhraseCost;  // per lead doc, as the leapfrog counts it
  const uint32_t lead_i = ws.order[0];
  posting_cursor& lead = ws.cursors[lead_i];
  posting_cursor& other = ws.cursors[ws.order[1]];
  const uint64_t* set = ws.probe ? ws.sets[ws.order[1]] : nullptr;
  const uint32_t batch = set != nullptr ? kBatch : kBatchSought;
  const bool lead_first = plan.phrase_terms[plan.phrases[0].first] == lead_i;
  const bool by_date = ws.ev.by_date;
  std::vector<hit>& heap = out.hits;
  const size_t k = plan.k;
  // per doc of the batch: the doc and what each cursor reads there (the other cursor's only for
  // the docs that hold both words), and the other word's block
  uint32_t docs[kBatch] = {};  // (GCC cannot tell that blocks_of reads only the first n)
  at_doc leads[kBatch];
  at_doc others[kBatch];
  uint32_t blocks[kBatch];
  while (true) {
    // 1. up to `batch` lead docs, then those whose bit (when the other word has one) says they
    // hold both words
    uint32_t n = 0;
    bool lead_end = false;
    while (n < batch) {
      if constexpr (Bounded) {
        if (budget == 0) {
          break;
        }
        budget = budget > step_cost ? budget - step_cost : 0;
      }
      const uint32_t d = lead.doc;
      docs[n] = d;
      leads[n] = keep(lead);
      if (set != nullptr) {
        __builtin_prefetch(&set[d >> 6]);
      }
      ++n;
      if (!lead.next()) {
        lead_end = true;
        break;
      }
    }
    if (set != nullptr) {
      uint32_t both = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const uint32_t d = docs[i];
        docs[both] = d;
        leads[both] = leads[i];
        both += static_cast<uint32_t>(set[d >> 6] >> (d & 63) & 1);
      }
      n = both;
    }
    for (uint32_t i = 0; i < n; ++i) {
      __builtin_prefetch(leads[i].pos);
    }
    // 2. the other word's block for each (independent searches from where it stands), and
    // the first lines of each block's postings and positions prefetched
    other.blocks_of(docs, n, blocks);
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t b = blocks[i];
      if (b != other.block && b < other.nblocks) {
        const uint8_t* at = other.doc_base + other.skips[b - 1].doc_end;
        __builtin_prefetch(at);
        __builtin_prefetch(at + 64);
        __builtin_prefetch(other.pos_base + other.skips[b - 1].pos_end);
      }
    }
    // 3. the blocks scanned: the docs that hold both words keep what both cursors read there
    uint32_t m = 0;
    bool other_end = false;
    for (uint32_t i = 0; i < n; ++i) {
      if (!other.seek_in(docs[i], blocks[i])) {
        other_end = true;
        break;
      }
      if (other.doc == docs[i]) {
        docs[m] = docs[i];
        leads[m] = leads[i];
        others[m] = keep(other);
        __builtin_prefetch(other.pos);  // (what scoring reads is left alone: few docs match)
        ++m;
      }
    }
    // 4. the positions compared, in doc order; each match counted, kept and offered as the
    // leapfrog does, with the cursors showing what they read at its doc (score(), the bounds)
    if (m > 0) {
      const at_doc lead_now = keep(lead), other_now = keep(other);
      for (uint32_t i = 0; i < m; ++i) {
        const at_doc& a = lead_first ? leads[i] : others[i];
        const at_doc& b = lead_first ? others[i] : leads[i];
        if (!adjacent_positions(a.pos, a.pos_len, b.pos, b.pos_len)) {
          continue;
        }
        const uint32_t doc = docs[i];
        ++out.total;
        if (ws.keep_docs && ws.kept_docs.size() < kListedDocsMost) {
          ws.kept_docs.push_back(doc);
        }
        hit h{};
        h.doc = doc;
        if (by_date) {
          h.key = static_cast<double>(shard.time_[doc]);
        } else {
          put(lead, leads[i]);
          put(other, others[i]);
          const bool full = heap.size() == k;
          if ((full && shard.blocks_below(plan, ws, heap.front().key)) ||
              !shard.score(plan, ws, doc, full, full ? heap.front().key : 0.0, h.key)) {
            continue;
          }
        }
        offer(heap, k, h);
      }
      put(lead, lead_now);
      put(other, other_now);
    }
    if (lead_end || other_end) {
      budget_left = budget;
      return true;
    }
    if constexpr (Bounded) {
      if (budget == 0) {
        budget_left = 0;
        return false;
      }
    }
  }
}

template bool phrase_walk_eval::walk_step<true>(const local_shard&, const query_plan&,
                                                shard_workspace&, shard_answer&, uint64_t&);
template bool phrase_walk_eval::walk_step<false>(const local_shard&, const query_plan&,
                                                 shard_workspace&, shard_answer&, uint64_t&);

}  // namespace tollgate::search
