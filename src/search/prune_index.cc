// prune_index_builder: derives a shard's prune_index (prune_index.h) at finalize(), on a build
// and on a load alike: the dense terms' bitsets and the docs by time and by tag from the postings
// and the stored stories, the length classes, and the impact terms' lists and rows (or, when an
// index file held them for the same averages, those: local_shard::loaded_impact_).
#include "search/prune_index.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

prune_index prune_index_builder::compute_prune_index(const local_shard& shard) {
  prune_index px;
  if (shard.loaded_prune_.valid) {
    const local_shard::saved_prune& lp = shard.loaded_prune_;  // in the mapping
    px.words = lp.words;
    px.min_len = lp.min_len;
    px.time_step = lp.time_step;
    px.set_of_term = lp.set_of_term;
    px.bits = lp.bits;
    px.by_time = lp.by_time;
    px.time_cum = lp.time_cum;
    px.tag_at = lp.tag_at;
    px.tag_docs = lp.tag_docs;
    px.len_class = lp.len_class;
  } else {
    compute_tables(shard, px);
  }
  add_impact(shard, px);
  return px;
}

void prune_index_builder::compute_tables(const local_shard& shard, prune_index& px) {
  prune_index::tables& own = px.own;
  const uint64_t n = shard.docs_.size();
  px.words = static_cast<uint32_t>((n + 63) / 64);
  own.set_of_term.assign(shard.terms_.size(), UINT32_MAX);
  px.min_len = UINT32_MAX;
  for (size_t d = 0; d < n; ++d) {
    px.min_len = std::min(px.min_len, shard.title_len_[d] + shard.text_len_[d]);
  }
  // a class's norm bounds its docs' norms from below within a few percent
  own.len_class.resize(n);
  for (size_t d = 0; d < n; ++d) {
    const uint32_t len = shard.title_len_[d] + shard.text_len_[d];
    own.len_class[d] =
        static_cast<uint8_t>(std::upper_bound(len_class_min.begin(), len_class_min.end(), len) -
                             len_class_min.begin() - 1);
  }
  uint32_t sets = 0;
  for (size_t ti = 0; ti < shard.terms_.size(); ++ti) {
    const uint64_t df = shard.terms_[ti].df;
    if (df >= kBlockDocs && df * dense_divisor >= n) {
      own.set_of_term[ti] = sets++;
    }
  }
  own.bits.assign(size_t{sets} * px.words, 0);
  for (size_t ti = 0; ti < shard.terms_.size(); ++ti) {
    if (own.set_of_term[ti] == UINT32_MAX) {
      continue;
    }
    uint64_t* set = own.bits.data() + size_t{own.set_of_term[ti]} * px.words;
    posting_cursor c = shard.cursor_for(shard.terms_[ti]);
    while (c.next()) {
      set[c.doc >> 6] |= uint64_t{1} << (c.doc & 63);
    }
  }
  // Time ranks: descending rank is the date order of hits (latest first, ties by lower doc).
  own.by_time.resize(n);
  for (uint32_t d = 0; d < n; ++d) {
    own.by_time[d] = d;
  }
  std::sort(own.by_time.begin(), own.by_time.end(), [&shard](uint32_t a, uint32_t b) {
    return shard.time_[a] < shard.time_[b] || (shard.time_[a] == shard.time_[b] && a > b);
  });
  px.time_step = time_step_of(n);
  const uint64_t cums = time_cums_of(n, px.time_step);
  own.time_cum.assign(cums * px.words, 0);
  for (uint64_t j = 1; j <= cums; ++j) {
    uint64_t* cum = own.time_cum.data() + (j - 1) * px.words;
    if (j > 1) {
      std::memcpy(cum, cum - px.words, px.words * sizeof(uint64_t));
    }
    for (uint64_t r = (j - 1) * px.time_step; r < j * px.time_step; ++r) {
      cum[own.by_time[r] >> 6] |= uint64_t{1} << (own.by_time[r] & 63);
    }
  }
  // Tags' docs: counted, then placed (docs ascend, so each tag's list does).
  own.tag_at.assign(shard.tag_names_.size() + 1, 0);
  for (uint32_t t : shard.doc_tags_) {  // each doc's tags, in doc order
    ++own.tag_at[t + 1];
  }
  for (size_t t = 1; t < own.tag_at.size(); ++t) {
    own.tag_at[t] += own.tag_at[t - 1];
  }
  own.tag_docs.resize(own.tag_at.back());
  std::vector<uint32_t> fill(own.tag_at.begin(), own.tag_at.end() - 1);
  for (uint32_t d = 0; d < n; ++d) {
    for (uint32_t t : shard.tags_of(d)) {
      own.tag_docs[fill[t]++] = d;
    }
  }
  px.view_own();
}

