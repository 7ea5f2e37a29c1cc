// local_shard's query evaluation: its start (begin_search picks the evaluator, evaluators.h)
// and its steps, document frequencies, and the two evaluators that walk the postings as they
// are: single_term_eval (champion lists, single-term block skipping) and intersect_eval (the
// leapfrog intersection with block-max bounds: queries with phrases, or all of them when
// prune_enabled is off; the others go to pruned_eval, prune.cc), with the phrase checks. One
// unit, so that the phrase checks inline into the evaluation loops (seek() is inline in
// postings.h).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"
#include "tollgate/common/assert.h"

namespace tollgate::search {

using namespace detail;

// ---- queries ----

const term_info* local_shard::lookup_term(std::string_view t) const noexcept {
  int64_t r = probe_term(t, term_hash(t));
  return r >= 0 ? &terms_[static_cast<size_t>(r)] : nullptr;
}

// A phrase's stories: the phrase searched on its own (its distinct terms, the phrase, no
// filters; k = 1 by date, the cheapest ranking), whose total is exact. Sets ws.sub_plan.
void local_shard::plan_phrase_df(const query_plan& plan, const phrase_span& ph,
                                 shard_workspace& ws) const {
  ws.sub_terms.clear();
  ws.sub_phrase_terms.clear();
  for (uint32_t j = 0; j < ph.count; ++j) {
    const std::string_view t = plan.terms[plan.phrase_terms[ph.first + j]];
    const auto at = std::find(ws.sub_terms.begin(), ws.sub_terms.end(), t);
    ws.sub_phrase_terms.push_back(static_cast<uint32_t>(at - ws.sub_terms.begin()));
    if (at == ws.sub_terms.end()) {
      ws.sub_terms.push_back(t);
    }
  }
  ws.sub_whole = phrase_span{0, ph.count};
  query_plan& sub = ws.sub_plan;
  sub = query_plan{};
  sub.terms = ws.sub_terms;
  sub.phrases = std::span<const phrase_span>(&ws.sub_whole, 1);
  sub.phrase_terms = ws.sub_phrase_terms;
  sub.since = std::numeric_limits<int64_t>::min();
  sub.until = std::numeric_limits<int64_t>::max();
  sub.sort = sort_order::date;
  sub.k = 1;
}

bool local_shard::add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const {
  uint64_t unbounded = UINT64_MAX;
  return doc_freqs_slice(plan, ws, df, true, unbounded) == slice::done;
}

slice local_shard::doc_freqs_slice(const query_plan& plan, shard_workspace& ws, uint64_t* df,
                                   bool first, uint64_t& budget) const {
  if (first) {
    for (size_t i = 0; i < plan.terms.size(); ++i) {
      if (const term_info* t = lookup_term(plan.terms[i])) {
        df[i] += t->df;
      }
    }
    ws.df_phrase = 0;
    ws.df_sub_running = false;
  }
  for (; ws.df_phrase < plan.phrases.size(); ++ws.df_phrase) {
    uint64_t known = 0;
    if (!ws.df_sub_running &&
        phrase_totals::lookup_phrase_total(*this, plan, plan.phrases[ws.df_phrase], ws, known)) {
      df[plan.terms.size() + ws.df_phrase] += known;  // counted by an earlier query
      continue;
    }
    if (!ws.df_sub_running) {
      plan_phrase_df(plan, plan.phrases[ws.df_phrase], ws);
      ws.df_sub_running = true;
      ws.keep_docs = true;  // for the search that follows (listed_phrase)
      ws.kept_docs.clear();
      if (!begin_search(ws.sub_plan, ws, ws.sub_answer) &&
          !step(ws.sub_plan, ws, ws.sub_answer, budget)) {
        return slice::more;
      }
    } else if (!step(ws.sub_plan, ws, ws.sub_answer, budget)) {
      return slice::more;
    }
    ws.df_sub_running = false;
    ws.keep_docs = false;
    df[plan.terms.size() + ws.df_phrase] += ws.sub_answer.total;
    phrase_totals::remember_phrase_total(*this, plan, plan.phrases[ws.df_phrase], ws,
                                         ws.sub_answer.total);
  }
  return slice::done;
}

void local_shard::prefetch_block(shard_workspace& ws, bool classes) const {
  posting_cursor c = ws.cursors[ws.order[0]];
  ws.ev.pf_block = c.block;
  const bool norms = !ws.rows_on && ws.ev.avgdl == avgdl_;
  while (true) {
    if (ws.rows_on) {
      __builtin_prefetch(&prune_.impact_rows[c.doc]);
    } else if (norms) {
      __builtin_prefetch(&len_norm_[c.doc]);
    }
    if (classes) {
      __builtin_prefetch(&prune_.len_class[c.doc]);
    }
    if (c.left == 0) {
      break;
    }
    c.next();
  }
}

double local_shard::length_norm(uint32_t doc, double avgdl) const noexcept {
  return avgdl == 0 || avgdl == avgdl_ ? len_norm_[doc]
                                       : length_norm_of(title_len_[doc] + text_len_[doc], avgdl);
}

// Orders the heap best first and fills in the ids.
void local_shard::finish(shard_answer& out) const {
  std::sort_heap(out.hits.begin(), out.hits.end(), better);
  for (hit& h : out.hits) {
    h.id = id(h.doc);
  }
}

// One term, no filters: every posting matches, so total = df (set by begin_search), and whole
// blocks whose maximum (score or time) is below the k-th best so far are skipped without
// decoding. Stops between blocks once the budget is spent; false: not finished.
template <bool Bounded>
bool single_term_eval::single_term_step(const local_shard& shard, const query_plan& plan,
                                        shard_workspace& ws, shard_answer& out,
                                        uint64_t& budget_left) {
  uint64_t budget = budget_left;  // in a register (writes through the cursor may alias it)
  posting_cursor& c = ws.cursors[0];
  const eval_state& ev = ws.ev;
  const double idf = plan.idf[0];
  const size_t k = plan.k;
  std::vector<hit>& heap = out.hits;
  while (true) {
    // c is on the first doc of block c.block
    if constexpr (Bounded) {
      if (budget == 0) {
        budget_left = 0;
        return false;
      }
    }
    if (heap.size() == k) {
      const size_t blk = c.skip_off + c.block;
      double ub = ev.by_date ? static_cast<double>(shard.block_max_time_[blk])
                             : idf * (shard.block_max_[blk] * ev.bound_scale);
      if (ub < heap.front().key) {
        budget -= Bounded ? 1 : 0;
        c.skip_block();
        if (!c.next()) {
          budget_left = budget;
          return true;
        }
        continue;
      }
    }
    const uint32_t block = c.block;
    if constexpr (Bounded) {
      budget -= std::min<uint64_t>(budget, uint64_t{c.left} + 1);  // the block's docs
    }
    do {
      hit h{};
      h.doc = c.doc;
      h.key = ev.by_date
                  ? static_cast<double>(shard.time_[c.doc])
                  : idf * term_part(c.tf_title, c.tf_text, shard.length_norm(c.doc, ev.avgdl));
      offer(heap, k, h);
      if (!c.next()) {
        budget_left = budget;
        return true;
      }
    } while (c.block == block);
  }
}

// One term, no filters, k < kChampLen: the answer comes from the term's champion list. Every
// doc outside the list has a key <= the list's last key (term_part and time order the list, and
// multiplying by idf > 0 keeps the order), so when the k-th key is strictly above the last one,
// every doc that ranks at or above the k-th is in the list; those are sorted by the hit order.
// Otherwise (ties reaching the end of the list) returns false and the postings are walked.
bool single_term_eval::single_term_champions(const local_shard& shard, uint32_t term, bool by_date,
                                             double idf, size_t k, shard_answer& out) {
  const uint32_t at = shard.champ_at_[term];
  if (at == UINT32_MAX || k >= kChampLen || (!by_date && !(idf > 0))) {
    return false;
  }
  auto key_of = [&](size_t i) {
    return by_date ? static_cast<double>(shard.time_[shard.champ_date_[at + i]])
                   : idf * shard.champ_part_[at + i];
  };
  const double kth = key_of(k - 1);
  if (!(kth > key_of(kChampLen - 1))) {
    return false;
  }
  size_t j = k;
  while (key_of(j) == kth) {
    ++j;
  }
  std::vector<hit>& hits = out.hits;
  for (size_t i = 0; i < j; ++i) {
    hit h{};
    h.key = key_of(i);
    h.doc = by_date ? shard.champ_date_[at + i] : shard.champ_doc_[at + i];
    // insertion into the sorted prefix: keys arrive non-increasing, so only ties move
    size_t p = hits.size();
    hits.push_back(h);
    while (p > 0 && better(h, hits[p - 1])) {
      hits[p] = hits[p - 1];
      --p;
    }
    hits[p] = h;
  }
  hits.resize(k);
  for (hit& h : hits) {
    h.id = shard.id(h.doc);
  }
  out.total = shard.terms_[term].df;
  return true;
}

// Cursors for the plan's terms in ws (rarest first in ws.order) and its tags' ids; false when
// a term or tag is absent from this shard (nothing here matches) or a cursor is empty.
bool local_shard::open_cursors(const query_plan& plan, shard_workspace& ws) const {
  ws.cursors.clear();
  ws.order.clear();
  ws.term_ids.clear();
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    const term_info* t = lookup_term(plan.terms[i]);
    if (t == nullptr) {
      return false;
    }
    ws.cursors.push_back(cursor_for(*t));
    ws.order.push_back(static_cast<uint32_t>(i));
    ws.term_ids.push_back(static_cast<uint32_t>(t - terms_.data()));
  }
  ws.tag_ids.clear();
  for (std::string_view tag : plan.tags) {
    int64_t id = lookup_tag(tag);
    if (id < 0) {
      return false;
    }
    ws.tag_ids.push_back(static_cast<uint32_t>(id));
  }
  // rarest term leads the intersection; insertion sort: few terms, stable, allocation-free
  for (size_t i = 1; i < ws.order.size(); ++i) {
    uint32_t v = ws.order[i];
    size_t j = i;
    for (; j > 0 && ws.cursors[ws.order[j - 1]].df > ws.cursors[v].df; --j) {
      ws.order[j] = ws.order[j - 1];
    }
    ws.order[j] = v;
  }
  for (posting_cursor& c : ws.cursors) {
    if (!c.next()) {
      return false;
    }
  }
  return true;
}

