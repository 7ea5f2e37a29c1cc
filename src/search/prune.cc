// pruned_eval: local_shard's pruned evaluation of queries without phrases: the top k and the
// total are found apart, so that neither walks more postings than it needs.
//
//   1. Top k (top_step): the lead (rarest) cursor is walked block by block. A block whose bound
//      (the sum, in the plan's term order, of idf x each term's largest block maximum over the
//      lead block's doc range; by date, the block's latest time) is below the k-th best key of a
//      full heap is skipped without decoding. In a block that may reach the heap, each doc is
//      first tested against the other terms' bitsets (dense terms) and the time range, then
//      against its own bound (the lead's exact part plus the others' maxima of the blocks that
//      hold the doc), and only then are the other cursors sought and the doc scored. The bounds
//      are sums of the same products in the same order as the score, each factor at least the
//      exact one, so a skipped doc's score is below the k-th key; docs come in ascending order,
//      so an equal key would not displace a heap entry either (ties break by doc as before).
//   2. Total (count_*_step): every term dense: the AND of their bitsets, popcounted word by word
//      (or its docs checked against the filters); else the lead's docs, tested against the dense
//      terms' bitsets and leapfrogged with the sparse terms' cursors. Nothing is scored. When
//      the heap never filled, every match was offered and kept, so its size is the total.
// Both phases stop between docs (or bitset words) once the budget is spent; the workspace holds
// the cursors, the heap, the phase and the bounds, so a sliced search resumes where it stopped.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

// Puts every cursor back on its term's first doc.
void pruned_eval::reopen_cursors(const local_shard& shard, shard_workspace& ws) {
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    ws.cursors[i] = shard.cursor_for(shard.terms_[ws.term_ids[i]]);
    ws.cursors[i].next();  // not empty: open_cursors checked
  }
  ws.ev.pf_block = UINT32_MAX;
}

void pruned_eval::begin_pruned(const local_shard& shard, const query_plan& plan,
                               shard_workspace& ws) {
  eval_state& ev = ws.ev;
  ev.mode = eval_state::pruned;
  ev.counting = false;
  ev.word = 0;
  ev.bound_block = UINT32_MAX;
  ev.all_dense = true;
  ev.filter_on = false;
  for (const uint64_t* set : ws.sets) {  // (begin_search)
    ev.all_dense = ev.all_dense && set != nullptr;
  }
  // One walk for the top k and the total (lead_walk<true>) when few of the lead's docs are
  // expected to match (each other term's share of the shard's docs, as if independent): then
  // few of the lead's blocks could be skipped, and the total, unless every term is dense, walks
  // them all anyway. Else the top k's walk, skipping blocks, and the count apart.
  double share = 1;
  for (size_t oi = 1; oi < ws.order.size(); ++oi) {
    share *=
        static_cast<double>(ws.cursors[ws.order[oi]].df) / static_cast<double>(shard.docs_.size());
  }
  ev.one_pass = plan.phrases.empty() && share < one_pass_share;
  ev.impact = eval_state::impact_none;
  ev.time_filtered = plan.since != std::numeric_limits<int64_t>::min() ||
                     plan.until != std::numeric_limits<int64_t>::max();
  ev.kn_min = length_norm_of(shard.prune_.min_len, ev.avgdl);
  if (ws.kn_class_avgdl != ev.avgdl) {  // the classes are every shard's: only avgdl matters
    for (size_t c = 0; c < ws.kn_class.size(); ++c) {
      ws.kn_class[c] = length_norm_of(len_class_min[c], ev.avgdl);
    }
    ws.kn_class_avgdl = ev.avgdl;
  }
  ev.kn_class = ws.kn_class.data();
  ev.below_f = 0;
  ws.term_max.clear();  // made with the first thresholds (a heap that fills)
  ++ws.f_gen_now;       // no thresholds yet
  ws.f_kth = 0;
  ws.f_age = 0;
  ws.shallow.assign(plan.terms.size(), 0);
  ws.term_ub.assign(plan.terms.size(), 0);
}

