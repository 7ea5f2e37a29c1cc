// local_shard query evaluation: document frequencies, champion lists, single-term block
// skipping, the leapfrog intersection with block-max bounds.
#include "search/shard_impl.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace tollgate::search {

using namespace detail;

// ---- queries ----

const term_info* local_shard::lookup_term(std::string_view t) const noexcept {
  int64_t r = probe_term(t, term_hash(t));
  return r >= 0 ? &terms_[static_cast<size_t>(r)] : nullptr;
}

bool local_shard::add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const {
  for (size_t i = 0; i < plan.terms.size(); ++i) {
    if (const term_info* t = lookup_term(plan.terms[i])) {
      df[i] += t->df;
    }
  }
  // A phrase's stories: the phrase searched on its own (its distinct terms, the phrase, no
  // filters; k = 1 by date, the cheapest ranking), whose total is exact.
  for (size_t p = 0; p < plan.phrases.size(); ++p) {
    const phrase_span& ph = plan.phrases[p];
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
    const phrase_span whole{0, ph.count};
    query_plan sub{};
    sub.terms = ws.sub_terms;
    sub.phrases = std::span<const phrase_span>(&whole, 1);
    sub.phrase_terms = ws.sub_phrase_terms;
    sub.since = std::numeric_limits<int64_t>::min();
    sub.until = std::numeric_limits<int64_t>::max();
    sub.sort = sort_order::date;
    sub.k = 1;
    search(sub, ws, ws.sub_answer);
    df[plan.terms.size() + p] += ws.sub_answer.total;
  }
  return true;
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

// One term, no filters: every posting matches, so total = df, and whole blocks whose maximum
// (score or time) is below the k-th best so far are skipped without decoding.
void local_shard::single_term(posting_cursor& c, bool by_date, double idf, double avgdl,
                              double bound_scale, size_t k, shard_answer& out) const {
  out.total = c.df;
  std::vector<hit>& heap = out.hits;
  while (true) {
    // c is on the first doc of block c.block
    if (heap.size() == k) {
      const size_t blk = c.skip_off + c.block;
      double ub = by_date ? static_cast<double>(block_max_time_[blk])
                          : idf * (block_max_[blk] * bound_scale);
      if (ub < heap.front().key) {
        c.skip_block();
        if (!c.next()) {
          return;
        }
        continue;
      }
    }
    const uint32_t block = c.block;
    do {
      hit h{};
      h.doc = c.doc;
      h.key = by_date ? static_cast<double>(time_[c.doc])
                      : idf * term_part(c.tf_title, c.tf_text, length_norm(c.doc, avgdl));
      offer(heap, k, h);
      if (!c.next()) {
        return;
      }
    } while (c.block == block);
  }
}

// One term, no filters, k < champ_len: the answer comes from the term's champion list. Every
// doc outside the list has a key <= the list's last key (term_part and time order the list, and
// multiplying by idf > 0 keeps the order), so when the k-th key is strictly above the last one,
// every doc that ranks at or above the k-th is in the list; those are sorted by the hit order.
// Otherwise (ties reaching the end of the list) returns false and the postings are walked.
bool local_shard::single_term_champions(uint32_t term, bool by_date, double idf, size_t k,
                                        shard_answer& out) const {
  const uint32_t at = champ_at_[term];
  if (at == UINT32_MAX || k >= champ_len || (!by_date && !(idf > 0))) {
    return false;
  }
  auto key_of = [&](size_t i) {
    return by_date ? static_cast<double>(time_[champ_date_[at + i]]) : idf * champ_part_[at + i];
  };
  const double kth = key_of(k - 1);
  if (!(kth > key_of(champ_len - 1))) {
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
    h.doc = by_date ? champ_date_[at + i] : champ_doc_[at + i];
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
    h.id = id(h.doc);
  }
  out.total = terms_[term].df;
  return true;
}

bool local_shard::search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const {
  out.total = 0;
  out.hits.clear();
  const size_t nt = plan.terms.size();
  if (nt == 0 || plan.k == 0) {
    return true;
  }
  ws.cursors.clear();
  ws.order.clear();
  ws.term_ids.clear();
  for (size_t i = 0; i < nt; ++i) {
    const term_info* t = lookup_term(plan.terms[i]);
    if (t == nullptr) {
      return true;  // a term absent from this shard: nothing here matches
    }
    ws.cursors.push_back(cursor_for(*t));
    ws.order.push_back(static_cast<uint32_t>(i));
    ws.term_ids.push_back(static_cast<uint32_t>(t - terms_.data()));
  }
  ws.tag_ids.clear();
  for (std::string_view tag : plan.tags) {
    int64_t id = lookup_tag(tag);
    if (id < 0) {
      return true;
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
      return true;
    }
  }
  const bool by_date = plan.sort == sort_order::date;
  const size_t k = plan.k;
  std::vector<hit>& heap = out.hits;
  // Under another corpus average (a fleet's), norms are computed per doc and the block maxima
  // (made with avgdl_) bound scores only after scaling: every norm shrinks by at most
  // avgdl_ / avgdl, and F (k1+1) / (F + r kn) <= F (k1+1) / (F + kn) / r for r <= 1.
  const bool own_avgdl = plan.avgdl == 0 || plan.avgdl == avgdl_;
  const double avgdl = own_avgdl ? avgdl_ : plan.avgdl;
  const double bound_scale = own_avgdl || avgdl < avgdl_ ? 1.0 : avgdl / avgdl_ * (1 + 1e-9);
  if (nt == 1 && plan.phrases.empty() && ws.tag_ids.empty() &&
      plan.since == std::numeric_limits<int64_t>::min() &&
      plan.until == std::numeric_limits<int64_t>::max()) {
    if (own_avgdl && single_term_champions(ws.term_ids[0], by_date, plan.idf[0], k, out)) {
      return true;
    }
    single_term(ws.cursors[0], by_date, plan.idf[0], avgdl, bound_scale, k, out);
    finish(out);
    return true;
  }
  posting_cursor& lead = ws.cursors[ws.order[0]];
  uint32_t target = lead.doc;
  while (true) {
    // leapfrog: bring every cursor to the same doc
    bool aligned = true;
    for (size_t oi = 1; oi < nt; ++oi) {
      posting_cursor& c = ws.cursors[ws.order[oi]];
      if (!c.seek(target)) {
        goto done;
      }
      if (c.doc > target) {
        if (!lead.seek(c.doc)) {
          goto done;
        }
        target = lead.doc;
        aligned = false;
        break;
      }
    }
    if (!aligned) {
      continue;
    }
    {
      const uint32_t doc = target;
      const int64_t t = time_[doc];
      bool ok = t >= plan.since && t <= plan.until;
      if (ok && !ws.tag_ids.empty()) {
        const doc_rec& r = docs_[doc];
        const uint32_t* dt = doc_tags_.data() + r.tags_off;
        for (uint32_t want : ws.tag_ids) {
          if (std::find(dt, dt + r.tag_count, want) == dt + r.tag_count) {
            ok = false;
            break;
          }
        }
      }
      if (ok && !plan.phrases.empty()) {
        ok = phrase_match(plan, ws);  // stops at each phrase's first occurrence
      }
      if (ok) {
        ++out.total;
        hit h{};
        h.doc = doc;
        if (by_date) {
          h.key = static_cast<double>(t);
        } else {
          if (heap.size() == k) {
            // skip scoring when the block maxima cannot reach the k-th best score; a phrase's
            // frequency is at most each of its terms', so its part is bounded by theirs
            double ub = 0;
            for (size_t i = 0; i < nt; ++i) {
              const posting_cursor& c = ws.cursors[i];
              ub += plan.idf[i] * (block_max_[c.skip_off + c.block] * bound_scale);
            }
            for (size_t p = 0; p < plan.phrases.size(); ++p) {
              const phrase_span& ph = plan.phrases[p];
              float m = std::numeric_limits<float>::max();
              for (uint32_t j = 0; j < ph.count; ++j) {
                const posting_cursor& c = ws.cursors[plan.phrase_terms[ph.first + j]];
                m = std::min(m, block_max_[c.skip_off + c.block]);
              }
              ub += phrase_weight(plan, p) * (m * bound_scale);
            }
            if (ub < heap.front().key) {
              goto next_doc;
            }
          }
          const double kn = length_norm(doc, avgdl);
          double s = 0;
          for (size_t i = 0; i < nt; ++i) {
            if (plan.idf[i] != 0) {  // a phrase-only term adds nothing of its own
              const posting_cursor& c = ws.cursors[i];
              s += plan.idf[i] * term_part(c.tf_title, c.tf_text, kn);
            }
          }
          if (!plan.phrases.empty()) {
            if (heap.size() == k) {
              // this doc's bound before counting phrase occurrences: a phrase occurs in a field
              // at most as often as each of its words does there
              double ub = s;
              for (size_t p = 0; p < plan.phrases.size(); ++p) {
                const phrase_span& ph = plan.phrases[p];
                double f = std::numeric_limits<double>::max();
                for (uint32_t j = 0; j < ph.count; ++j) {
                  const posting_cursor& c = ws.cursors[plan.phrase_terms[ph.first + j]];
                  f = std::min(f, w_title * c.tf_title + w_text * c.tf_text);
                }
                ub += phrase_weight(plan, p) * unit_part(f, kn);
              }
              if (ub < heap.front().key) {
                goto next_doc;
              }
            }
            for (size_t p = 0; p < plan.phrases.size(); ++p) {
              // every occurrence, counted only for the docs that get scored
              s += phrase_weight(plan, p) *
                   unit_part(phrase_freq(plan, plan.phrases[p], ws, doc), kn);
            }
          }
          h.key = s;
        }
        offer(heap, k, h);
      }
    }
  next_doc:
    if (!lead.next()) {
      break;
    }
    target = lead.doc;
  }
done:
  finish(out);
  return true;
}


}  // namespace tollgate::search
