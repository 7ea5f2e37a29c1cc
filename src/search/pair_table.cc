// pair_table: the table of adjacent pairs of frequent words (built by index_build.cc, see
// local_shard.h's pair_* knobs) as queries use it: a two-word phrase's document count read from
// the table (pair_total), and a plan's phrases rewritten into the words' pair terms, whose
// postings the evaluators walk as any term's (pair_term_plan, followed by begin_search).
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "search/evaluators.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

bool pair_table::pair_total(const local_shard& shard, const query_plan& plan, const phrase_span& ph,
                            uint64_t& total) {
  if (ph.count != 2 || shard.pair_terms_.empty()) {
    return false;
  }
  const term_info* a = shard.lookup_term(plan.terms[plan.phrase_terms[ph.first]]);
  const term_info* b = shard.lookup_term(plan.terms[plan.phrase_terms[ph.first + 1]]);
  if (a == nullptr || b == nullptr) {
    return false;
  }
  const uint32_t ra = shard.pair_rank_[static_cast<size_t>(a - shard.terms_.data())];
  const uint32_t rb = shard.pair_rank_[static_cast<size_t>(b - shard.terms_.data())];
  if (ra == UINT16_MAX || rb == UINT16_MAX) {
    return false;
  }
  total = shard.pair_docs_[size_t{ra} * shard.pair_terms_.size() + rb];
  return true;
}

bool pair_table::pair_of(const local_shard& shard, std::string_view a, std::string_view b,
                         shard_workspace& ws, std::string_view& name) {
  const term_info* ta = shard.lookup_term(a);
  const term_info* tb = shard.lookup_term(b);
  const size_t at = ws.pair_name.size();
  // the names are views into pair_name: it must never reallocate
  if (ta == nullptr || tb == nullptr || at + a.size() + b.size() + 1 > ws.pair_name.capacity() ||
      shard.pair_rank_[static_cast<size_t>(ta - shard.terms_.data())] >=
          shard.pair_posting_ranks_ ||
      shard.pair_rank_[static_cast<size_t>(tb - shard.terms_.data())] >=
          shard.pair_posting_ranks_) {
    return false;
  }
  ws.pair_name.append(a);
  ws.pair_name.push_back('\0');
  ws.pair_name.append(b);
  name = std::string_view(ws.pair_name).substr(at);
  return true;
}

bool pair_table::pair_term_plan(const local_shard& shard, const query_plan& plan,
                                shard_workspace& ws, bool& absent) {
  if (shard.pair_posting_ranks_ == 0 || plan.phrases.empty()) {
    return false;
  }
  ws.pair_name.clear();
  ws.pair_terms.clear();
  ws.pair_idf.clear();
  absent = false;
  // Every phrase two words that index their pairs: each phrase is its pair term, and a word
  // that only occurs inside them (weight 0) is implied by its pair term and dropped.
  ws.pair_words.assign(plan.terms.size(), 0);
  for (const phrase_span& ph : plan.phrases) {
    ws.pair_words[plan.phrase_terms[ph.first]] = 1;
    ws.pair_words[plan.phrase_terms[ph.first + ph.count - 1]] = 1;
  }
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    const double idf = plan.idf.empty() ? 0.0 : plan.idf[i];
    if (idf != 0 || ws.pair_words[i] == 0) {
      ws.pair_terms.push_back(plan.terms[i]);
      ws.pair_idf.push_back(idf);
    }
  }
  bool replace = true;
  for (size_t p = 0; p < plan.phrases.size() && replace; ++p) {
    const phrase_span& ph = plan.phrases[p];
    std::string_view name;
    replace = ph.count == 2 &&
              pair_of(shard, plan.terms[plan.phrase_terms[ph.first]],
                      plan.terms[plan.phrase_terms[ph.first + 1]], ws, name) &&
              std::find(ws.pair_terms.begin(), ws.pair_terms.end(), name) == ws.pair_terms.end();
    if (replace) {
      absent = absent || shard.lookup_term(name) == nullptr;
      ws.pair_terms.push_back(name);
      ws.pair_idf.push_back(phrase_weight(plan, p));
    }
  }
  query_plan& q = ws.pair_plan;
  q = plan;
  if (replace) {
    q.phrases = {};
    q.phrase_terms = {};
    q.phrase_idf = {};
  } else {
    // Otherwise the phrases stay (their scores sum in phrase order) and their adjacent pairs of
    // such words join as terms of weight 0: a doc holding a phrase holds each of its pairs in
    // the same field, so the matches are the same and the rarest pair leads the intersection.
    ws.pair_name.clear();
    ws.pair_terms.assign(plan.terms.begin(), plan.terms.end());
    ws.pair_idf.assign(plan.terms.size(), 0.0);
    std::copy(plan.idf.begin(), plan.idf.end(), ws.pair_idf.begin());
    for (const phrase_span& ph : plan.phrases) {
      for (uint32_t j = 0; j + 1 < ph.count; ++j) {
        std::string_view name;
        if (pair_of(shard, plan.terms[plan.phrase_terms[ph.first + j]],
                    plan.terms[plan.phrase_terms[ph.first + j + 1]], ws, name) &&
            std::find(ws.pair_terms.begin(), ws.pair_terms.end(), name) == ws.pair_terms.end()) {
          absent = absent || shard.lookup_term(name) == nullptr;
          ws.pair_terms.push_back(name);
          ws.pair_idf.push_back(0.0);
        }
      }
    }
    if (ws.pair_terms.size() == plan.terms.size()) {
      return false;  // no pair to lead
    }
  }
  q.terms = ws.pair_terms;
  q.idf = ws.pair_idf;
  return true;
}

}  // namespace tollgate::search