// Seeds the heap before the walk, so that its bounds cut from the first block: the docs of the
// terms' champion lists (best term parts, or latest times by date), in ascending order, are
// sought on the cursors and offered when they match; the cursors then start over. The walk
// skips every seed (ev.seed_at), so no doc is offered twice; the heap's final content does not
// depend on the order of offers (better() is a strict order).
void pruned_eval::seed_heap(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                            shard_answer& out) {
  ws.seeds.clear();
  ws.ev.seed_at = 0;
  for (uint32_t term : ws.term_ids) {
    const uint32_t at = shard.champ_at_[term];
    if (at != UINT32_MAX) {
      const uint32_t* docs =
          (ws.ev.by_date ? shard.champ_date_.data() : shard.champ_doc_.data()) + at;
      ws.seeds.insert(ws.seeds.end(), docs, docs + kChampLen);
    }
  }
  if (ws.seeds.empty()) {
    return;
  }
  std::sort(ws.seeds.begin(), ws.seeds.end());
  ws.seeds.erase(std::unique(ws.seeds.begin(), ws.seeds.end()), ws.seeds.end());
  // the seeds' bitset words and rows (or norms) are a cache miss each: asked for together
  for (uint32_t doc : ws.seeds) {
    for (const uint64_t* set : ws.sets) {
      if (set != nullptr) {
        __builtin_prefetch(set + (doc >> 6));
      }
    }
    if (ws.rows_on) {
      __builtin_prefetch(&shard.prune_.impact_rows[doc]);
    } else {
      __builtin_prefetch(&shard.len_norm_[doc]);
    }
  }
  for (uint32_t doc : ws.seeds) {
    // the dense terms' bitsets first (no postings read), then the cursors, rarest first: most
    // seeds of a common term's list are not in the rarest term's docs
    bool on = true, left = true;
    for (size_t i = 0; i < ws.sets.size() && on; ++i) {
      on = ws.sets[i] == nullptr || (ws.sets[i][doc >> 6] >> (doc & 63) & 1) != 0;
    }
    for (size_t oi = 0; oi < ws.order.size() && on && left; ++oi) {
      if (ws.rows_on && ws.row_slot[ws.order[oi]] != UINT32_MAX) {
        continue;  // in its bitset (tested above); its frequency is in the doc's row
      }
      posting_cursor& c = ws.cursors[ws.order[oi]];
      left = c.seek(doc);
      on = left && c.doc == doc;
    }
    if (!left) {
      break;
    }
    if (on && shard.accepts(plan, ws, doc)) {
      hit h{};
      h.doc = doc;
      if (ws.ev.by_date) {
        h.key = static_cast<double>(shard.time_[doc]);
      } else {
        shard.score(plan, ws, doc, false, 0.0, h.key);
      }
      offer(out.hits, plan.k, h);
    }
  }
  reopen_cursors(shard, ws);
}

bool pruned_eval::pruned_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                              shard_answer& out, uint64_t& budget) {
  eval_state& ev = ws.ev;
  if (ev.one_pass && !ev.total_known) {
    return lead_walk<true>(shard, plan, ws, out, budget);
  }
  if (!ev.counting) {
    if (!top_step(shard, plan, ws, out, budget)) {
      return false;
    }
    if (ev.total_known || out.hits.size() < plan.k) {
      // the heap never filled: it holds every match
      out.total = ev.total_known ? ev.known_total : out.hits.size();
      return true;
    }
    ev.counting = true;
    if (!ev.all_dense) {
      reopen_cursors(shard, ws);
    }
  }
  return ev.all_dense ? count_dense_step(shard, plan, ws, out, budget)
                      : lead_walk<false>(shard, plan, ws, out, budget);
}

namespace {  // The phrases' part of a bound, from each word's bound before idf in ws.term_ub: a
             // phrase occurs
// in a field at most as often as each of its words, so its part is at most the least of theirs.
double phrase_bounds(const query_plan& plan, const shard_workspace& ws) noexcept {
  double ub = 0;
  for (size_t p = 0; p < plan.phrases.size(); ++p) {
    const phrase_span& ph = plan.phrases[p];
    double m = std::numeric_limits<double>::max();
    for (uint32_t j = 0; j < ph.count; ++j) {
      m = std::min(m, ws.term_ub[plan.phrase_terms[ph.first + j]]);
    }
    ub += phrase_weight(plan, p) * m;
  }
  return ub;
}
}  // namespace

