// local_shard::finalize: per-doc length norms, per-block score and time maxima, champion lists.
#include "search/shard_impl.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace tollgate::search {

using namespace detail;

namespace {
// A doc's BM25 length norm and time as finalize_terms reads them (see finalize).
struct packed_doc_keys {
  static constexpr uint32_t max_len = 1u << 16;
  std::vector<uint64_t> key;  // time - base_time << 32 | length
  std::vector<double> norm;   // per length: length_norm_of(length, avgdl_)
  int64_t base_time = 0;
  double norm_of(uint64_t k) const noexcept { return norm[static_cast<uint32_t>(k)]; }
  int64_t time(uint64_t k) const noexcept {
    return static_cast<int64_t>(static_cast<uint64_t>(base_time) + (k >> 32));
  }
};
struct wide_doc_keys {
  struct entry {
    double norm;
    int64_t time;
  };
  std::vector<entry> key;
  static double norm_of(const entry& e) noexcept { return e.norm; }
  static int64_t time(const entry& e) noexcept { return e.time; }
};
}  // namespace

void local_shard::finalize(const shard_stats& global) {
  avgdl_ = average_length(global);
  len_norm_.resize(docs_.size());
  for (size_t d = 0; d < docs_.size(); ++d) {
    len_norm_[d] = length_norm_of(title_len_[d] + text_len_[d], avgdl_);
  }
  // Per block: the largest term_part and the latest time of its docs, for skipping blocks and
  // scoring that cannot reach the current top k. Per frequent term: its champion lists. The
  // backend finalizes shards one after another, so a large shard splits its terms over threads
  // (ranges of about equal postings; each writes its own blocks and its own champion lists,
  // which are then joined in term order).
  block_max_.assign(skips_.size(), 0.0f);
  block_max_time_.assign(skips_.size(), std::numeric_limits<int64_t>::min());
  champ_at_.assign(terms_.size(), UINT32_MAX);
  uint64_t postings = 0;
  for (const term_info& t : terms_) {
    postings += t.df;
  }
  const uint32_t threads =
      postings < parallel_finalize_postings ? 1 : std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  std::vector<champ_lists> parts(threads);
  std::vector<size_t> cut(threads + 1, terms_.size());
  cut[0] = 0;
  {
    uint64_t seen = 0;
    uint32_t next_cut = 1;
    for (size_t ti = 0; ti < terms_.size() && next_cut < threads; ++ti) {
      seen += terms_[ti].df;
      if (seen * threads >= postings * next_cut) {
        cut[next_cut++] = ti + 1;
      }
    }
  }
  // Every posting reads its doc's norm and time, a cache miss for most (a rare term's docs are
  // anywhere). Both come from one 8-byte key per doc when they fit (the length, whose norm is
  // looked up in a small table of the same values len_norm_ holds, and the time less the
  // shard's earliest), else from one 16-byte pair: one miss per posting instead of two.
  auto run = [&](const auto& keys) {
    if (threads == 1) {
      finalize_terms(0, terms_.size(), keys, parts[0]);
    } else {
      std::vector<std::thread> pool;
      for (uint32_t i = 0; i < threads; ++i) {
        pool.emplace_back(
            [this, &parts, &cut, &keys, i] { finalize_terms(cut[i], cut[i + 1], keys, parts[i]); });
      }
      for (std::thread& th : pool) {
        th.join();
      }
    }
  };
  uint32_t max_len = 0;
  int64_t min_time = std::numeric_limits<int64_t>::max(), max_time = min_time;
  for (size_t d = 0; d < docs_.size(); ++d) {
    max_len = std::max(max_len, title_len_[d] + text_len_[d]);
    min_time = std::min(min_time, time_[d]);
    max_time = d == 0 ? time_[d] : std::max(max_time, time_[d]);
  }
  if (!docs_.empty() && max_len <= packed_doc_keys::max_len &&
      static_cast<uint64_t>(max_time) - static_cast<uint64_t>(min_time) <= UINT32_MAX) {
    packed_doc_keys keys;
    keys.norm.resize(max_len + 1);
    for (uint32_t l = 0; l <= max_len; ++l) {
      keys.norm[l] = length_norm_of(l, avgdl_);
    }
    keys.base_time = min_time;
    keys.key.resize(docs_.size());
    for (size_t d = 0; d < docs_.size(); ++d) {
      keys.key[d] = (static_cast<uint64_t>(time_[d]) - static_cast<uint64_t>(min_time)) << 32 |
                    (title_len_[d] + text_len_[d]);
    }
    run(keys);
  } else {
    wide_doc_keys keys;
    keys.key.resize(docs_.size());
    for (size_t d = 0; d < docs_.size(); ++d) {
      keys.key[d] = {len_norm_[d], time_[d]};
    }
    run(keys);
  }
  champ_part_.clear();
  champ_doc_.clear();
  champ_date_.clear();
  for (uint32_t i = 0; i < threads; ++i) {
    const uint32_t base = static_cast<uint32_t>(champ_doc_.size());
    for (size_t ti = cut[i]; ti < cut[i + 1]; ++ti) {
      if (champ_at_[ti] != UINT32_MAX) {
        champ_at_[ti] += base;
      }
    }
    champ_part_.insert(champ_part_.end(), parts[i].part.begin(), parts[i].part.end());
    champ_doc_.insert(champ_doc_.end(), parts[i].doc.begin(), parts[i].doc.end());
    champ_date_.insert(champ_date_.end(), parts[i].date.begin(), parts[i].date.end());
  }
}

