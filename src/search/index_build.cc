// local_shard::build_index: turns a sealed shard's stories into its posting streams.
//
// Two passes, so the per-term work touches small arrays instead of one growing vector per term
// (which made every (doc, term) pair a cache miss):
//   1. per doc: tokenize, group occurrences by term, append one record per (term, doc)
//      [term][doc delta, frequencies, positions length][positions] to the stream of the
//      term's bucket (a range of term numbers) and count each term's df and exact byte sizes;
//   2. lay the terms out with prefix sums, then copy every record to its term's place, bucket
//      by bucket.
// Beside pass 1, the table of adjacent pairs of frequent words (local_shard::pair_docs_): the
// words are picked from a first pass over a sample of docs (interning them then gives the same
// term indices as the main pass), and each doc's adjacent pairs of two of them are counted once.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "search/shard_impl.h"
#include "tollgate/common/buffer.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {

using namespace detail;

// The build's working state; lives for one build_index() call.
struct local_shard::index_builder {
  // Per term: the grouping's mark and the counts, in one 32-byte aligned entry, so a doc's
  // record of a rare term costs one cache miss (prefetched as soon as the token is interned),
  // not two (the mark and the counts apart were: emit() stalled on the counts).
  struct alignas(32) term_state {
    uint32_t seen = 0;   // d + 1 when the term occurs in doc d being grouped
    uint32_t group = 0;  // its group in that doc
    uint32_t df = 0;
    uint32_t last_doc = 0;
    uint64_t doc_bytes = 0;
    uint64_t pos_bytes = 0;
    // Counts the term's record of doc d: entry_bytes in the doc stream, pos_bytes of positions.
    void count(uint32_t d, size_t entry_bytes, size_t pos_len) {
      doc_bytes += entry_bytes;
      pos_bytes += pos_len;
      last_doc = d;
      ++df;
    }
  };
  static_assert(sizeof(term_state) == 32);
  struct tok_ref {
    uint32_t off, len;
    uint64_t hash;
  };

  local_shard& s;
  std::vector<term_state> state;
  // The records, in one stream per bucket of 2^bucket_shift consecutive term numbers, so that
  // scatter() writes the postings of few terms at a time (their write positions and the lines
  // they write stay in cache; over all terms at once most records missed twice). A bucket's
  // stream is a list of extents of rec_buf (at least extent_bytes each, handed out in order);
  // a record never spans two.
  static constexpr uint32_t bucket_shift = 10;
  static constexpr size_t extent_bytes = size_t{64} << 10;
  struct extent {
    size_t off, end;
  };
  struct bucket {
    std::vector<extent> extents;
    size_t at = 0, limit = 0;  // the write offset in its last extent and that extent's end
  };
  out_buffer rec_buf;  // realloc growth (offsets stay valid), no zero-filling
  size_t rec_top = 0;  // rec_buf bytes handed out to extents
  std::vector<bucket> buckets;
  bucket* rec_bucket = nullptr;  // the bucket of the record being written
  out_buffer tok_chars;
  std::vector<tok_ref> toks;
  std::vector<uint32_t> occ_term, occ_group, group_term, group_start, sorted_pos;
  std::vector<uint8_t> pbuf = std::vector<uint8_t>(256);
  // Per pair of table words (pair_terms_.size() squared): the docs counted so far, and a bit
  // per pair set while the current doc's pairs are counted (cleared after each doc), so a
  // doc's pair counts once. 4 bytes a pair: with the doc mark beside each count (8 bytes) the
  // table's random walk missed the cache more.
  std::vector<uint32_t> pair_docs;
  std::vector<uint64_t> pair_seen;
  std::vector<uint32_t> pair_term;  // per pair of posting ranks: its term, or UINT32_MAX
  std::vector<uint32_t> pair_occ;   // the doc's pair term occurrences: term << 1 | in text
  struct pair_group {
    uint32_t term, tft, tfx;
  };
  std::vector<pair_group> pair_groups;  // emit_pairs: the doc's pair terms, first seen first
  std::vector<uint32_t> pair_at;        // count_pairs: the doc's pairs' cells
  std::string pair_name;