// Bounds for the lead's current block: per other term, idf x its largest block maximum over
// the blocks that overlap the lead block's doc range (ws.term_ub), and their sum with the
// lead's own (ev.block_ub; by date, the block's latest time). False when another term has no
// doc left at or after the block's first: nothing more can match.
bool pruned_eval::lead_block_bound(const local_shard& shard, const query_plan& plan,
                                   shard_workspace& ws) {
  eval_state& ev = ws.ev;
  const uint32_t li = ws.order[0];
  const posting_cursor& lead = ws.cursors[li];
  ev.bound_block = lead.block;
  const uint32_t first = lead.block == 0 ? 0 : lead.skips[lead.block - 1].last_doc + 1;
  const uint32_t last = lead.skips[lead.block].last_doc;
  double ub = 0;
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    float m = shard.block_max_[c.skip_off + c.block];
    if (i != li) {
      uint32_t j = ws.shallow[i];
      while (j < c.nblocks && c.skips[j].last_doc < first) {
        ++j;
      }
      if (j == c.nblocks) {
        return false;
      }
      ws.shallow[i] = j;
      m = 0;
      for (; j < c.nblocks; ++j) {
        m = std::max(m, shard.block_max_[c.skip_off + j]);
        if (c.skips[j].last_doc >= last) {
          break;
        }
      }
    }
    ws.term_ub[i] = m * ev.bound_scale;
    ub += plan.idf[i] * ws.term_ub[i];
  }
  ub += phrase_bounds(plan, ws);
  ev.block_ub =
      ev.by_date ? static_cast<double>(shard.block_max_time_[lead.skip_off + lead.block]) : ub;
  return true;
}

// Phase 1: the top k (see the file comment). False: out of budget, not finished.
bool pruned_eval::top_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                           shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;  // in a register (writes through the cursors may alias it)
  eval_state& ev = ws.ev;
  posting_cursor& lead = ws.cursors[ws.order[0]];
  std::vector<hit>& heap = out.hits;
  while (true) {
    if (budget == 0) {
      budget_left = 0;
      return false;
    }
    --budget;
    bool end = false;
    if (ev.bound_block != lead.block && !lead_block_bound(shard, plan, ws)) {
      break;
    }
    if (heap.size() == plan.k && ev.block_ub < heap.front().key) {
      lead.skip_block();
      end = !lead.next();
    } else if (heap.size() == plan.k && !ev.by_date && plan.phrases.empty()) {
      // the block's docs whose frequency is below their length class's threshold, in a tight
      // loop (most docs of a common lead), then the first that is not, in full
      const uint32_t block = lead.block;
      uint64_t tested = 0;
      bool reached = false;
      while (!(reached = reaches_f_min(shard, plan, ws, heap.front().key, lead))) {
        ++tested;
        end = !lead.next();
        if (end || lead.block != block || tested >= budget) {
          break;
        }
      }
      budget -= std::min(budget, tested);
      ev.below_f += tested;
      if (reached) {
        top_doc(shard, plan, ws, heap, end);
      }
    } else {
      if (heap.size() == plan.k && !ev.by_date && shard.docs_.size() >= kPrefetchMinDocs) {
        shard.prefetch_lead(ws, true);  // the bounds read each doc's length class and norm
      }
      top_doc(shard, plan, ws, heap, end);
    }
    if (end) {
      break;
    }
  }
  budget_left = budget;
  return true;
}

// Per cursor: its term's largest block maximum (scaled as the bounds are).
void pruned_eval::fill_term_max(const local_shard& shard, shard_workspace& ws) {
  ws.term_max.assign(ws.cursors.size(), 0);
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    float m = 0;
    for (uint32_t j = 0; j < c.nblocks; ++j) {
      m = std::max(m, shard.block_max_[c.skip_off + j]);
    }
    ws.term_max[i] = m * ws.ev.bound_scale;
  }
}

