// local_shard's pruned evaluation of queries without phrases: the top k and the total are found
// apart, so that neither walks more postings than it needs.
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

#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

prune_index local_shard::compute_prune_index() const {
  prune_index px;
  const uint64_t n = docs_.size();
  px.words = static_cast<uint32_t>((n + 63) / 64);
  px.set_of_term.assign(terms_.size(), UINT32_MAX);
  px.min_len = UINT32_MAX;
  for (size_t d = 0; d < n; ++d) {
    px.min_len = std::min(px.min_len, title_len_[d] + text_len_[d]);
  }
  // a class's norm bounds its docs' norms from below within a few percent
  px.len_class.resize(n);
  for (size_t d = 0; d < n; ++d) {
    const uint32_t len = title_len_[d] + text_len_[d];
    px.len_class[d] =
        static_cast<uint8_t>(std::upper_bound(len_class_min.begin(), len_class_min.end(), len) -
                             len_class_min.begin() - 1);
  }
  uint32_t sets = 0;
  for (size_t ti = 0; ti < terms_.size(); ++ti) {
    const uint64_t df = terms_[ti].df;
    if (df >= block_docs && df * dense_divisor >= n) {
      px.set_of_term[ti] = sets++;
    }
  }
  px.bits.assign(size_t{sets} * px.words, 0);
  for (size_t ti = 0; ti < terms_.size(); ++ti) {
    if (px.set_of_term[ti] == UINT32_MAX) {
      continue;
    }
    uint64_t* set = px.bits.data() + size_t{px.set_of_term[ti]} * px.words;
    posting_cursor c = cursor_for(terms_[ti]);
    while (c.next()) {
      set[c.doc >> 6] |= uint64_t{1} << (c.doc & 63);
    }
  }
  // Time ranks: descending rank is the date order of hits (latest first, ties by lower doc).
  px.by_time.resize(n);
  for (uint32_t d = 0; d < n; ++d) {
    px.by_time[d] = d;
  }
  std::sort(px.by_time.begin(), px.by_time.end(), [this](uint32_t a, uint32_t b) {
    return time_[a] < time_[b] || (time_[a] == time_[b] && a > b);
  });
  px.time_step =
      static_cast<uint32_t>(std::max<uint64_t>(1, (n + time_buckets - 1) / time_buckets));
  const uint64_t cums = n == 0 ? 0 : (n - 1) / px.time_step;  // j * time_step < n for j <= cums
  px.time_cum.assign(cums * px.words, 0);
  for (uint64_t j = 1; j <= cums; ++j) {
    uint64_t* cum = px.time_cum.data() + (j - 1) * px.words;
    if (j > 1) {
      std::memcpy(cum, cum - px.words, px.words * sizeof(uint64_t));
    }
    for (uint64_t r = (j - 1) * px.time_step; r < j * px.time_step; ++r) {
      cum[px.by_time[r] >> 6] |= uint64_t{1} << (px.by_time[r] & 63);
    }
  }
  // Tags' docs: counted, then placed (docs ascend, so each tag's list does).
  px.tag_at.assign(tag_names_.size() + 1, 0);
  for (const doc_rec& r : docs_) {
    for (uint32_t i = 0; i < r.tag_count; ++i) {
      ++px.tag_at[doc_tags_[r.tags_off + i] + 1];
    }
  }
  for (size_t t = 1; t < px.tag_at.size(); ++t) {
    px.tag_at[t] += px.tag_at[t - 1];
  }
  px.tag_docs.resize(px.tag_at.back());
  std::vector<uint32_t> fill(px.tag_at.begin(), px.tag_at.end() - 1);
  for (uint32_t d = 0; d < n; ++d) {
    const doc_rec& r = docs_[d];
    for (uint32_t i = 0; i < r.tag_count; ++i) {
      px.tag_docs[fill[doc_tags_[r.tags_off + i]]++] = d;
    }
  }
  if (loaded_impact_.valid) {
    const saved_impact& li = loaded_impact_;
    px.impact_terms.assign(li.terms.begin(), li.terms.end());
    px.impact_at.assign(li.at.begin(), li.at.end());
    px.impact_doc.assign(li.doc.begin(), li.doc.end());
    px.impact_part.assign(li.part.begin(), li.part.end());
    px.impact_rows = li.rows;  // in the mapping
  } else {
    compute_impact(px);
  }
  return px;
}

