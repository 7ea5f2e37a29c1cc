// local_shard::finalize: per-doc length norms, per-block score and time maxima, champion lists.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;

namespace {
// A doc's BM25 length norm and time as finalize_terms reads them (see finalize).

struct packed_doc_keys {
  static constexpr uint32_t max_len = 1u << 16;
  // Most postings have a small weighted frequency (3 x title + text occurrences): their
  // term_part, and its rounding up, come from a table by (length, frequency), the same values
  // term_part computes (unit_part depends on the frequencies only through that sum), without
  // the division and conversions per posting. Lengths up to table_max_len.
  static constexpr uint32_t table_freqs = 8;
  static constexpr uint32_t table_max_len = 4096;
  std::vector<uint64_t> key;   // time - base_time << 32 | length
  std::vector<double> norm;    // per length: length_norm_of(length, avgdl_)
  std::vector<double> part;    // [length * table_freqs + frequency]: unit_part(frequency, norm)
  std::vector<float> part_up;  // ... rounded up
  int64_t base_time = 0;
  void make_table(uint32_t lens) {
    lens = std::min(lens, table_max_len);
    part.resize(size_t{lens} * table_freqs);
    part_up.resize(part.size());
    for (uint32_t l = 0; l < lens; ++l) {
      for (uint32_t w = 0; w < table_freqs; ++w) {
        // w = 3 x title + text for some title and text counts: term_part's own double
        const double v = unit_part(static_cast<double>(w), norm[l]);
        part[l * table_freqs + w] = v;
        part_up[l * table_freqs + w] = round_up(v);
      }
    }
  }
  void part_of(uint32_t tf_title, uint32_t tf_text, uint64_t k, double& v, float& f) const {
    const uint32_t len = static_cast<uint32_t>(k);
    const uint64_t w = uint64_t{3} * tf_title + tf_text;
    if (w < table_freqs && size_t{len} * table_freqs < part.size()) {
      const size_t i = size_t{len} * table_freqs + w;
      v = part[i];
      f = part_up[i];
      return;
    }
    v = term_part(tf_title, tf_text, norm[len]);
    f = round_up(v);
  }
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
  static int64_t time(const entry& e) noexcept { return e.time; }
  static void part_of(uint32_t tf_title, uint32_t tf_text, const entry& e, double& v, float& f) {
    v = term_part(tf_title, tf_text, e.norm);
    f = round_up(v);
  }
};

// Splits terms into `threads` ranges of about equal postings: range i is [cut[i], cut[i + 1]).
std::vector<size_t> term_cuts(const std::vector<term_info>& terms, uint64_t postings,
                              uint32_t threads) {
  std::vector<size_t> cut(threads + 1, terms.size());
  cut[0] = 0;
  uint64_t seen = 0;
  uint32_t next_cut = 1;
  for (size_t ti = 0; ti < terms.size() && next_cut < threads; ++ti) {
    seen += terms[ti].df;
    if (seen * threads >= postings * next_cut) {
      cut[next_cut++] = ti + 1;
    }
  }
  return cut;
}
}  // namespace