// Whether the lead's frequency (3 x title tf + text tf) reaches the threshold of its doc's
// length class (lead_f_min); a doc below it cannot reach the k-th key kth. Thresholds made for a
// lower k-th key are still sound, only looser: they are remade when the k-th key has risen
// and a few thousand docs have been tested since.
[[gnu::always_inline]] inline bool pruned_eval::reaches_f_min(const local_shard& shard,
                                                              const query_plan& plan,
                                                              shard_workspace& ws, double kth,
                                                              const posting_cursor& lead) {
  if (kth != ws.f_kth && (ws.f_kth == 0 || ++ws.f_age >= 2048)) {
    if (ws.term_max.empty()) {
      fill_term_max(shard, ws);
    }
    ++ws.f_gen_now;
    ws.f_kth = kth;
    ws.f_age = 0;
  }
  const uint8_t cls = shard.prune_.len_class[lead.doc];
  if (ws.f_gen[cls] != ws.f_gen_now) {
    ws.f_gen[cls] = ws.f_gen_now;
    ws.f_min[cls] = lead_f_min(plan, ws, ws.ev.kn_class[cls], ws.f_kth);
  }
  static_assert(kTitleWeight == 3.0 && kTextWeight == 1.0);
  return uint64_t{3} * lead.tf_title + lead.tf_text >= ws.f_min[cls];
}

// A bound on the score of the lead's current doc: the lead's part at norm kn (at least the
// doc's own norm) plus, per other term, idf x the maximum of its block holding the doc, added
// in the score's order. `end`: another term has no doc left at or after this one.
double pruned_eval::doc_bound(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                              double kn, bool& end) {
  const uint32_t li = ws.order[0];
  const uint32_t doc = ws.cursors[li].doc;
  double ub = 0;
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    if (i == li) {
      ws.term_ub[i] = term_part(c.tf_title, c.tf_text, kn);
      ub += plan.idf[i] * ws.term_ub[i];
      continue;
    }
    uint32_t& j = ws.shallow[i];  // docs ascend: the block holding doc is at or after j
    while (j < c.nblocks && c.skips[j].last_doc < doc) {
      ++j;
    }
    if (j == c.nblocks) {
      end = true;
      return 0;
    }
    ws.term_ub[i] = shard.block_max_[c.skip_off + j] * ws.ev.bound_scale;
    ub += plan.idf[i] * ws.term_ub[i];
  }
  return ub + phrase_bounds(plan, ws);
}