  explicit index_builder(local_shard& shard) : s(shard) {}
  void reserve_records();
  // Room for a record of at most n bytes of term t at the end of its bucket's stream.
  uint8_t* prepare_record(uint32_t t, size_t n) {
    const size_t bi = t >> bucket_shift;
    if (bi < buckets.size() && buckets[bi].limit - buckets[bi].at >= n) [[likely]] {
      rec_bucket = &buckets[bi];
      return reinterpret_cast<uint8_t*>(rec_buf.data()) + rec_bucket->at;
    }
    return new_extent(t, n);
  }
  uint8_t* new_extent(uint32_t t, size_t n);
  void commit_record(size_t n) { rec_bucket->at += n; }
  uint32_t tokenize(uint32_t d);
  void intern_tokens();
  void group(uint32_t d, uint32_t tl);
  void emit(uint32_t d, uint32_t tl);
  void layout();
  void scatter();
  void choose_pair_words(uint32_t n);
  void count_pairs(uint32_t tl);
  void finish_pairs();
  void emit_pairs(uint32_t d);
};

void local_shard::build_index(out_buffer* records, std::atomic<uint64_t>* steps,
                              std::atomic<uint32_t>* counted) {
  const uint32_t n = static_cast<uint32_t>(docs_.size());
  assign_huge(title_len_, n, 0u);
  assign_huge(text_len_, n, 0u);
  stats_ = {};
  stats_.docs = n;
  index_builder b(*this);
  if (records != nullptr) {
    b.rec_buf = std::move(*records);
  }
  b.reserve_records();
  b.choose_pair_words(n);
  constexpr uint32_t progress_docs = 4096;  // docs between two advances of `steps`
  for (uint32_t d = 0; d < n; ++d) {
    if (steps != nullptr && d % progress_docs == progress_docs - 1) {
      steps->fetch_add(progress_docs * build_steps_indexed, std::memory_order_relaxed);
    }
    const uint32_t tl = b.tokenize(d);
    b.intern_tokens();
    b.count_pairs(tl);
    const uint32_t xl = static_cast<uint32_t>(b.toks.size()) - tl;
    title_len_[d] = tl;
    text_len_[d] = xl;
    stats_.title_tokens += tl;
    stats_.text_tokens += xl;
    if (b.state.size() < terms_.size()) {
      const size_t want = terms_.size() + terms_.size() / 2;
      reserve_huge(b.state, want);
      b.state.resize(want);
    }
    b.group(d, tl);
    b.emit(d, tl);
    b.emit_pairs(d);
  }
  if (steps != nullptr) {
    steps->fetch_add((n % progress_docs) * build_steps_indexed, std::memory_order_relaxed);
  }
  if (counted != nullptr) {  // stats_ are final: published to the threads that wait for them
    counted->fetch_add(1, std::memory_order_release);
    counted->notify_all();
  }
  b.finish_pairs();
  b.layout();
  b.scatter();
  if (records != nullptr) {
    b.rec_buf.clear();
    *records = std::move(b.rec_buf);
  }
  term_chars_.shrink_to_fit();
  shrink_huge(terms_);
  shrink_huge(doc_tags_);
}

