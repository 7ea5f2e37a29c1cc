// phrase_totals: a phrase's matches in a shard, counted once. A query's document frequencies
// (doc_freqs_slice) count each phrase's matches with a sub-search of the phrase alone; the count,
// and the docs when there are at most kListedDocsMost, stay in the workspace
// (shard_workspace::phrase_totals, the latest few of any shard), so that the search of the same
// phrase that follows needs no counting phase (known_total: the pruned walk knows its total) or
// scores just the docs kept (listed_step, eval_state::listed). A two-word phrase of frequent
// words is counted by the table of adjacent pairs instead (pair_table::pair_total).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {
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

void phrase_totals::remember_phrase_total(const local_shard& shard, const query_plan& plan,
                                          const phrase_span& ph, shard_workspace& ws,
                                          uint64_t total) {
  known_phrase_total& e = ws.phrase_totals[ws.phrase_totals_next];
  if (ph.count < 2 || !phrase_words(plan, ph, e)) {
    e.shard = 0;
    return;
  }
  e.shard = shard.serial_;
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
bool phrase_totals::known_total(const local_shard& shard, const query_plan& plan,
                                shard_workspace& ws, uint64_t& total) {
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
  return plan.idf.size() == plan.terms.size() && lookup_phrase_total(shard, plan, ph, ws, total);
}

// Whether the plan matches exactly the docs of its one phrase (as known_total) and the walk that
// counted them in this shard kept them (ws.listed_docs then holds them).
bool phrase_totals::listed_phrase(const local_shard& shard, const query_plan& plan,
                                  shard_workspace& ws) {
  uint64_t total = 0;
  if (!known_total(shard, plan, ws, total)) {
    return false;
  }
  known_phrase_total want;
  if (!phrase_words(plan, plan.phrases[0], want)) {
    return false;
  }
  for (const known_phrase_total& e : ws.phrase_totals) {
    if (e.listed && e.shard == shard.serial_ && e.len == want.len &&
        std::memcmp(e.words.data(), want.words.data(), e.len) == 0) {
      ws.listed_docs.assign(e.docs.begin(), e.docs.end());
      return true;
    }
  }
  return false;
}

// The listed phrase's docs (listed_phrase), each with every cursor sought onto it, scored (or
// keyed by time) and offered; the total is their number.
bool phrase_totals::listed_step(const local_shard& shard, const query_plan& plan,
                                shard_workspace& ws, shard_answer& out, uint64_t& budget_left) {
  uint64_t budget = budget_left;
  const uint64_t step_cost = 1 + kPhraseCost * plan.phrases.size();
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
      h.key = static_cast<double>(shard.time_[doc]);
    } else if (!shard.score(plan, ws, doc, full, full ? out.hits.front().key : 0.0, h.key)) {
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

bool phrase_totals::lookup_phrase_total(const local_shard& shard, const query_plan& plan,
                                        const phrase_span& ph, const shard_workspace& ws,
                                        uint64_t& total) {
  if (pair_table::pair_total(shard, plan, ph, total)) {
    return true;
  }
  known_phrase_total want;
  if (ph.count < 2 || !phrase_words(plan, ph, want)) {
    return false;
  }
  for (const known_phrase_total& e : ws.phrase_totals) {
    if (e.shard == shard.serial_ && e.len == want.len &&
        std::memcmp(e.words.data(), want.words.data(), e.len) == 0) {
      total = e.total;
      return true;
    }
  }
  return false;
}

}  // namespace tollgate::search