// The impact terms (prune_index): the commonest dense terms, each walked once; a term keeps
// the docs whose term_part at the shard's own norms (len_norm_) may still be among its
// impact_depth best (above the part of the depth-th best so far, which only rises).
void local_shard::compute_impact(prune_index& px) const {
  const uint64_t n = docs_.size();
  std::vector<uint32_t>& chosen = px.impact_terms;
  for (uint32_t ti = 0; ti < terms_.size(); ++ti) {
    if (px.set_of_term[ti] != UINT32_MAX && uint64_t{terms_[ti].df} * impact_divisor >= n) {
      chosen.push_back(ti);
    }
  }
  std::sort(chosen.begin(), chosen.end(), [this](uint32_t a, uint32_t b) {
    return terms_[a].df > terms_[b].df || (terms_[a].df == terms_[b].df && a < b);
  });
  chosen.resize(std::min<size_t>({chosen.size(), impact_max_terms, impact_terms_most}));
  px.impact_at.assign(1, 0);
  if (chosen.empty()) {
    return;
  }
  const size_t m = chosen.size();
  const size_t depth = std::max<size_t>(impact_depth, 1);
  using entry = std::pair<double, uint32_t>;
  const auto better_part = [](const entry& a, const entry& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  // term by term (each term's frequencies into its own column), then the columns into rows
  std::vector<uint8_t> column(m * n, 0);
  std::vector<std::vector<entry>> best(m);
  for (size_t i = 0; i < m; ++i) {
    uint8_t* col = column.data() + i * n;
    std::vector<entry>& b = best[i];
    b.reserve(2 * depth);
    double floor = -1.0;  // a part at most this is not among the best
    posting_cursor c = cursor_for(terms_[chosen[i]]);
    while (c.next()) {
      col[c.doc] = static_cast<uint8_t>(std::min<uint32_t>(3 * c.tf_title + c.tf_text, 255));
      const double part = term_part(c.tf_title, c.tf_text, len_norm_[c.doc]);
      if (part > floor) {  // docs ascend: an equal part of a later doc ranks below
        b.emplace_back(part, c.doc);
        if (b.size() == 2 * depth) {
          std::nth_element(b.begin(), b.begin() + static_cast<ptrdiff_t>(depth - 1), b.end(),
                           better_part);
          b.resize(depth);
          floor = b.back().first;
        }
      }
    }
  }
  px.impact_row_store.resize(n);
  px.impact_rows = px.impact_row_store;
  for (size_t d = 0; d < n; ++d) {
    impact_row& row = px.impact_row_store[d];
    row = impact_row{};
    row.len = static_cast<uint16_t>(std::min(title_len_[d] + text_len_[d], 65535u));
    for (size_t i = 0; i < m; ++i) {
      row.wf[i] = column[i * n + d];
    }
  }
  size_t entries = 0;
  for (const std::vector<entry>& b : best) {
    entries += std::min(b.size(), depth);
  }
  px.impact_doc.reserve(entries);  // exactly: a mapped shard's copies are exact too
  px.impact_part.reserve(entries);
  for (size_t i = 0; i < m; ++i) {
    std::vector<entry>& b = best[i];
    const size_t keep = std::min(b.size(), depth);
    std::partial_sort(b.begin(), b.begin() + static_cast<ptrdiff_t>(keep), b.end(), better_part);
    for (size_t j = 0; j < keep; ++j) {
      px.impact_doc.push_back(b[j].second);
      px.impact_part.push_back(round_up(b[j].first));
    }
    px.impact_at.push_back(static_cast<uint32_t>(px.impact_doc.size()));
  }
}

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

bool local_shard::impact_top(const query_plan& plan, shard_workspace& ws, shard_answer& out) const {
  eval_state& ev = ws.ev;
  const size_t m = ws.cursors.size();
  if (m < 2 || m > impact_max_query_terms || plan.k > impact_max_k || ev.by_date ||
      !plan.phrases.empty() || ev.filter_on || ev.time_filtered || !ws.tag_ids.empty() ||
      ev.avgdl != avgdl_ || ev.bound_scale != 1 || !ev.all_dense) {
    return false;
  }
  ws.impact_pos.resize(m);
  for (size_t i = 0; i < m; ++i) {
    const uint32_t imp = prune_.impact_of(ws.term_ids[i]);
    if (imp == UINT32_MAX) {
      return false;
    }
    ws.impact_pos[i] = imp;
  }
  std::vector<hit>& heap = out.hits;
  ws.seeds.clear();
  ws.ev.seed_at = 0;
  ws.seen.resize(prune_.words, 0);
  ws.seen_docs.clear();
  // per term: its list [at, end) and the next entry
  uint32_t next[impact_terms_most], end[impact_terms_most];
  if (m > impact_terms_most) {
    return false;
  }
  for (size_t i = 0; i < m; ++i) {
    const uint32_t imp = ws.impact_pos[i];
    next[i] = prune_.impact_at[imp];
    end[i] = prune_.impact_at[imp + 1];
  }
  bool done = false;
  while (true) {
    for (size_t i = 0; i < m; ++i) {
      if (next[i] == end[i]) {
        continue;
      }
      if (next[i] + impact_prefetch < end[i]) {
        __builtin_prefetch(prune_.impact_rows.data() +
                           prune_.impact_doc[next[i] + impact_prefetch]);
      }
      const uint32_t doc = prune_.impact_doc[next[i]++];
      uint64_t& word = ws.seen[doc >> 6];
      const uint64_t bit = uint64_t{1} << (doc & 63);
      if ((word & bit) != 0) {
        continue;
      }
      word |= bit;
      ws.seen_docs.push_back(doc);
      const impact_row& row = prune_.impact_rows[doc];
      bool in = true;
      for (size_t j = 0; j < m && in; ++j) {
        in = row.wf[ws.impact_pos[j]] != 0;
      }
      if (!in) {
        continue;
      }
      // len_norm_[doc], without its cache miss when the row holds the length
      const double kn = row.len < 65535 ? length_norm_of(row.len, avgdl_) : len_norm_[doc];
      hit h{};
      h.doc = doc;
      for (size_t j = 0; j < m; ++j) {
        if (plan.idf[j] == 0) {
          continue;  // as score(): a phrase-only term adds nothing
        }
        uint32_t f = row.wf[ws.impact_pos[j]];
        if (f == 255) {  // 255 or more: the postings hold it
          posting_cursor c = cursor_for(terms_[ws.term_ids[j]]);
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
        ub += plan.idf[j] * static_cast<double>(prune_.impact_part[next[j]]);
      } else if (end[j] - prune_.impact_at[ws.impact_pos[j]] == terms_[ws.term_ids[j]].df) {
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

// Puts every cursor back on its term's first doc.
void local_shard::reopen_cursors(shard_workspace& ws) const {
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    ws.cursors[i] = cursor_for(terms_[ws.term_ids[i]]);
    ws.cursors[i].next();  // not empty: open_cursors checked
  }
  ws.ev.pf_block = UINT32_MAX;
}

void local_shard::begin_pruned(const query_plan& plan, shard_workspace& ws) const {
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
    share *= static_cast<double>(ws.cursors[ws.order[oi]].df) / static_cast<double>(docs_.size());
  }
  ev.one_pass = plan.phrases.empty() && share < one_pass_share;
  ev.impact = eval_state::impact_none;
  ev.time_filtered = plan.since != std::numeric_limits<int64_t>::min() ||
                     plan.until != std::numeric_limits<int64_t>::max();
  ev.kn_min = length_norm_of(prune_.min_len, ev.avgdl);
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
void local_shard::seed_heap(const query_plan& plan, shard_workspace& ws, shard_answer& out) const {
  ws.seeds.clear();
  ws.ev.seed_at = 0;
  for (uint32_t term : ws.term_ids) {
    const uint32_t at = champ_at_[term];
    if (at != UINT32_MAX) {
      const uint32_t* docs = (ws.ev.by_date ? champ_date_.data() : champ_doc_.data()) + at;
      ws.seeds.insert(ws.seeds.end(), docs, docs + champ_len);
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
      __builtin_prefetch(&prune_.impact_rows[doc]);
    } else {
      __builtin_prefetch(&len_norm_[doc]);
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
    if (on && accepts(plan, ws, doc)) {
      hit h{};
      h.doc = doc;
      if (ws.ev.by_date) {
        h.key = static_cast<double>(time_[doc]);
      } else {
        score(plan, ws, doc, false, 0.0, h.key);
      }
      offer(out.hits, plan.k, h);
    }
  }
  reopen_cursors(ws);
}

bool local_shard::pruned_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                              uint64_t& budget) const {
  eval_state& ev = ws.ev;
  if (ev.one_pass && !ev.total_known) {
    return lead_walk<true>(plan, ws, out, budget);
  }
  if (!ev.counting) {
    if (!top_step(plan, ws, out, budget)) {
      return false;
    }
    if (ev.total_known || out.hits.size() < plan.k) {
      // the heap never filled: it holds every match
      out.total = ev.total_known ? ev.known_total : out.hits.size();
      return true;
    }
    ev.counting = true;
    if (!ev.all_dense) {
      reopen_cursors(ws);
    }
  }
  return ev.all_dense ? count_dense_step(plan, ws, out, budget)
                      : lead_walk<false>(plan, ws, out, budget);
}

namespace {
// The phrases' part of a bound, from each word's bound before idf in ws.term_ub: a phrase occurs
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

// The phrase's words in order, each followed by a NUL; false when they do not fit.
bool phrase_words(const query_plan& plan, const phrase_span& ph, known_phrase_total& e) noexcept {
  e.len = 0;
  for (uint32_t j = 0; j < ph.count; ++j) {
    const std::string_view w = plan.terms[plan.phrase_terms[ph.first + j]];
    if (e.len + w.size() + 1 > e.words.size()) {
      return false;
    }
    std::memcpy(e.words.data() + e.len, w.data(), w.size());
    e.words[e.len + w.size()] = '\0';
    e.len += static_cast<uint32_t>(w.size() + 1);
  }
  return true;
}
}  // namespace

void local_shard::remember_phrase_total(const query_plan& plan, const phrase_span& ph,
                                        shard_workspace& ws, uint64_t total) const {
  known_phrase_total& e = ws.phrase_totals[ws.phrase_totals_next];
  if (ph.count < 2 || !phrase_words(plan, ph, e)) {
    e.shard = 0;
    return;
  }
  e.shard = serial_;
  e.total = total;
  // the walk that counted them kept every one: the search that follows scores just these
  e.listed = ws.kept_docs.size() == total;
  if (e.listed) {
    e.docs.swap(ws.kept_docs);  // (kept_docs is cleared before its next walk)
  }
  ws.phrase_totals_next = (ws.phrase_totals_next + 1) % ws.phrase_totals.size();
}

// Whether the plan (weighted: not a phrase's own sub-search) matches exactly the docs of its one
// phrase (no filters, every term in the phrase) and this shard's count of them is remembered;
// sets total.
bool local_shard::known_total(const query_plan& plan, shard_workspace& ws, uint64_t& total) const {
  if (plan.phrases.size() != 1 || plan.phrases[0].count < 2 || !plan.tags.empty() ||
      plan.since != std::numeric_limits<int64_t>::min() ||
      plan.until != std::numeric_limits<int64_t>::max()) {
    return false;
  }
  const phrase_span& ph = plan.phrases[0];
  for (uint32_t i = 0; i < plan.terms.size(); ++i) {
    const uint32_t* pt = plan.phrase_terms.data() + ph.first;
    if (std::find(pt, pt + ph.count, i) == pt + ph.count) {
      return false;
    }
  }
  return plan.idf.size() == plan.terms.size() && lookup_phrase_total(plan, ph, ws, total);
}

// Whether the plan matches exactly the docs of its one phrase (as known_total) and the walk that
// counted them in this shard kept them (ws.listed_docs then holds them).
bool local_shard::listed_phrase(const query_plan& plan, shard_workspace& ws) const {
  uint64_t total = 0;
  if (!known_total(plan, ws, total)) {
    return false;
  }
  known_phrase_total want;
  if (!phrase_words(plan, plan.phrases[0], want)) {
    return false;
  }
  for (const known_phrase_total& e : ws.phrase_totals) {
    if (e.listed && e.shard == serial_ && e.len == want.len &&
        std::memcmp(e.words.data(), want.words.data(), e.len) == 0) {
      ws.listed_docs.assign(e.docs.begin(), e.docs.end());
      return true;
    }
  }
  return false;
}

// The listed phrase's docs (listed_phrase), each with every cursor sought onto it, scored (or
// keyed by time) and offered; the total is their number.
bool local_shard::listed_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                              uint64_t& budget_left) const {
  uint64_t budget = budget_left;
  const uint64_t step_cost = 1 + phrase_cost * plan.phrases.size();
  const std::vector<uint32_t>& docs = ws.listed_docs;
  uint32_t i = ws.ev.word;
  for (; i < docs.size(); ++i) {
    if (budget == 0) {
      break;
    }
    budget -= std::min(budget, step_cost);
    const uint32_t doc = docs[i];
    for (posting_cursor& c : ws.cursors) {
      c.seek(doc);  // the doc holds the phrase, so each of its words
    }
    hit h{};
    h.doc = doc;
    const bool full = out.hits.size() == plan.k;
    if (ws.ev.by_date) {
      h.key = static_cast<double>(time_[doc]);
    } else if (!score(plan, ws, doc, full, full ? out.hits.front().key : 0.0, h.key)) {
      continue;
    }
    offer(out.hits, plan.k, h);
  }
  ws.ev.word = i;
  budget_left = budget;
  if (i < docs.size()) {
    return false;
  }
  out.total = docs.size();
  return true;
}

bool local_shard::lookup_phrase_total(const query_plan& plan, const phrase_span& ph,
                                      const shard_workspace& ws, uint64_t& total) const {
  if (pair_total(plan, ph, total)) {
    return true;
  }
  known_phrase_total want;
  if (ph.count < 2 || !phrase_words(plan, ph, want)) {
    return false;
  }
  for (const known_phrase_total& e : ws.phrase_totals) {
    if (e.shard == serial_ && e.len == want.len &&
        std::memcmp(e.words.data(), want.words.data(), e.len) == 0) {
      total = e.total;
      return true;
    }
  }
  return false;
}

// Bounds for the lead's current block: per other term, idf x its largest block maximum over
// the blocks that overlap the lead block's doc range (ws.term_ub), and their sum with the
// lead's own (ev.block_ub; by date, the block's latest time). False when another term has no
// doc left at or after the block's first: nothing more can match.
bool local_shard::lead_block_bound(const query_plan& plan, shard_workspace& ws) const {
  eval_state& ev = ws.ev;
  const uint32_t li = ws.order[0];
  const posting_cursor& lead = ws.cursors[li];
  ev.bound_block = lead.block;
  const uint32_t first = lead.block == 0 ? 0 : lead.skips[lead.block - 1].last_doc + 1;
  const uint32_t last = lead.skips[lead.block].last_doc;
  double ub = 0;
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    float m = block_max_[c.skip_off + c.block];
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
        m = std::max(m, block_max_[c.skip_off + j]);
        if (c.skips[j].last_doc >= last) {
          break;
        }
      }
    }
    ws.term_ub[i] = m * ev.bound_scale;
    ub += plan.idf[i] * ws.term_ub[i];
  }
  ub += phrase_bounds(plan, ws);
  ev.block_ub = ev.by_date ? static_cast<double>(block_max_time_[lead.skip_off + lead.block]) : ub;
  return true;
}

// Phase 1: the top k (see the file comment). False: out of budget, not finished.
bool local_shard::top_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                           uint64_t& budget_left) const {
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
    if (ev.bound_block != lead.block && !lead_block_bound(plan, ws)) {
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
      while (!(reached = reaches_f_min(plan, ws, heap.front().key, lead))) {
        ++tested;
        end = !lead.next();
        if (end || lead.block != block || tested >= budget) {
          break;
        }
      }
      budget -= std::min(budget, tested);
      ev.below_f += tested;
      if (reached) {
        top_doc(plan, ws, heap, end);
      }
    } else {
      if (heap.size() == plan.k && !ev.by_date && docs_.size() >= prefetch_min_docs) {
        prefetch_lead(ws, true);  // the bounds read each doc's length class and norm
      }
      top_doc(plan, ws, heap, end);
    }
    if (end) {
      break;
    }
  }
  budget_left = budget;
  return true;
}