void prune_index_builder::add_impact(const local_shard& shard, prune_index& px) {
  if (shard.loaded_impact_.valid) {
    const local_shard::saved_impact& li = shard.loaded_impact_;
    px.impact_terms.assign(li.terms.begin(), li.terms.end());
    px.impact_at.assign(li.at.begin(), li.at.end());
    px.impact_doc = li.doc;  // in the mapping, like the rows
    px.impact_part = li.part;
    px.impact_rows = li.rows;  // in the mapping
  } else {
    compute_impact(shard, px);
  }
}
// The impact terms (prune_index): the commonest dense terms, each walked once; a term keeps
// the docs whose term_part at the shard's own norms (len_norm_) may still be among its
// impact_depth best (above the part of the depth-th best so far, which only rises).
void prune_index_builder::compute_impact(const local_shard& shard, prune_index& px) {
  const uint64_t n = shard.docs_.size();
  std::vector<uint32_t>& chosen = px.impact_terms;
  for (uint32_t ti = 0; ti < shard.terms_.size(); ++ti) {
    if (px.set_of_term[ti] != UINT32_MAX && uint64_t{shard.terms_[ti].df} * impact_divisor >= n) {
      chosen.push_back(ti);
    }
  }
  std::sort(chosen.begin(), chosen.end(), [&shard](uint32_t a, uint32_t b) {
    return shard.terms_[a].df > shard.terms_[b].df ||
           (shard.terms_[a].df == shard.terms_[b].df && a < b);
  });
  chosen.resize(std::min<size_t>({chosen.size(), impact_max_terms, kImpactTermsMost}));
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
    posting_cursor c = shard.cursor_for(shard.terms_[chosen[i]]);
    while (c.next()) {
      col[c.doc] = static_cast<uint8_t>(std::min<uint32_t>(3 * c.tf_title + c.tf_text, 255));
      const double part = term_part(c.tf_title, c.tf_text, shard.len_norm_[c.doc]);
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
    row.len = static_cast<uint16_t>(std::min(shard.title_len_[d] + shard.text_len_[d], 65535u));
    for (size_t i = 0; i < m; ++i) {
      row.wf[i] = column[i * n + d];
    }
  }
  size_t entries = 0;
  for (const std::vector<entry>& b : best) {
    entries += std::min(b.size(), depth);
  }
  px.impact_doc_store.reserve(entries);
  px.impact_part_store.reserve(entries);
  for (size_t i = 0; i < m; ++i) {
    std::vector<entry>& b = best[i];
    const size_t keep = std::min(b.size(), depth);
    std::partial_sort(b.begin(), b.begin() + static_cast<ptrdiff_t>(keep), b.end(), better_part);
    for (size_t j = 0; j < keep; ++j) {
      px.impact_doc_store.push_back(b[j].second);
      px.impact_part_store.push_back(round_up(b[j].first));
    }
    px.impact_at.push_back(static_cast<uint32_t>(px.impact_doc_store.size()));
  }
  px.impact_doc = px.impact_doc_store;
  px.impact_part = px.impact_part_store;
}

}  // namespace tollgate::search