// Which cursors take their frequencies from the impact rows instead of their postings: every
// impact term but the lead of a plan without phrases (a phrase needs its words' positions).
// (ws.row_slot is read only when ws.rows_on is set.)
void local_shard::choose_rows(const query_plan& plan, shard_workspace& ws) const {
  if (!plan.phrases.empty() || ws.cursors.size() < 2 || prune_.impact_rows.empty()) {
    return;
  }
  ws.row_slot.assign(ws.cursors.size(), UINT32_MAX);
  for (size_t oi = 1; oi < ws.order.size(); ++oi) {
    const uint32_t i = ws.order[oi];
    ws.row_slot[i] = prune_.impact_of(ws.term_ids[i]);
    ws.rows_on = ws.rows_on || ws.row_slot[i] != UINT32_MAX;
  }
}

bool local_shard::begin_search(const query_plan& plan, shard_workspace& ws,
                               shard_answer& out) const {
  out.total = 0;
  out.hits.clear();
  eval_state& ev = ws.ev;
  ev.mode = eval_state::done;
  // Two-word phrases of words that index their pairs, alone or beside terms: the same docs and
  // keys as the query with each phrase replaced by its pair term (a phrase's part is idf x
  // term_part of its title and text counts, summed in the same order); step() follows
  // ws.pair_plan until the search is done.
  if (&plan != &ws.pair_plan) {
    bool absent = false;
    ws.pair_on = plan.k != 0 && pair_table::pair_term_plan(*this, plan, ws, absent);
    if (ws.pair_on) {
      return absent || begin_search(ws.pair_plan, ws, out);
    }
  }
  ws.rows_on = false;
  ev.pf_block = UINT32_MAX;
  if (plan.terms.empty() || plan.k == 0) {
    return true;
  }
  const bool by_date = plan.sort == sort_order::date;
  // Under another corpus average (a fleet's), norms are computed per doc and the block maxima
  // (made with avgdl_) bound scores only after scaling: every norm shrinks by at most
  // avgdl_ / avgdl, and F (k1+1) / (F + r kn) <= F (k1+1) / (F + kn) / r for r <= 1.
  const bool own_avgdl = plan.avgdl == 0 || plan.avgdl == avgdl_;
  const bool single = plan.terms.size() == 1 && plan.phrases.empty() && plan.tags.empty() &&
                      plan.since == std::numeric_limits<int64_t>::min() &&
                      plan.until == std::numeric_limits<int64_t>::max();
  if (single && own_avgdl) {  // the champion list may answer before any cursor is opened
    const term_info* t = lookup_term(plan.terms[0]);
    if (t == nullptr ||
        single_term_eval::single_term_champions(*this, static_cast<uint32_t>(t - terms_.data()),
                                                by_date, plan.idf[0], plan.k, out)) {
      return true;
    }
  }
  if (!open_cursors(plan, ws)) {
    return true;
  }
  choose_rows(plan, ws);
  ev.by_date = by_date;
  ev.avgdl = own_avgdl ? avgdl_ : plan.avgdl;
  ev.bound_scale = own_avgdl || ev.avgdl < avgdl_ ? 1.0 : ev.avgdl / avgdl_ * (1 + 1e-9);
  if (single) {
    out.total = ws.cursors[0].df;
    if (!filter_eval::begin_time_walk(*this, plan, ws, out)) {
      ev.mode = eval_state::single;
    }
    return false;
  }
  if (prune_enabled && phrase_totals::listed_phrase(*this, plan, ws)) {
    ev.mode = eval_state::listed;
    ev.word = 0;
    return false;
  }
  ws.sets.clear();
  for (uint32_t term : ws.term_ids) {
    ws.sets.push_back(prune_.set(term));
  }
  uint64_t known = 0;
  if (prune_enabled && ws.cursors[ws.order[0]].df >= prune_min_lead_df &&
      (plan.phrases.empty() || phrase_totals::known_total(*this, plan, ws, known))) {
    pruned_eval::begin_pruned(*this, plan, ws);
    ev.total_known = !plan.phrases.empty();
    ev.known_total = known;
    if (plan.phrases.empty() && filter_eval::begin_filtered(*this, plan, ws, out)) {
      return false;
    }
    if (!impact_eval::impact_top(*this, plan, ws, out)) {
      pruned_eval::seed_heap(*this, plan, ws, out);
    }
    return false;
  }
  // align() tests the bits of the dense terms that may reject a lead doc (in at most half the
  // shard's docs) before seeking them: a bit that is almost always set only costs its load
  ws.probe = false;
  for (size_t i = 0; i < ws.sets.size(); ++i) {
    if (ws.sets[i] != nullptr && 2 * uint64_t{ws.cursors[i].df} > docs_.size()) {
      ws.sets[i] = nullptr;
    }
    ws.probe = ws.probe || ws.sets[i] != nullptr;
  }
  ev.mode = prune_enabled && phrase_walk_eval::fits(plan, ws) ? eval_state::phrase_walk
                                                              : eval_state::intersect;
  return false;
}