// The pair table's words: the terms of the first pair_sample_docs docs whose share of them
// predicts at least pair_min_df docs in the shard, the most frequent first, at most
// pair_max_words. Which words they are only decides which phrases skip the postings walk.
void local_shard::index_builder::choose_pair_words(uint32_t n) {
  s.pair_posting_ranks_ = 0;
  s.pair_terms_.clear();
  s.pair_rank_.clear();
  s.pair_docs_store_.clear();
  s.pair_docs_ = {};
  const uint32_t m = std::min(n, pair_sample_docs);
  const uint32_t max_words = std::min<uint32_t>(pair_max_words, UINT16_MAX);
  if (m == 0 || max_words == 0) {
    return;
  }
  std::vector<uint32_t> sample_df, last;
  for (uint32_t d = 0; d < m; ++d) {
    tokenize(d);
    intern_tokens();
    sample_df.resize(s.terms_.size());
    last.resize(s.terms_.size());
    for (const uint32_t t : occ_term) {
      if (last[t] != d + 1) {
        last[t] = d + 1;
        ++sample_df[t];
      }
    }
  }
  std::vector<uint32_t>& words = s.pair_terms_;
  for (uint32_t t = 0; t < sample_df.size(); ++t) {
    if (sample_df[t] > 0 && uint64_t{sample_df[t]} * n >= uint64_t{pair_min_df} * m) {
      words.push_back(t);
    }
  }
  std::sort(words.begin(), words.end(), [&sample_df](uint32_t a, uint32_t b) {
    return sample_df[a] != sample_df[b] ? sample_df[a] > sample_df[b] : a < b;
  });
  words.resize(std::min<size_t>(words.size(), max_words));
  s.pair_rank_.assign(s.terms_.size(), UINT16_MAX);
  for (size_t r = 0; r < words.size(); ++r) {
    s.pair_rank_[words[r]] = static_cast<uint16_t>(r);
  }
  assign_huge(pair_docs, words.size() * words.size(), uint32_t{0});
  pair_seen.assign((words.size() * words.size() + 63) / 64, 0);
  s.pair_posting_ranks_ =
      std::min<uint32_t>(static_cast<uint32_t>(words.size()), pair_posting_words);
  pair_term.assign(size_t{s.pair_posting_ranks_} * s.pair_posting_ranks_, UINT32_MAX);
}

// Counts the doc's adjacent pairs of two table words once each, and lists the doc's pair term
// occurrences for emit_pairs(), in one pass over the occurrences. Occurrence tl is the text's
// first token: it does not follow the title's last one (a phrase never spans the fields).
void local_shard::index_builder::count_pairs(uint32_t tl) {
  const uint32_t words = static_cast<uint32_t>(s.pair_terms_.size());
  pair_occ.clear();
  if (words == 0) {
    return;
  }
  const uint16_t* rank = s.pair_rank_.data();
  const uint32_t ranked = static_cast<uint32_t>(s.pair_rank_.size());  // later terms are rare
  const uint32_t nocc = static_cast<uint32_t>(occ_term.size());
  const uint32_t posting = s.pair_posting_ranks_;
  // First the doc's pairs' cells, each prefetched (a cell of the table is mostly a cache miss:
  // fetched one after another they were most of this function), then their updates. A pair
  // term new to the shard is interned here, in occurrence order (term numbers as before).
  pair_at.clear();
  uint32_t prev = UINT16_MAX;
  for (uint32_t k = 0; k < nocc; ++k) {
    const uint32_t t = occ_term[k];
    const uint32_t r = t < ranked ? rank[t] : UINT16_MAX;
    if (r != UINT16_MAX && prev != UINT16_MAX && k != tl) {
      const uint32_t cell = prev * words + r;
      __builtin_prefetch(&pair_docs[cell], 1);
      pair_at.push_back(cell);
      if (prev < posting && r < posting) {
        uint32_t& pt = pair_term[prev * posting + r];
        if (pt == UINT32_MAX) {
          const term_info& a = s.terms_[occ_term[k - 1]];
          const term_info& b = s.terms_[t];
          pair_name.assign(s.term_chars_.data() + a.name_off, a.name_len);
          pair_name.push_back('\0');
          pair_name.append(s.term_chars_.data() + b.name_off, b.name_len);
          pt = s.intern_term(pair_name, term_hash(pair_name));
        }
        pair_occ.push_back(pt << 1 | (k > tl ? 1u : 0u));
      }
    }
    prev = r;
  }
  for (const uint32_t cell : pair_at) {
    uint64_t& w = pair_seen[cell >> 6];
    const uint64_t bit = uint64_t{1} << (cell & 63);
    if ((w & bit) == 0) {
      w |= bit;
      ++pair_docs[cell];
    }
  }
  for (const uint32_t cell : pair_at) {
    pair_seen[cell >> 6] = 0;  // only this doc's bits were set
  }
}