// Per cursor: its term's largest block maximum (scaled as the bounds are).
void local_shard::fill_term_max(shard_workspace& ws) const {
  ws.term_max.assign(ws.cursors.size(), 0);
  for (size_t i = 0; i < ws.cursors.size(); ++i) {
    const posting_cursor& c = ws.cursors[i];
    float m = 0;
    for (uint32_t j = 0; j < c.nblocks; ++j) {
      m = std::max(m, block_max_[c.skip_off + j]);
    }
    ws.term_max[i] = m * ws.ev.bound_scale;
  }
}

// Whether the lead's frequency (3 x title tf + text tf) reaches the threshold of its doc's
// length class (lead_f_min); a doc below it cannot reach the k-th key kth. Thresholds made for a
// lower k-th key are still sound, only looser: they are remade when the k-th key has risen
// and a few thousand docs have been tested since.
[[gnu::always_inline]] inline bool local_shard::reaches_f_min(const query_plan& plan,
                                                              shard_workspace& ws, double kth,
                                                              const posting_cursor& lead) const {
  if (kth != ws.f_kth && (ws.f_kth == 0 || ++ws.f_age >= 2048)) {
    if (ws.term_max.empty()) {
      fill_term_max(ws);
    }
    ++ws.f_gen_now;
    ws.f_kth = kth;
    ws.f_age = 0;
  }
  const uint8_t cls = prune_.len_class[lead.doc];
  if (ws.f_gen[cls] != ws.f_gen_now) {
    ws.f_gen[cls] = ws.f_gen_now;
    ws.f_min[cls] = lead_f_min(plan, ws, ws.ev.kn_class[cls], ws.f_kth);
  }
  static_assert(w_title == 3.0 && w_text == 1.0);
  return uint64_t{3} * lead.tf_title + lead.tf_text >= ws.f_min[cls];
}