bool local_shard::step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                       uint64_t& budget) const {
  if (ws.pair_on && &plan != &ws.pair_plan) {
    return step(ws.pair_plan, ws, out, budget);  // see begin_search
  }
  // an unbounded step (search()) runs the loops without any budget accounting
  const bool bounded = budget != UINT64_MAX;
  bool finished;
  if (ws.ev.mode == eval_state::pruned) {
    finished = pruned_eval::pruned_step(*this, plan, ws, out, budget);
  } else if (ws.ev.mode == eval_state::filtered) {
    finished = filter_eval::filtered_step(*this, plan, ws, out, budget);
  } else if (ws.ev.mode == eval_state::listed) {
    finished = phrase_totals::listed_step(*this, plan, ws, out, budget);
  } else if (ws.ev.mode == eval_state::time_walk) {
    finished = filter_eval::time_walk_step(*this, plan, ws, out, budget);
  } else if (ws.ev.mode == eval_state::phrase_walk) {
    finished = bounded ? phrase_walk_eval::walk_step<true>(*this, plan, ws, out, budget)
                       : phrase_walk_eval::walk_step<false>(*this, plan, ws, out, budget);
  } else if (ws.ev.mode == eval_state::single) {
    finished = bounded ? single_term_eval::single_term_step<true>(*this, plan, ws, out, budget)
                       : single_term_eval::single_term_step<false>(*this, plan, ws, out, budget);
  } else {
    finished = bounded ? intersect_eval::intersect_step<true>(*this, plan, ws, out, budget)
                       : intersect_eval::intersect_step<false>(*this, plan, ws, out, budget);
  }
  if (finished) {
    ws.ev.mode = eval_state::done;
    finish(out);
  }
  return finished;
}

