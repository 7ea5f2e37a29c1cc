// local_shard::reference_search: the slow, obvious evaluator the tests hold search() to.
#include <algorithm>
#include <string>
#include <vector>

#include "search/shard_impl.h"
#include "tollgate/common/assert.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {

using namespace detail;

// One function on purpose: the reference is read top to bottom against the plan's definition
// (match, score, order), with no helper shared with search() that could carry a bug into both.
void local_shard::reference_search(const query_plan& plan, shard_answer& out) const {
  out.total = 0;
  out.hits.clear();
  if (plan.terms.empty() || plan.k == 0) {
    return;
  }
  std::vector<hit> all;
  std::vector<std::string> title, text;
  auto tokenize = [](std::string_view s, std::vector<std::string>& toks) {
    toks.clear();
    token_stream ts(s);
    std::string_view tok;
    while (ts.next(tok)) {
      toks.emplace_back(tok);
    }
  };
  auto count = [](const std::vector<std::string>& toks, std::string_view t) {
    return static_cast<uint32_t>(std::count(toks.begin(), toks.end(), t));
  };
  auto phrase_count = [&plan](const std::vector<std::string>& toks, const phrase_span& ph) {
    uint32_t n = 0;
    for (size_t p = 0; p + ph.count <= toks.size(); ++p) {
      bool all_match = true;
      for (uint32_t j = 0; j < ph.count && all_match; ++j) {
        all_match = toks[p + j] == plan.terms[plan.phrase_terms[ph.first + j]];
      }
      n += all_match ? 1 : 0;
    }
    return n;
  };
  const double avgdl = plan.avgdl == 0 ? avgdl_ : plan.avgdl;
  for (uint32_t doc = 0; doc < docs_.size(); ++doc) {
    if (time_[doc] < plan.since || time_[doc] > plan.until) {
      continue;
    }
    bool ok = true;
    for (std::string_view tag : plan.tags) {
      bool found = false;
      for (uint32_t t : tags_of(doc)) {
        found = found || tag_names_[t] == tag;
      }
      ok = ok && found;
    }
    if (!ok) {
      continue;
    }
    field_views f(docs_[doc]);
    tokenize(f.title, title);
    const auto body = local_shard::text(doc);
    TOLLGATE_CHECK(body.has_value());  // the slow oracle of tests: a damaged index is a bug
    tokenize(*body, text);
    // D straight from the token lists, the norm from the formula (not len_norm_)
    const double d = static_cast<double>(title.size() + text.size());
    const double kn = kK1 * (1 - kB + kB * d / avgdl);
    double score = 0;
    for (size_t i = 0; i < plan.terms.size() && ok; ++i) {
      const uint32_t tt = count(title, plan.terms[i]);
      const uint32_t tx = count(text, plan.terms[i]);
      ok = tt + tx > 0;
      score += plan.idf[i] * ((3.0 * tt + 1.0 * tx) * (kK1 + 1.0) / ((3.0 * tt + 1.0 * tx) + kn));
    }
    for (size_t p = 0; p < plan.phrases.size() && ok; ++p) {
      const phrase_span& ph = plan.phrases[p];
      const uint32_t pt = phrase_count(title, ph);
      const uint32_t px = phrase_count(text, ph);
      ok = ph.count < 2 || pt + px > 0;
      const double f = 3.0 * pt + 1.0 * px;
      score += (plan.phrase_idf.empty() ? 1.0 : plan.phrase_idf[p]) * (f * (kK1 + 1.0) / (f + kn));
    }
    if (!ok) {
      continue;
    }
    hit h{};
    h.key = plan.sort == sort_order::date ? static_cast<double>(time_[doc]) : score;
    h.doc = doc;
    h.id = id(doc);
    all.push_back(h);
  }
  std::sort(all.begin(), all.end(), better);
  out.total = all.size();
  all.resize(std::min<size_t>(all.size(), plan.k));
  out.hits.assign(all.begin(), all.end());
}

}  // namespace tollgate::search