// A bound on the score of the lead's current doc: the lead's part at norm kn (at least the
// doc's own norm) plus, per other term, idf x the maximum of its block holding the doc, added
// in the score's order. `end`: another term has no doc left at or after this one.
double local_shard::doc_bound(const query_plan& plan, shard_workspace& ws, double kn,
                              bool& end) const {
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
    ws.term_ub[i] = block_max_[c.skip_off + j] * ws.ev.bound_scale;
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
uint32_t local_shard::lead_f_min(const query_plan& plan, shard_workspace& ws, double kn,
                                 double kth) const {
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
void local_shard::top_doc(const query_plan& plan, shard_workspace& ws, std::vector<hit>& heap,
                          bool& end) const {
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
    maybe = time_[doc] >= plan.since && time_[doc] <= plan.until;
  }
  if (maybe && full && ws.ev.by_date) {
    maybe = !(static_cast<double>(time_[doc]) < kth);
  } else if (maybe && full) {
    // first with the shard's smallest norm (no load; a bound on the lead's part, which
    // decreases with the norm); then, once the sparse cursors hold the doc too (a seek reads
    // on along their postings where a doc's norm is a cache miss), with its length class's
    // norm (one byte) and with its own
    maybe = !(doc_bound(plan, ws, ws.ev.kn_min, end) < kth) && !end && seek_sparse(ws, doc, end) &&
            !(doc_bound(plan, ws, ws.ev.kn_class[prune_.len_class[doc]], end) < kth) &&
            !(doc_bound(plan, ws, length_norm(doc, ws.ev.avgdl), end) < kth);
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
    if ((at == ws.seeds.size() || ws.seeds[at] != doc) && accepts(plan, ws, doc)) {
      if (ws.ev.by_date) {
        h.key = static_cast<double>(time_[doc]);
      } else {
        keep = score(plan, ws, doc, full, kth, h.key);
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
[[gnu::always_inline]] inline bool local_shard::seek_sparse(shard_workspace& ws, uint32_t doc,
                                                            bool& end) const {
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
[[gnu::always_inline]] inline bool local_shard::lead_matches(const query_plan& plan,
                                                             shard_workspace& ws,
                                                             bool& more) const {
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
  if (in && (ws.ev.filter_on || accepts(plan, ws, doc))) {
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
bool local_shard::lead_walk(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                            uint64_t& budget_left) const {
  uint64_t budget = budget_left;
  posting_cursor& lead = ws.cursors[ws.order[0]];
  bool more = lead.doc != UINT32_MAX;
  if (others_dense(plan, ws)) {
    // A block of the lead at a time: its docs tested without a branch, the matches gathered
    // (with the lead's frequencies), then offered: a match's branch would be mispredicted as
    // often as matches are neither rare nor common.
    uint64_t total = out.total;
    std::array<uint32_t, block_docs> docs, tf_title, tf_text;
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
          offer_match(plan, ws, out.hits, docs[j]);
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
      if (lead_matches(plan, ws, more)) {
        ++out.total;
        if (Offer) {
          offer_match(plan, ws, out.hits, lead.doc);
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
bool local_shard::others_dense(const query_plan& plan, const shard_workspace& ws) const noexcept {
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
void local_shard::offer_match(const query_plan& plan, shard_workspace& ws, std::vector<hit>& heap,
                              uint32_t doc) const {
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
    h.key = static_cast<double>(time_[doc]);
    if (full && h.key < heap.front().key) {
      return;
    }
  } else {
    const double kth = full ? heap.front().key : 0.0;
    if (full && (!reaches_f_min(plan, ws, kth, ws.cursors[ws.order[0]]) ||
                 match_bound(plan, ws, doc, ev.kn_class[prune_.len_class[doc]]) < kth ||
                 match_bound(plan, ws, doc, length_norm(doc, ev.avgdl)) < kth)) {
      return;
    }
    for (size_t i = 0; i < ws.cursors.size(); ++i) {
      if (ws.sets[i] != nullptr && !(ws.rows_on && ws.row_slot[i] != UINT32_MAX)) {
        ws.cursors[i].seek(doc);  // in its bitset: the cursor lands on doc
      }
    }
    score(plan, ws, doc, full, kth, h.key);
  }
  offer(heap, plan.k, h);
}

// A bound on the key of a match of the one-pass walk at norm kn (at least its own): the parts
// of the terms whose cursors are on it (the lead, the sparse terms) at kn, the dense terms'
// maxima of their blocks holding it; added in the score's order, each factor at least the
// score's (term_part does not increase with the norm).
double local_shard::match_bound(const query_plan& plan, shard_workspace& ws, uint32_t doc,
                                double kn) const {
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
    ub += plan.idf[i] * (block_max_[c.skip_off + j] * ws.ev.bound_scale);
  }
  return ub;
}

// Phase 2, every term with a bitset: their AND, popcounted, or its docs checked against the
// filters.
TOLLGATE_POPCNT_CLONES
bool local_shard::count_dense_step(const query_plan& plan, shard_workspace& ws, shard_answer& out,
                                   uint64_t& budget_left) const {
  uint64_t budget = budget_left;
  // the filter bitset (no phrases) is exactly the time window and the tags
  const bool filter_on = ws.ev.filter_on;
  const bool filtered =
      !filter_on && (!ws.tag_ids.empty() || plan.since != std::numeric_limits<int64_t>::min() ||
                     plan.until != std::numeric_limits<int64_t>::max());
  const uint32_t words = prune_.words;
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
      total += accepts(plan, ws, doc) ? 1 : 0;
    }
  }
  out.total = total;
  ws.ev.word = w;
  budget_left = budget;
  return w == words;
}

}  // namespace tollgate::search