// The least weighted frequency f (3 x title tf + text tf) of the lead at norm kn whose bound,
// with every other term at its largest block maximum (ws.term_max), summed as doc_bound sums,
// is not below kth; 2^20 when none up to it is. The bound is non-decreasing in f (unit_part
// increases in f by far more than its rounding below 2^20, and adding and multiplying by
// non-negative factors keep the order), so every f below the result has a bound below kth,
// and so has doc_bound, whose factors are each at most these.
uint32_t pruned_eval::lead_f_min(const query_plan& plan, shard_workspace& ws, double kn,
                                 double kth) {
  const uint32_t li = ws.order[0];
  auto bound = [&](uint32_t f) {
    double ub = 0;
    for (size_t i = 0; i < ws.cursors.size(); ++i) {
      ub += plan.idf[i] * (i == li ? unit_part(static_cast<double>(f), kn) : ws.term_max[i]);
    }
    return ub;
  };
  uint32_t lo = 0, hi = uint32_t{1} << 20;
  if (bound(hi) < kth) {
    return hi;
  }
  while (lo < hi) {  // the least f in [lo, hi] whose bound reaches kth; hi's does
    const uint32_t mid = lo + (hi - lo) / 2;
    if (bound(mid) < kth) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// The lead's current doc: rejected by the bitsets, the time range or its bound when it can,
// else sought on the other cursors, checked and scored; then the lead moves on. `end`: no doc
// is left that could match.
void pruned_eval::top_doc(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          std::vector<hit>& heap, bool& end) {
  const uint32_t li = ws.order[0];
  posting_cursor& lead = ws.cursors[li];
  const uint32_t doc = lead.doc;
  const bool full = heap.size() == plan.k;
  const double kth = full ? heap.front().key : 0.0;
  bool maybe = true;
  for (size_t i = 0; i < ws.sets.size() && maybe; ++i) {
    maybe = i == li || ws.sets[i] == nullptr || (ws.sets[i][doc >> 6] >> (doc & 63) & 1) != 0;
  }
  if (maybe && ws.ev.filter_on) {
    maybe = (ws.filter[doc >> 6] >> (doc & 63) & 1) != 0;
  } else if (maybe && ws.ev.time_filtered) {  // time_[doc] is a cache miss: only when filtered
    maybe = shard.time_[doc] >= plan.since && shard.time_[doc] <= plan.until;
  }
  if (maybe && full && ws.ev.by_date) {
    maybe = !(static_cast<double>(shard.time_[doc]) < kth);
  } else if (maybe && full) {
    // first with the shard's smallest norm (no load; a bound on the lead's part, which
    // decreases with the norm); then, once the sparse cursors hold the doc too (a seek reads
    // on along their postings where a doc's norm is a cache miss), with its length class's
    // norm (one byte) and with its own
    maybe = !(doc_bound(shard, plan, ws, ws.ev.kn_min, end) < kth) && !end &&
            seek_sparse(ws, doc, end) &&
            !(doc_bound(shard, plan, ws, ws.ev.kn_class[shard.prune_.len_class[doc]], end) < kth) &&
            !(doc_bound(shard, plan, ws, shard.length_norm(doc, ws.ev.avgdl), end) < kth);
    if (end) {
      return;
    }
    if (lead.doc != doc) {
      return;  // a sparse cursor moved past doc, and the lead on to its doc
    }
  }
  if (maybe) {
    for (size_t oi = 1; oi < ws.order.size(); ++oi) {
      if (ws.rows_on && ws.row_slot[ws.order[oi]] != UINT32_MAX) {
        continue;  // in its bitset (tested above); its frequency is in the doc's row
      }
      if (!leap(lead, ws.cursors[ws.order[oi]], doc, end)) {
        return;
      }
    }
    uint32_t& at = ws.ev.seed_at;
    while (at < ws.seeds.size() && ws.seeds[at] < doc) {
      ++at;
    }
    hit h{};
    h.doc = doc;
    bool keep = true;
    if ((at == ws.seeds.size() || ws.seeds[at] != doc) && shard.accepts(plan, ws, doc)) {
      if (ws.ev.by_date) {
        h.key = static_cast<double>(shard.time_[doc]);
      } else {
        keep = shard.score(plan, ws, doc, full, kth, h.key);
      }
      if (keep) {
        offer(heap, plan.k, h);
      }
    }
  }
  end = !lead.next();
}

// Seeks the cursors of the other terms without a bitset onto the lead's doc: true when they all
// hold it; else the lead moves on to the doc a cursor moved to (`end` when none is left).
[[gnu::always_inline]] inline bool pruned_eval::seek_sparse(shard_workspace& ws, uint32_t doc,
                                                            bool& end) {
  posting_cursor& lead = ws.cursors[ws.order[0]];
  for (size_t oi = 1; oi < ws.order.size(); ++oi) {
    if (ws.sets[ws.order[oi]] != nullptr) {
      continue;
    }
    if (!leap(lead, ws.cursors[ws.order[oi]], doc, end)) {
      return false;
    }
  }
  return true;
}

// One step of the lead's walk with the other terms (lead_walk): true when the
// lead's current doc matches (the filter or the time range and tags, the dense terms' bitsets,
// the sparse cursors sought onto it), the lead left on it; else false with the lead moved on to
// the next doc that may match, `more` false when none is left.
[[gnu::always_inline]] inline bool pruned_eval::lead_matches(const local_shard& shard,
                                                             const query_plan& plan,
                                                             shard_workspace& ws, bool& more) {
  posting_cursor& lead = ws.cursors[ws.order[0]];
  const uint32_t doc = lead.doc;
  bool in = ws.ev.filter_on ? (ws.filter[doc >> 6] >> (doc & 63) & 1) != 0 : true;
  for (size_t oi = 1; oi < ws.order.size() && in; ++oi) {
    const uint64_t* s = ws.sets[ws.order[oi]];
    in = s == nullptr || (s[doc >> 6] >> (doc & 63) & 1) != 0;
  }
  bool end = false;
  if (in && !seek_sparse(ws, doc, end)) {
    more = !end;  // the lead is on the doc a sparse cursor moved past its own to
    return false;
  }
  if (in && (ws.ev.filter_on || shard.accepts(plan, ws, doc))) {
    more = true;
    return true;
  }
  more = lead.next();
  return false;
}

// The lead's walk with the other terms: each match counted, and in the one-pass walk (Offer)
// offered (offer_match). Phase 2 of the two-phase walk when some term has no bitset; both phases
// in one when few of the lead's docs are expected to match (begin_pruned): then few of its
// blocks could be skipped, and the total walks them all anyway. With nothing but the other
// terms' bitsets to test (others_dense), a doc is tested without a branch.
template <bool Offer>
bool pruned_eval::lead_walk(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                            shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  posting_cursor& lead = ws.cursors[ws.order[0]];
  bool more = lead.doc != UINT32_MAX;
  if (others_dense(plan, ws)) {
    // A block of the lead at a time: its docs tested without a branch, the matches gathered
    // (with the lead's frequencies), then offered: a match's branch would be mispredicted as
    // often as matches are neither rare nor common.
    uint64_t total = out.total;
    std::array<uint32_t, kBlockDocs> docs, tf_title, tf_text;
    while (more && budget != 0) {
      posting_cursor c = lead;
      uint32_t n = 0;
      uint64_t seen = 0;
      while (true) {
        const uint32_t doc = c.doc;
        uint64_t in = 1;
        for (size_t oi = 1; oi < ws.order.size(); ++oi) {
          in &= ws.sets[ws.order[oi]][doc >> 6] >> (doc & 63);
        }
        docs[n] = doc;
        tf_title[n] = c.tf_title;
        tf_text[n] = c.tf_text;
        n += static_cast<uint32_t>(in);
        if (++seen == budget || c.left == 0) {
          break;
        }
        c.next();
      }
      total += n;
      if (Offer) {
        for (uint32_t j = 0; j < n; ++j) {
          // offer_match reads only these of the lead: its doc and frequencies, as of this match
          lead.doc = docs[j];
          lead.tf_title = tf_title[j];
          lead.tf_text = tf_text[j];
          offer_match(shard, plan, ws, out.hits, docs[j]);
        }
      }
      budget -= seen;
      lead = c;
      more = lead.next();
    }
    out.total = total;
  } else {
    while (more && budget != 0) {
      --budget;
      if (lead_matches(shard, plan, ws, more)) {
        ++out.total;
        if (Offer) {
          offer_match(shard, plan, ws, out.hits, lead.doc);
        }
        more = lead.next();
      }
    }
  }
  budget_left = budget;
  return !more;
}

// Whether a lead's doc matches when it is in every other term's bitset: no filter, time window,
// tags or phrases to check, and every other term dense.
bool pruned_eval::others_dense(const query_plan& plan, const shard_workspace& ws) noexcept {
  if (ws.ev.filter_on || !ws.tag_ids.empty() || !plan.phrases.empty() ||
      plan.since != std::numeric_limits<int64_t>::min() ||
      plan.until != std::numeric_limits<int64_t>::max()) {
    return false;
  }
  for (size_t oi = 1; oi < ws.order.size(); ++oi) {
    if (ws.sets[ws.order[oi]] == nullptr) {
      return false;
    }
  }
  return true;
}

// A match of the one-pass walk (lead_walk<true>), on the lead and sparse cursors (not yet on the
// dense ones): offered unless seed_heap offered it already, or a full heap's k-th key is above
// its bound; by relevance the bounds come cheapest first: the lead's frequency against its
// length class's threshold (reaches_f_min), the match's bound at its class's norm, then at its
// own; only then are the dense cursors sought and the doc scored.
void pruned_eval::offer_match(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                              std::vector<hit>& heap, uint32_t doc) {
  eval_state& ev = ws.ev;
  uint32_t& at = ev.seed_at;
  while (at < ws.seeds.size() && ws.seeds[at] < doc) {
    ++at;
  }
  if (at < ws.seeds.size() && ws.seeds[at] == doc) {
    return;
  }
  const bool full = heap.size() == plan.k;
  hit h{};
  h.doc = doc;
  if (ev.by_date) {
    h.key = static_cast<double>(shard.time_[doc]);
    if (full && h.key < heap.front().key) {
      return;
    }
  } else {
    const double kth = full ? heap.front().key : 0.0;
    if (full &&
        (!reaches_f_min(shard, plan, ws, kth, ws.cursors[ws.order[0]]) ||
         match_bound(shard, plan, ws, doc, ev.kn_class[shard.prune_.len_class[doc]]) < kth ||
         match_bound(shard, plan, ws, doc, shard.length_norm(doc, ev.avgdl)) < kth)) {
      return;
    }
    for (size_t i = 0; i < ws.cursors.size(); ++i) {
      if (ws.sets[i] != nullptr && !(ws.rows_on && ws.row_slot[i] != UINT32_MAX)) {
        ws.cursors[i].seek(doc);  // in its bitset: the cursor lands on doc
      }
    }
    shard.score(plan, ws, doc, full, kth, h.key);
  }
  offer(heap, plan.k, h);
}

// A bound on the key of a match of the one-pass walk at norm kn (at least its own): the parts
// of the terms whose cursors are on it (the lead, the sparse terms) at kn, the dense terms'
// maxima of their blocks holding it; added in the score's order, each factor at least the
// score's (term_part does not increase with the norm).
double pruned_eval::match_bound(const local_shard& shard, const query_plan& plan,
                                shard_workspace& ws, uint32_t doc, double kn) {
  double ub = 0;
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    if (ws.sets[i] == nullptr || c.doc == doc) {
      ub += plan.idf[i] * term_part(c.tf_title, c.tf_text, kn);
      continue;
    }
    uint32_t& j = ws.shallow[i];  // docs ascend: the block holding doc is at or after j
    while (c.skips[j].last_doc < doc) {
      ++j;  // the doc is in the term's bitset, so a block holds it
    }
    ub += plan.idf[i] * (shard.block_max_[c.skip_off + j] * ws.ev.bound_scale);
  }
  return ub;
}

// Phase 2, every term with a bitset: their AND, popcounted, or its docs checked against the
// filters.
TOLLGATE_POPCNT_CLONES
bool pruned_eval::count_dense_step(const local_shard& shard, const query_plan& plan,
                                   shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  // the filter bitset (no phrases) is exactly the time window and the tags
  const bool filter_on = ws.ev.filter_on;
  const bool filtered =
      !filter_on && (!ws.tag_ids.empty() || plan.since != std::numeric_limits<int64_t>::min() ||
                     plan.until != std::numeric_limits<int64_t>::max());
  const uint32_t words = shard.prune_.words;
  uint64_t total = out.total;
  uint32_t w = ws.ev.word;
  for (; w < words; ++w) {
    if (budget == 0) {
      break;
    }
    uint64_t x = ~uint64_t{0};
    for (const uint64_t* s : ws.sets) {
      x &= s[w];
    }
    if (filter_on) {
      x &= ws.filter[w];
    }
    if (!filtered) {
      total += static_cast<uint64_t>(std::popcount(x));
      --budget;
      continue;
    }
    budget -= std::min<uint64_t>(budget, 1 + static_cast<uint64_t>(std::popcount(x)));
    for (; x != 0; x &= x - 1) {
      const uint32_t doc = w * 64 + static_cast<uint32_t>(std::countr_zero(x));
      total += shard.accepts(plan, ws, doc) ? 1 : 0;
    }
  }
  out.total = total;
  ws.ev.word = w;
  budget_left = budget;
  return w == words;
}

}  // namespace tollgate::search