// Block maxima and champion lists of terms [from, to); champ_at_ gets offsets into `out`.
template <class DocKeys>
void local_shard::finalize_terms(size_t from, size_t to, const DocKeys& keys, champ_lists& out) {
  struct scored {
    double key;
    uint32_t doc;
  };
  // heap order: the worst entry at the front (higher key first, then lower doc is better)
  auto worse = [](const scored& a, const scored& b) {
    return a.key > b.key || (a.key == b.key && a.doc < b.doc);
  };
  std::vector<scored> rel, date;
  rel.reserve(champ_len);
  date.reserve(champ_len);
  auto offer_champ = [&worse](std::vector<scored>& h, const scored& x) {
    if (h.size() < champ_len) {
      h.push_back(x);
      std::push_heap(h.begin(), h.end(), worse);
    } else if (worse(x, h.front())) {
      std::pop_heap(h.begin(), h.end(), worse);
      h.back() = x;
      std::push_heap(h.begin(), h.end(), worse);
    }
  };
  // A second reader walks the doc streams of terms [from, to) (laid out one after another in
  // term order) ahead_docs postings ahead of the cursors and prefetches its docs' keys.
  constexpr uint32_t ahead_docs = 16;
  const uint8_t* const stream = doc_stream_.get();
  auto stream_end_of = [this](size_t ti) {
    return ti + 1 < terms_.size() ? terms_[ti + 1].doc_off : doc_stream_bytes_ - 16;
  };
  size_t ahead_term = from;
  const uint8_t* ahead = from < to ? stream + terms_[from].doc_off : nullptr;
  const uint8_t* ahead_end = from < to ? stream + stream_end_of(from) : nullptr;
  uint32_t ahead_doc = 0;
  auto step_ahead = [&] {
    while (ahead == ahead_end) {
      if (++ahead_term >= to) {
        return;
      }
      ahead_end = stream + stream_end_of(ahead_term);
      ahead_doc = 0;
    }
    uint32_t word;
    std::memcpy(&word, ahead, 4);  // the stream ends in 16 bytes of padding
    if ((word & 0x80808080u) == 0) {
      ahead_doc += word & 0xFF;
      ahead += 4;
    } else {
      ahead_doc += read_varint(ahead);
      read_varint(ahead);
      read_varint(ahead);
      read_varint(ahead);
    }
    __builtin_prefetch(keys.key.data() + ahead_doc);
  };
  for (uint32_t i = 0; i < ahead_docs && ahead_term < to; ++i) {
    step_ahead();
  }
  for (size_t ti = from; ti < to; ++ti) {
    const term_info& t = terms_[ti];
    const bool champs = t.df > champ_min_df;
    rel.clear();
    date.clear();
    posting_cursor c = cursor_for(t);
    while (c.next()) {
      if (ahead_term < to) {
        step_ahead();
      }
      const auto k = keys.key[c.doc];
      const int64_t doc_time = keys.time(k);
      double v = term_part(c.tf_title, c.tf_text, keys.norm_of(k));
      float& m = block_max_[t.skip_off + c.block];
      float f = static_cast<float>(v);
      if (f < v) {  // round up: v >= 0, so the next float is the next bit pattern
        f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) + 1);
      }
      m = std::max(m, f);
      int64_t& mt = block_max_time_[t.skip_off + c.block];
      mt = std::max(mt, doc_time);
      if (champs) {
        // docs arrive in ascending order, so an equal key never displaces an entry
        if (rel.size() < champ_len || v > rel.front().key) {
          offer_champ(rel, {v, c.doc});
        }
        const double tm = static_cast<double>(doc_time);
        if (date.size() < champ_len || tm > date.front().key) {
          offer_champ(date, {tm, c.doc});
        }
      }
    }
    if (champs) {
      std::sort_heap(rel.begin(), rel.end(), worse);
      std::sort_heap(date.begin(), date.end(), worse);
      champ_at_[ti] = static_cast<uint32_t>(out.doc.size());
      for (const scored& x : rel) {
        out.part.push_back(x.key);
        out.doc.push_back(x.doc);
      }
      for (const scored& x : date) {
        out.date.push_back(x.doc);
      }
    }
  }
}

posting_cursor local_shard::cursor_for(const term_info& t) const noexcept {
  posting_cursor c{};
  c.doc_base = doc_stream_.get() + t.doc_off;
  c.p = c.doc_base;
  c.pos_base = pos_stream_.get() + t.pos_off;
  c.pos = c.pos_base;
  c.skips = skips_.data() + t.skip_off;
  c.df = t.df;
  c.nblocks = (t.df + block_docs - 1) / block_docs;
  c.left = std::min(block_docs, t.df);
  c.skip_off = t.skip_off;
  return c;
}

}  // namespace tollgate::search