bool local_shard::search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const {
  uint64_t unbounded = UINT64_MAX;
  ws.ev.began = eval_state::done;
  if (!begin_search(plan, ws, out)) {
    ws.ev.began = ws.ev.mode;
    step(plan, ws, out, unbounded);
  }
  return true;
}

slice local_shard::search_slice(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                                bool first, uint64_t& budget) const {
  if (first && begin_search(plan, ws, out)) {
    return slice::done;
  }
  return step(plan, ws, out, budget) ? slice::done : slice::more;
}

// Moves every cursor to the lead's doc or past it; true when all are on it. False with the
// lead moved on (not aligned: call again) or with `end` set (a cursor ran out).
template <bool Rows>
[[gnu::always_inline]] inline bool intersect_eval::align(const local_shard& shard, const lineup& l,
                                                         posting_cursor& lead, bool& end) {
  const uint32_t target = lead.doc;
  for (size_t oi = 1; oi < l.terms; ++oi) {
    const uint32_t i = l.order[oi];
    if (Rows && l.row_slot[i] != UINT32_MAX) {
      if (shard.prune_.impact_rows[target].wf[l.row_slot[i]] == 0) {
        end = !lead.next();  // not in the doc: the lead moves on
        return false;
      }
      continue;
    }
    // a dense term's bit before its seek (which decodes up to the doc)
    if (l.probe && l.sets[i] != nullptr && (l.sets[i][target >> 6] >> (target & 63) & 1) == 0) {
      end = !lead.next();
      return false;
    }
    if (!leap(lead, l.cursors[i], target, end)) {
      return false;
    }
  }
  return true;
}