void local_shard::finalize(const shard_stats& global) {
  if (finalized_avgdl_ == average_length(global)) {
    return;  // finalized early, by the build (loader.cc's seal_all), with this same average
  }
  finalized_avgdl_ = average_length(global);
  if (loaded_avgdl_ == finalized_avgdl_) {
    // Read from an index file, made with this same average (shard_file.cc). The pruning
    // bitsets are not in the file: they are derived from the mapped postings here.
    prune_ = prune_index_builder::compute_prune_index(*this);
    return;
  }
  avgdl_ = finalized_avgdl_;
  loaded_impact_ = {};  // made under the file's average: computed again below
  assign_huge(len_norm_, docs_.size(), 0.0);
  for (size_t d = 0; d < docs_.size(); ++d) {
    len_norm_[d] = length_norm_of(title_len_[d] + text_len_[d], avgdl_);
  }
  // Per block: the largest term_part and the latest time of its docs, for skipping blocks and
  // scoring that cannot reach the current top k. Per frequent term: its champion lists. A large
  // shard splits its terms over threads (its finalize may run alone: the last of a build's),
  // in ranges of about equal postings; each range writes its own blocks and its own champion
  // lists, which are then joined in term order.
  assign_huge(block_max_store_, skips_.size(), 0.0f);
  assign_huge(block_max_time_store_, skips_.size(), std::numeric_limits<int64_t>::min());
  block_max_ = block_max_store_;
  block_max_time_ = block_max_time_store_;
  assign_huge(champ_at_, terms_.size(), UINT32_MAX);
  uint64_t postings = 0;
  size_t champ_terms = 0;
  for (const term_info& t : terms_) {
    postings += t.df;
    champ_terms += t.df > kChampMinDf ? 1 : 0;
  }
  const uint32_t threads =
      postings < parallel_finalize_postings ? 1 : std::clamp(usable_cpus(), 1u, 8u);
  // Several ranges per thread, taken as threads come free: ranges of equal postings do not take
  // equal time (a frequent term's champion heaps cost more per posting), and with one range per
  // thread the last one ran alone for up to ~0.2 s of a 1M build.
  const uint32_t ranges = threads == 1 ? 1 : threads * 4;
  std::vector<champ_lists> parts(ranges);
  if (ranges == 1) {  // the lists' exact sizes: no growth by copies into fresh pages
    reserve_huge(parts[0].part, champ_terms * kChampLen);
    reserve_huge(parts[0].doc, champ_terms * kChampLen);
    reserve_huge(parts[0].date, champ_terms * kChampLen);
  }
  const std::vector<size_t> cut = term_cuts(terms_, postings, ranges);
  // Every posting reads its doc's norm and time, a cache miss for most (a rare term's docs are
  // anywhere). Both come from one 8-byte key per doc when they fit (the length, whose norm is
  // looked up in a small table of the same values len_norm_ holds, and the time less the
  // shard's earliest), else from one 16-byte pair: one miss per posting instead of two.
  auto run = [&](const auto& keys) {
    if (ranges == 1) {
      finalize_terms(0, terms_.size(), keys, parts[0]);
    } else {
      std::atomic<uint32_t> next{0};
      auto work = [this, &parts, &cut, &keys, &next, ranges] {
        for (uint32_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < ranges;) {
          finalize_terms(cut[i], cut[i + 1], keys, parts[i]);
        }
      };
      std::vector<std::thread> pool;
      for (uint32_t i = 0; i < threads; ++i) {
        pool.emplace_back(work);
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
    keys.make_table(max_len + 1);
    keys.base_time = min_time;
    assign_huge(keys.key, docs_.size(), uint64_t{0});
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
  join_champs(parts, cut);
  prune_ = prune_index_builder::compute_prune_index(*this);
}

// Joins the ranges' champion lists in term order, rebasing champ_at_ to the joined lists.
void local_shard::join_champs(std::vector<champ_lists>& parts, const std::vector<size_t>& cut) {
  const uint32_t ranges = static_cast<uint32_t>(parts.size());
  if (ranges == 1) {  // already in place: taken whole, not copied
    champ_part_store_.swap(parts[0].part);
    champ_doc_store_.swap(parts[0].doc);
    champ_date_store_.swap(parts[0].date);
  } else {
    champ_part_store_.clear();
    champ_doc_store_.clear();
    champ_date_store_.clear();
    for (uint32_t i = 0; i < ranges; ++i) {
      const uint32_t base = static_cast<uint32_t>(champ_doc_store_.size());
      for (size_t ti = cut[i]; ti < cut[i + 1]; ++ti) {
        if (champ_at_[ti] != UINT32_MAX) {
          champ_at_[ti] += base;
        }
      }
      champ_part_store_.insert(champ_part_store_.end(), parts[i].part.begin(), parts[i].part.end());
      champ_doc_store_.insert(champ_doc_store_.end(), parts[i].doc.begin(), parts[i].doc.end());
      champ_date_store_.insert(champ_date_store_.end(), parts[i].date.begin(), parts[i].date.end());
    }
  }
  champ_part_ = champ_part_store_;
  champ_doc_ = champ_doc_store_;
  champ_date_ = champ_date_store_;
}

namespace {
// A champion list being built: the best kChampLen entries in a heap whose front is the worst
// (higher key first, then lower doc is better).
struct champ_heap {
  struct scored {
    double key;
    uint32_t doc;
  };
  // A function object, not a function: passed by pointer, std::push_heap's comparisons were
  // calls (2% of a 1M build).
  struct worse_t {
    bool operator()(const scored& a, const scored& b) const noexcept {
      return a.key > b.key || (a.key == b.key && a.doc < b.doc);
    }
  };
  static constexpr worse_t worse{};
  std::vector<scored> h;
  champ_heap() { h.reserve(kChampLen); }
  // docs arrive in ascending order, so an equal key never displaces an entry
  void offer(double key, uint32_t doc) {
    if (h.size() < kChampLen) {
      h.push_back({key, doc});
      std::push_heap(h.begin(), h.end(), worse);
    } else if (key > h.front().key) {
      replace_front({key, doc});
    }
  }
  // The front (the worst) replaced by a better entry x, sifted down in one pass: pop_heap and
  // push_heap took the hole down to a leaf and x back up, and with postings in doc order (the
  // keys at random) replacements are frequent: they were about a third of finalize's samples.
  void replace_front(const scored& x) {
    const size_t n = h.size();
    size_t i = 0;
    while (true) {
      size_t c = 2 * i + 1;
      if (c >= n) {
        break;
      }
      if (c + 1 < n && worse(h[c], h[c + 1])) {
        ++c;  // the worse child, which must stay above the other
      }
      if (!worse(x, h[c])) {
        break;  // x is no better than either child: its place
      }
      h[i] = h[c];
      i = c;
    }
    h[i] = x;
  }
  // Best first.
  void sort() { std::sort_heap(h.begin(), h.end(), worse); }
};

// The postings of terms [from, to) (their doc streams lie one after another in term order),
// decoded once, ahead_docs ahead of their use: each decoded posting's doc key is prefetched
// then, so it is in cache when the posting is taken (a rare term's docs are anywhere). A
// cursor beside a second reader that ran ahead only to prefetch decoded every posting twice.
template <class Keys>
struct posting_ring {
  static constexpr uint32_t ahead_docs = 16;  // a power of two
  struct entry {
    uint32_t doc, tf_title, tf_text;
  };
  const std::vector<term_info>& terms;
  const uint8_t* stream;
  uint64_t stream_end;  // bytes of doc stream before its padding
  const Keys& keys;
  size_t term, to;
  const uint8_t* at = nullptr;
  const uint8_t* end = nullptr;
  uint32_t doc = 0;
  entry ring[ahead_docs] = {};
  uint32_t head = 0, tail = 0;  // postings decoded, postings taken

  posting_ring(const std::vector<term_info>& t, const uint8_t* s, uint64_t s_end, const Keys& k,
               size_t from, size_t to_)
      : terms(t), stream(s), stream_end(s_end), keys(k), term(from), to(to_) {
    if (from < to) {
      at = stream + terms[from].doc_off;
      end = stream + end_of(from);
    }
    for (uint32_t i = 0; i < ahead_docs; ++i) {
      decode();
    }
  }
  uint64_t end_of(size_t ti) const {
    return ti + 1 < terms.size() ? terms[ti + 1].doc_off : stream_end;
  }
  // The next posting, in term order then doc order (the caller takes exactly the terms' df).
  entry take() {
    const entry e = ring[tail++ % ahead_docs];
    decode();
    return e;
  }
  void decode() {
    if (term >= to) {
      return;
    }
    while (at == end) {
      if (++term >= to) {
        return;
      }
      end = stream + end_of(term);
      doc = 0;
    }
    entry& e = ring[head++ % ahead_docs];
    uint32_t delta, pos_len;
    read_posting(at, delta, e.tf_title, e.tf_text, pos_len);  // the stream's padding covers it
    doc += delta;
    e.doc = doc;
    __builtin_prefetch(keys.key.data() + doc);
  }
};
}  // namespace

// Block maxima and champion lists of terms [from, to); champ_at_ gets offsets into `out`.
template <class DocKeys>
void local_shard::finalize_terms(size_t from, size_t to, const DocKeys& keys, champ_lists& out) {
  champ_heap rel, date;
  posting_ring<DocKeys> ring(terms_, doc_stream_.get(), doc_stream_bytes_ - 16, keys, from, to);
  for (size_t ti = from; ti < to; ++ti) {
    const term_info& t = terms_[ti];
    const bool champs = t.df > kChampMinDf;
    rel.h.clear();
    date.h.clear();
    // The current block's maxima stay in registers and are stored when it ends: updating them
    // in place chained every posting to the previous one's store.
    uint32_t block = 0;
    uint32_t left = kBlockDocs;  // postings still to come in the current block
    float m = 0.0f;
    int64_t mt = std::numeric_limits<int64_t>::min();
    for (uint32_t n = 0; n < t.df; ++n) {
      const auto e = ring.take();
      if (left == 0) {
        block_max_store_[t.skip_off + block] = m;
        block_max_time_store_[t.skip_off + block] = mt;
        ++block;
        left = kBlockDocs;
        m = 0.0f;
        mt = std::numeric_limits<int64_t>::min();
      }
      --left;
      const auto k = keys.key[e.doc];
      const int64_t doc_time = keys.time(k);
      double v;
      float f;
      keys.part_of(e.tf_title, e.tf_text, k, v, f);
      m = std::max(m, f);
      mt = std::max(mt, doc_time);
      if (champs) {
        rel.offer(v, e.doc);
        date.offer(static_cast<double>(doc_time), e.doc);
      }
    }
    if (t.df > 0) {
      block_max_store_[t.skip_off + block] = m;
      block_max_time_store_[t.skip_off + block] = mt;
    }
    if (champs) {
      rel.sort();
      date.sort();
      champ_at_[ti] = static_cast<uint32_t>(out.doc.size());
      for (const auto& x : rel.h) {
        out.part.push_back(x.key);
        out.doc.push_back(x.doc);
      }
      for (const auto& x : date.h) {
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
  c.nblocks = (t.df + kBlockDocs - 1) / kBlockDocs;
  c.left = std::min(kBlockDocs, t.df);
  c.skip_off = t.skip_off;
  return c;
}

}  // namespace tollgate::search