// One record per pair term of doc d, as emit() writes a word's, without positions: its
// occurrences in the title and in the text are the phrase's. The occurrences are grouped by
// term through the terms' marks, as group() does (a sort per doc was a fifth of this).
void local_shard::index_builder::emit_pairs(uint32_t d) {
  pair_groups.clear();
  for (const uint32_t o : pair_occ) {
    term_state& m = state[o >> 1];
    if (m.seen != d + 1) {
      m.seen = d + 1;
      m.group = static_cast<uint32_t>(pair_groups.size());
      pair_groups.push_back({o >> 1, 0, 0});
    }
    ++((o & 1) != 0 ? pair_groups[m.group].tfx : pair_groups[m.group].tft);
  }
  for (const pair_group& g : pair_groups) {
    const uint32_t t = g.term, tft = g.tft, tfx = g.tfx;
    term_state& c = state[t];
    uint8_t* out = prepare_record(t, 22);  // 5 term, 5 delta, 11 frequencies, 1 length
    size_t h = put_varint(out, t);
    const size_t entry_at = h;
    h += put_varint(out + h, d - c.last_doc);
    h += put_tf(out + h, tft, tfx);
    out[h++] = 0;  // no positions
    commit_record(h);
    c.count(d, h - entry_at, 0);
  }
}

void local_shard::index_builder::finish_pairs() {
  s.pair_docs_store_.swap(pair_docs);
  s.pair_docs_ = s.pair_docs_store_;
  std::vector<uint32_t>().swap(pair_docs);
  std::vector<uint64_t>().swap(pair_seen);
  std::vector<uint32_t>().swap(pair_term);
  s.pair_rank_.resize(s.terms_.size(), UINT16_MAX);
}

void local_shard::index_builder::reserve_records() {
  size_t text_bytes = 0;
  for (const doc_rec& r : s.docs_) {
    text_bytes += read_head(r.base).title.size() + r.text_len;
  }
  // Records take about 1.25 bytes per byte of title and text. Reserving twice that costs only
  // address space (pages are touched as written), and a growth (a copy into memory that is
  // not on huge pages: 4 KB faults) then never happens in practice.
  const size_t want = 2 * text_bytes + 1024;
  if (rec_buf.capacity() < want) {
    rec_buf = out_buffer();  // not grown by realloc: that would copy (and fault in) all of it
    rec_buf.reserve(want);
    advise_huge(rec_buf.data(), rec_buf.capacity());
  }
  rec_buf.clear();
}

// prepare_record() when term t's bucket has no room for n bytes (or no stream yet): a new
// extent.
uint8_t* local_shard::index_builder::new_extent(uint32_t t, size_t n) {
  const size_t bi = t >> bucket_shift;
  if (bi >= buckets.size()) {
    buckets.resize(bi + 1);
  }
  bucket& b = buckets[bi];
  rec_bucket = &b;
  if (b.limit - b.at < n) {
    if (!b.extents.empty()) {
      b.extents.back().end = b.at;
    }
    const size_t size = std::max(extent_bytes, n);
    rec_buf.resize(rec_top + size);
    b.extents.push_back({rec_top, rec_top});
    b.at = rec_top;
    b.limit = rec_top + size;
    rec_top += size;
  }
  return reinterpret_cast<uint8_t*>(rec_buf.data()) + b.at;
}