// The leapfrog intersection: the lead (rarest) cursor proposes docs, the others seek to them;
// a doc on every cursor that passes the filters is counted and, unless the block maxima or its
// own bound rule it out of a full heap, scored and offered. Stops between docs once the
// budget is spent (the cursors and the heap hold the state); false: not finished.

template <bool Bounded>
bool intersect_eval::intersect_step(const local_shard& shard, const query_plan& plan,
                                    shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;  // in a register (writes through the cursors may alias it)
  const uint64_t step_cost = 1 + kPhraseCost * plan.phrases.size();
  posting_cursor& lead = ws.cursors[ws.order[0]];
  std::vector<hit>& heap = out.hits;
  const size_t k = plan.k;
  // every match is scored (by relevance, without phrases: else only the phrase's matches are),
  // and a shard this large holds its rows and norms mostly outside the core's caches
  const bool prefetch =
      !ws.ev.by_date && plan.phrases.empty() && shard.docs_.size() >= kPrefetchMinDocs;
  // The workspace's vectors and flags, read once: the cursors' writes through ws might
  // otherwise have them read again at every doc.
  const lineup l{ws.cursors.data(),  ws.order.data(), ws.order.size(), ws.sets.data(),
                 ws.row_slot.data(), ws.rows_on,      ws.probe};
  while (true) {
    if constexpr (Bounded) {
      if (budget == 0) {
        budget_left = 0;
        return false;
      }
      // a phrase check reads the words' positions: it counts as kPhraseCost units of work
      budget = budget > step_cost ? budget - step_cost : 0;
    }
    if (prefetch) {
      shard.prefetch_lead(ws, false);
    }
    bool end = false;
    if (!(l.rows_on ? align<true>(shard, l, lead, end) : align<false>(shard, l, lead, end))) {
      if (end) {
        budget_left = budget;
        return true;
      }
      continue;
    }
    const uint32_t doc = lead.doc;
    if (shard.accepts(plan, ws, doc)) {
      ++out.total;
      if (ws.keep_docs && ws.kept_docs.size() < kListedDocsMost) {
        ws.kept_docs.push_back(doc);
      }
      hit h{};
      h.doc = doc;
      bool keep = true;
      if (ws.ev.by_date) {
        h.key = static_cast<double>(shard.time_[doc]);
      } else {
        const bool full = heap.size() == k;
        // (a row term's cursor stays where it was: its block bounds nothing here)
        keep = !(full && !l.rows_on && shard.blocks_below(plan, ws, heap.front().key)) &&
               shard.score(plan, ws, doc, full, full ? heap.front().key : 0.0, h.key);
      }
      if (keep) {
        offer(heap, k, h);
      }
    }
    if (!lead.next()) {
      budget_left = budget;
      return true;
    }
  }
}