// Per doc: the tokens (copied: a token_stream's view lasts until its next call) with their
// hashes, whose term-table slots are prefetched before any is probed (the probes of rare terms
// were cache misses one after another). Returns the title's token count.
uint32_t local_shard::index_builder::tokenize(uint32_t d) {
  field_views f(s.docs_[d]);
  tok_chars.clear();
  toks.clear();
  auto add_field = [this](std::string_view field) {
    append_tokens(field, tok_chars, [this](size_t off, size_t len) {
      toks.push_back({static_cast<uint32_t>(off), static_cast<uint32_t>(len), 0});
    });
  };
  add_field(f.title);
  const uint32_t tl = static_cast<uint32_t>(toks.size());
  add_field(unpacked_text(s.docs_[d]));
  for (tok_ref& t : toks) {
    t.hash = term_hash(std::string_view(tok_chars.data() + t.off, t.len));
    if (!s.term_table_.empty()) {
      __builtin_prefetch(&s.term_table_[t.hash & (s.term_table_.size() - 1)]);
    }
  }
  return tl;
}

void local_shard::index_builder::intern_tokens() {
  const uint32_t nocc = static_cast<uint32_t>(toks.size());
  occ_term.resize(nocc);
  for (uint32_t k = 0; k < nocc; ++k) {
    // Most tokens are terms the shard has: found by the inline probe, not a call per token.
    const std::string_view tok(tok_chars.data() + toks[k].off, toks[k].len);
    const int64_t found = s.probe_term(tok, toks[k].hash);
    const uint32_t t = found >= 0 ? static_cast<uint32_t>(found) : s.intern_term(tok, toks[k].hash);
    occ_term[k] = t;
    if (t < state.size()) {  // a term new to this doc's batch has no entry yet: nothing to fetch
      __builtin_prefetch(&state[t], 1);
    }
  }
}

// Groups the doc's occurrences by term in first-seen order through a per-term mark instead of
// sorting (term, position) pairs: group g's positions end up in
// sorted_pos[group_start[g], group_start[g + 1]). Occurrence k has position k (title) or k + 1
// (text, after the title's gap). The order of a doc's records in the stream does not matter:
// pass 2 scatters them per term.
void local_shard::index_builder::group(uint32_t d, uint32_t tl) {
  const uint32_t nocc = static_cast<uint32_t>(toks.size());
  group_term.clear();
  group_start.clear();
  occ_group.resize(nocc);
  for (uint32_t k = 0; k < nocc; ++k) {
    term_state& c = state[occ_term[k]];
    if (c.seen != d + 1) {
      c.seen = d + 1;
      c.group = static_cast<uint32_t>(group_term.size());
      group_term.push_back(occ_term[k]);
      group_start.push_back(0);
    }
    ++group_start[c.group];
    occ_group[k] = c.group;
  }
  const uint32_t ng = static_cast<uint32_t>(group_term.size());
  uint32_t sum = 0;
  for (uint32_t g = 0; g < ng; ++g) {
    const uint32_t cnt = group_start[g];
    group_start[g] = sum;
    sum += cnt;
  }
  group_start.push_back(sum);
  sorted_pos.resize(nocc);
  for (uint32_t k = 0; k < nocc; ++k) {
    // group_start[g] advances to the group's end while filling; restored below
    sorted_pos[group_start[occ_group[k]]++] = k < tl ? k : k + 1;
  }
  for (uint32_t g = ng; g > 0; --g) {
    group_start[g] = group_start[g - 1];
  }
  group_start[0] = 0;
}