// ---- phrases: whether a phrase occurs in the cursors' current doc, and how often ----

namespace {
// Two-word phrase: whether the cursors' docs hold the first word at some p and the second at
// p + 1.
bool adjacent_pair(const posting_cursor& a, const posting_cursor& b) noexcept {
  return adjacent_positions(a.pos, a.pos_len, b.pos, b.pos_len);
}
}  // namespace

namespace {
// A phrase of three words or more, read from its words' position lists (varint deltas) in
// step, without decoding them into memory: a start p counts when word j is at p + j for every
// j. Each list moves only forward, to the start the others require (a leapfrog over positions),
// so a list is read once; with `first_only` the walk stops at the first start. Counts the
// starts in the title (positions below tl) and in the text; false when there is none. The
// same term twice in a phrase is two readers of one list.
// A phrase has at most 256 words: a query is at most max_query_chars (500) code points, and a
// fleet plan at most kMaxFleetTerms (256) phrase term indices (fleet_json.cc).
constexpr uint32_t stream_phrase_max = 256;
bool phrase_starts(const posting_cursor* const* words, uint32_t n, bool first_only, uint32_t tl,
                   uint32_t& in_title, uint32_t& in_text) noexcept {
  struct reader {
    const uint8_t* p;
    const uint8_t* end;
    uint32_t v;
  };
  reader r[stream_phrase_max];
  for (uint32_t j = 0; j < n; ++j) {
    r[j].p = words[j]->pos;
    r[j].end = r[j].p + words[j]->pos_len;
    if (r[j].p >= r[j].end) {
      return false;
    }
    r[j].v = read_varint(r[j].p);
  }
  bool found = false;
  uint32_t start = r[0].v;
  uint32_t j = 1;  // words 0..j-1 are at start + 0..j-1
  while (true) {
    if (j == n) {
      found = true;
      (start < tl ? in_title : in_text) += 1;
      if (first_only || r[0].p >= r[0].end) {
        return true;
      }
      r[0].v += read_varint(r[0].p);
      start = r[0].v;
      j = 1;
      continue;
    }
    while (r[j].v < start + j) {
      if (r[j].p >= r[j].end) {
        return found;
      }
      r[j].v += read_varint(r[j].p);
    }
    if (r[j].v == start + j) {
      ++j;
      continue;
    }
    start = r[j].v - j;  // the earliest start word j allows; word 0 catches up
    while (r[0].v < start) {
      if (r[0].p >= r[0].end) {
        return found;
      }
      r[0].v += read_varint(r[0].p);
    }
    start = r[0].v;
    j = 1;
  }
}

// phrase_starts() of phrase `ph` over the cursors.
bool phrase_starts(const query_plan& plan, const phrase_span& ph, const shard_workspace& ws,
                   bool first_only, uint32_t tl, uint32_t& in_title, uint32_t& in_text) noexcept {
  TOLLGATE_ASSERT(ph.count <= stream_phrase_max);
  if (ph.count > stream_phrase_max) {
    return false;  // no parser makes one (above)
  }
  const posting_cursor* words[stream_phrase_max];
  for (uint32_t j = 0; j < ph.count; ++j) {
    words[j] = &ws.cursors[plan.phrase_terms[ph.first + j]];
  }
  return phrase_starts(words, ph.count, first_only, tl, in_title, in_text);
}
}  // namespace