// Appends one record per group (term) of doc d to the record stream and counts its bytes.
void local_shard::index_builder::emit(uint32_t d, uint32_t tl) {
  const uint32_t ng = static_cast<uint32_t>(group_term.size());
  for (uint32_t g = 0; g < ng; ++g) {
    const uint32_t t = group_term[g];
    const uint32_t i = group_start[g], j = group_start[g + 1];
    if (j - i == 1) {  // most of a doc's terms occur once: the position goes straight in
      const uint32_t p = sorted_pos[i];
      const uint32_t tft = p < tl ? 1 : 0;
      term_state& c = state[t];
      // at most 5 bytes of term, 5 of doc delta, 2 of frequencies and length, 5 of position
      uint8_t* out = prepare_record(t, 17);
      size_t h = put_varint(out, t);
      const size_t entry_at = h;
      h += put_varint(out + h, d - c.last_doc);
      h += put_tf(out + h, tft, 1 - tft);  // one byte: tft is 0 or 1
      const size_t pos_len = put_varint(out + h + 1, p);
      out[h] = static_cast<uint8_t>(pos_len);
      h += 1;
      commit_record(h + pos_len);
      c.count(d, h - entry_at, pos_len);
      continue;
    }
    uint32_t tft = 0;
    for (uint32_t k = i; k < j && sorted_pos[k] < tl; ++k) {
      ++tft;
    }
    const uint32_t tfx = (j - i) - tft;
    pbuf.resize(std::max<size_t>(pbuf.size(), size_t{j - i} * 5));
    size_t pos_len = 0;
    uint32_t prev = 0;
    for (uint32_t k = i; k < j; ++k) {
      const uint32_t p = sorted_pos[k];
      pos_len += put_varint(pbuf.data() + pos_len, k == i ? p : p - prev);
      prev = p;
    }
    term_state& c = state[t];
    uint8_t* out = prepare_record(t, 26 + pos_len);  // 5 term, 5 delta, 11 frequencies, 5 length
    size_t h = put_varint(out, t);
    const size_t entry_at = h;
    h += put_varint(out + h, d - c.last_doc);
    h += put_tf(out + h, tft, tfx);
    h += put_varint(out + h, static_cast<uint32_t>(pos_len));
    copy_small(out + h, pbuf.data(), pos_len);
    commit_record(h + pos_len);
    c.count(d, h - entry_at, pos_len);
  }
}

// Pass 2, layout: each term's offsets in the streams and skips by prefix sums; the streams
// allocated (every byte is written by scatter(), plus 16 zeroed bytes for over-reading loads).
void local_shard::index_builder::layout() {
  uint64_t doc_total = 0, pos_total = 0;
  uint32_t skip_total = 0;
  for (size_t t = 0; t < s.terms_.size(); ++t) {
    const term_state& c = state[t];
    term_info& ti = s.terms_[t];
    ti.doc_off = doc_total;
    ti.pos_off = pos_total;
    ti.skip_off = skip_total;
    ti.df = c.df;
    doc_total += c.doc_bytes;
    pos_total += c.pos_bytes;
    skip_total += (c.df + kBlockDocs - 1) / kBlockDocs;
  }
  std::vector<term_state>().swap(state);
  s.doc_stream_bytes_ = doc_total + 16;
  s.pos_stream_bytes_ = pos_total + 16;
  s.doc_stream_.reset(static_cast<uint8_t*>(alloc_build(s.doc_stream_bytes_)));
  s.pos_stream_.reset(static_cast<uint8_t*>(alloc_build(s.pos_stream_bytes_)));
  std::memset(s.doc_stream_.get() + doc_total, 0, 16);
  std::memset(s.pos_stream_.get() + pos_total, 0, 16);
  assign_huge(s.skips_store_, skip_total, skip_entry{});
  s.skips_ = s.skips_store_;
}