bool local_shard::phrase_match(const query_plan& plan, shard_workspace& ws) const {
  for (const phrase_span& ph : plan.phrases) {
    if (ph.count < 2) {
      continue;
    }
    if (ph.count == 2) {
      if (!adjacent_pair(ws.cursors[plan.phrase_terms[ph.first]],
                         ws.cursors[plan.phrase_terms[ph.first + 1]])) {
        return false;
      }
      continue;
    }
    uint32_t in_title = 0, in_text = 0;
    if (!phrase_starts(plan, ph, ws, true, 0, in_title, in_text)) {
      return false;
    }
  }
  return true;
}

namespace {
// Two-word phrase, every occurrence: like adjacent_pair, without stopping at the first; counts
// the occurrences starting in the title (positions below tl) and in the text.
void adjacent_pairs(const posting_cursor& a, const posting_cursor& b, uint32_t tl,
                    uint32_t& in_title, uint32_t& in_text) noexcept {
  const uint8_t* pa = a.pos;
  const uint8_t* ea = pa + a.pos_len;
  const uint8_t* pb = b.pos;
  const uint8_t* eb = pb + b.pos_len;
  if (pa >= ea || pb >= eb) {
    return;
  }
  uint32_t va = read_varint(pa) + 1;  // the position the second word must take
  uint32_t vb = read_varint(pb);
  while (true) {
    if (va == vb) {
      (va - 1 < tl ? in_title : in_text) += 1;
      if (pa >= ea || pb >= eb) {
        return;
      }
      va += read_varint(pa);
      vb += read_varint(pb);
    } else if (va < vb) {
      if (pa >= ea) {
        return;
      }
      va += read_varint(pa);
    } else {
      if (pb >= eb) {
        return;
      }
      vb += read_varint(pb);
    }
  }
}
}  // namespace

double local_shard::phrase_freq(const query_plan& plan, const phrase_span& ph, shard_workspace& ws,
                                uint32_t doc) const {
  const uint32_t tl = title_len_[doc];  // title positions are 0..tl-1, text ones from tl + 1
  uint32_t in_title = 0, in_text = 0;
  if (ph.count == 2) {
    adjacent_pairs(ws.cursors[plan.phrase_terms[ph.first]],
                   ws.cursors[plan.phrase_terms[ph.first + 1]], tl, in_title, in_text);
    return kTitleWeight * in_title + kTextWeight * in_text;
  }
  phrase_starts(plan, ph, ws, false, tl, in_title, in_text);
  return kTitleWeight * in_title + kTextWeight * in_text;
}

}  // namespace tollgate::search