// Pass 2, scatter: every record copied to its term's place, skip entries written as blocks
// fill. Software-pipelined: a record is decoded (and its w[t] prefetched) ring_size records
// before it is copied, and its destinations are prefetched half-way, from w[t] as it is then (a
// later record of the same term moves them by a few bytes: still the right lines, mostly). The
// scattered w[t] loads and destination writes were most of this pass.
void local_shard::index_builder::scatter() {
  struct term_write {
    uint64_t doc_w;
    uint64_t pos_w;
    uint32_t skip_w;
    uint32_t cur;
    uint32_t cnt;
    uint32_t df;
  };
  std::vector<term_write> w;
  assign_huge(w, s.terms_.size(), term_write{});
  for (size_t t = 0; t < s.terms_.size(); ++t) {
    const term_info& ti = s.terms_[t];
    w[t] = {ti.doc_off, ti.pos_off, ti.skip_off, 0, 0, ti.df};
  }
  struct pending {
    const uint8_t* entry;  // doc delta, frequencies, positions length (postings.h)
    uint32_t t;
    uint32_t delta;
    uint32_t entry_len;
    uint32_t pos_len;
  };
  constexpr uint32_t ring_size = 16;  // a power of two
  constexpr uint32_t dest_lead = ring_size / 2;
  pending ring[ring_size];
  // The records bucket by bucket, each bucket's extents in order.
  for (bucket& b : buckets) {
    if (!b.extents.empty()) {
      b.extents.back().end = b.at;
    }
  }
  const uint8_t* const base = reinterpret_cast<const uint8_t*>(rec_buf.data());
  size_t bi = 0, ei = 0;
  const uint8_t* p = base;
  const uint8_t* end = base;
  // Moves p to the next record, if any: false at the end of the last extent.
  auto more = [&]() {
    while (p == end) {
      if (bi == buckets.size()) {
        return false;
      }
      if (ei == buckets[bi].extents.size()) {
        ++bi;
        ei = 0;
        continue;
      }
      const extent& e = buckets[bi].extents[ei++];
      p = base + e.off;
      end = base + e.end;
    }
    return true;
  };
  auto decode = [&p, &w](pending& r) {
    r.t = read_varint(p);
    r.entry = p;
    r.delta = read_varint(p);
    uint32_t tft, tfx;
    detail::read_tf(p, tft, tfx);
    r.pos_len = read_varint(p);
    r.entry_len = static_cast<uint32_t>(p - r.entry);
    p += r.pos_len;
    __builtin_prefetch(&w[r.t], 1);
  };
  uint8_t* const doc_stream = s.doc_stream_.get();
  uint8_t* const pos_stream = s.pos_stream_.get();
  uint32_t head = 0;  // records decoded
  uint32_t tail = 0;  // records copied
  while (head - tail < ring_size && more()) {
    decode(ring[head++ % ring_size]);
  }
  while (tail != head) {
    if (head - tail > dest_lead) {
      const pending& a = ring[(tail + dest_lead) % ring_size];
      const term_write& aw = w[a.t];
      __builtin_prefetch(doc_stream + aw.doc_w, 1);
      __builtin_prefetch(pos_stream + aw.pos_w, 1);
      if (aw.df - aw.cnt <= ring_size) {  // likely its last record: the skip reads terms_[t]
        __builtin_prefetch(&s.terms_[a.t]);
      }
    }
    const pending r = ring[tail++ % ring_size];
    if (more()) {
      decode(ring[head++ % ring_size]);
    }
    term_write& tw = w[r.t];
    copy_small(doc_stream + tw.doc_w, r.entry, r.entry_len);
    copy_small(pos_stream + tw.pos_w, r.entry + r.entry_len, r.pos_len);
    tw.doc_w += r.entry_len;
    tw.pos_w += r.pos_len;
    tw.cur += r.delta;
    ++tw.cnt;
    if (tw.cnt % kBlockDocs == 0 || tw.cnt == tw.df) {
      const term_info& ti = s.terms_[r.t];
      s.skips_store_[tw.skip_w++] = {tw.cur, static_cast<uint32_t>(tw.doc_w - ti.doc_off),
                                     tw.pos_w - ti.pos_off};
    }
  }
  std::vector<bucket>().swap(buckets);
}

}  // namespace tollgate::search
