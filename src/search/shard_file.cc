// local_shard::save/load: a sealed shard laid out as sections of an index file (the fields and
// their on-disk structs are in index_layout.h), and read back in place from the mapping: the
// stored stories and the posting streams stay in it, the smaller tables are copied, and what
// finalize() derived is taken back when the file holds all of it, consistent.
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <utility>

#include "search/corpus_text.h"
#include "search/index_file.h"
#include "search/index_layout.h"
#include "search/shard_impl.h"

namespace tollgate::search {

using namespace detail;
using namespace index_layout;

namespace {

// The raw layouts written; a change to one must bump index_format_version.
static_assert(sizeof(term_info) == 32 && sizeof(skip_entry) == 16 && sizeof(shard_stats) == 24);

// A tripwire for whoever adds a member to local_shard: decide whether the index file must save
// it (state made by seal() or finalize(): add a section to save/load or save_derived/
// load_derived, and bump index_format_version if an existing section changes), then update
// this figure. A loaded shard that lacks such state would answer from empty tables. (prune_ is
// derived by finalize() on a build and saved whole: its impact terms are taken back through
// loaded_impact_ when the rest of finalize()'s output is, its other tables through
// loaded_prune_ whenever they are there.)
static_assert(sizeof(local_shard) == 1712, "local_shard changed: see the comment above");

template <class T>
void copy_to(std::vector<T>& v, std::span<const T> s) {
  v.assign(s.begin(), s.end());
}

// A shard's sections as read from a file.
struct shard_sections {
  std::span<const shard_stats> stats;
  std::span<const disk_doc> docs;
  std::span<const uint8_t> stories, tag_chars, tag_escape, doc_stream, pos_stream;
  std::span<const uint8_t> texts, text_dict;
  std::span<const uint64_t> text_at;
  std::span<const corpus_line> text_lines;
  bool lines = false;  // the texts are in the corpus file: text_lines, not texts/text_at/dict
  std::span<const int64_t> time;
  std::span<const uint32_t> doc_tags, tag_lens, tag_table, title_len, text_len;
  std::span<const char> term_chars;
  std::span<const term_info> terms;
  std::span<const disk_term_slot> term_table;
  std::span<const skip_entry> skips;
  std::span<const uint32_t> pair_terms, pair_docs, pair_posting_ranks;

  // Whether every section is there.
  bool read(const index_reader& r, uint32_t s) {
    return r.get(section_tag(s, f_stats), stats) && r.get(section_tag(s, f_docs), docs) &&
           r.bytes(section_tag(s, f_stories), stories) && r.get(section_tag(s, f_time), time) &&
           r.get(section_tag(s, f_doc_tags), doc_tags) &&
           r.bytes(section_tag(s, f_tag_chars), tag_chars) &&
           r.get(section_tag(s, f_tag_lens), tag_lens) &&
           r.bytes(section_tag(s, f_tag_escape), tag_escape) &&
           r.get(section_tag(s, f_tag_table), tag_table) &&
           r.get(section_tag(s, f_title_len), title_len) &&
           r.get(section_tag(s, f_text_len), text_len) &&
           r.get(section_tag(s, f_term_chars), term_chars) &&
           r.get(section_tag(s, f_terms), terms) &&
           r.get(section_tag(s, f_term_table), term_table) &&
           r.bytes(section_tag(s, f_doc_stream), doc_stream) &&
           r.bytes(section_tag(s, f_pos_stream), pos_stream) &&
           r.get(section_tag(s, f_skips), skips) &&
           r.get(section_tag(s, f_pair_terms), pair_terms) &&
           r.get(section_tag(s, f_pair_docs), pair_docs) &&
           r.get(section_tag(s, f_pair_posting_ranks), pair_posting_ranks) &&
           ((lines = r.get(section_tag(s, f_text_lines), text_lines)) ||
            (r.bytes(section_tag(s, f_texts), texts) && r.get(section_tag(s, f_text_at), text_at) &&
             r.bytes(section_tag(s, f_text_dict), text_dict)));
  }

  // Checksums already hold; these checks keep a file this build did not write (or a bug) from
  // sending a query out of bounds. "" or what is inconsistent. `text_raw`: the doc flag of a
  // text stored raw. `contents`: also the checks that read whole sections (every head, tag,
  // term, pair count and term slot); without it only the sections' sizes, for the file this
  // process has just written from the shards it built (index_reader::written_here).
  std::string check(uint32_t text_raw, const corpus_file* corpus, bool contents) const {
    const size_t n = docs.size();
    if (stats.size() != 1 || stats[0].docs != n || time.size() != n || title_len.size() != n ||
        text_len.size() != n || tag_lens.size() != tag_escape.size() || doc_stream.size() < 16 ||
        pos_stream.size() < 16 ||
        (!term_table.empty() && !std::has_single_bit(term_table.size())) ||
        (!tag_table.empty() && !std::has_single_bit(tag_table.size()))) {
      return "sections of inconsistent sizes";
    }
    uint64_t tag_bytes = 0;
    for (uint32_t len : tag_lens) {
      tag_bytes += len;
    }
    if (tag_bytes != tag_chars.size()) {
      return "tag names of inconsistent sizes";
    }
    if (lines) {
      if (corpus == nullptr) {
        return "its texts are in the corpus file, which is not open";
      }
      if (text_lines.size() != n) {
        return "texts' lines of inconsistent sizes";
      }
    } else if (text_at.size() != n + 1 || text_at[0] != 0 || text_at[n] != texts.size()) {
      return "texts of inconsistent sizes";
    }
    if (n > 0 && (docs[0].off != 0 || docs[0].tags_off != 0)) {
      return "a story out of bounds";
    }
    if (pair_terms.size() > UINT16_MAX ||
        pair_docs.size() != pair_terms.size() * pair_terms.size() ||
        pair_posting_ranks.size() != 1 || pair_posting_ranks[0] > pair_terms.size()) {
      return "a pair table of inconsistent size";
    }
    if (!contents) {
      return {};
    }
    const char* const heads = reinterpret_cast<const char*>(stories.data());
    for (size_t d = 0; d < n; ++d) {
      const disk_doc& x = docs[d];
      // Each head is well formed and ends where the next begins; each doc's tags likewise.
      const uint64_t end = d + 1 < n ? docs[d + 1].off : stories.size();
      const uint64_t tags_end = d + 1 < n ? docs[d + 1].tags_off : doc_tags.size();
      story_head h;
      if (x.off > end || end > stories.size() || x.tags_off > tags_end ||
          tags_end > doc_tags.size() || !check_head(heads + x.off, heads + end, h)) {
        return "a story out of bounds";
      }
      if (lines) {
        // a line in the corpus as opened, at least as long as the text it holds escaped
        const corpus_line& l = text_lines[d];
        if (l.at > corpus->size() || l.len > corpus->size() - l.at || l.len < x.text_len) {
          return "a text's line out of the corpus file's bounds";
        }
        continue;
      }
      // a raw text has its length; a compressed one is a non-empty frame
      const bool raw = (h.escape & text_raw) != 0;
      if (text_at[d + 1] < text_at[d] ||
          (raw ? text_at[d + 1] - text_at[d] != x.text_len : text_at[d + 1] == text_at[d])) {
        return "a text out of bounds";
      }
    }
    for (uint32_t t : doc_tags) {
      if (t >= tag_lens.size()) {
        return "a tag out of bounds";
      }
    }
    for (const term_info& ti : terms) {
      const uint64_t blocks = (uint64_t{ti.df} + kBlockDocs - 1) / kBlockDocs;
      if (ti.doc_off > doc_stream.size() || ti.pos_off > pos_stream.size() ||
          ti.skip_off > skips.size() || blocks > skips.size() - ti.skip_off ||
          uint64_t{ti.name_off} + ti.name_len > term_chars.size()) {
        return "a term out of bounds";
      }
    }
    std::vector<uint8_t> paired(terms.size(), 0);
    for (uint32_t t : pair_terms) {
      if (t >= terms.size() || paired[t]++ != 0) {
        return "a pair table word out of bounds or repeated";
      }
    }
    for (uint32_t docs_with : pair_docs) {
      if (docs_with > n) {
        return "a pair count above the shard's docs";
      }
    }
    for (const disk_term_slot& ts : term_table) {
      if (ts.key != 0 && (ts.key & 0xFFFFFFFFu) > terms.size()) {
        return "the term table points out of bounds";
      }
    }
    return {};
  }
};

}  // namespace

void local_shard::save(index_writer& w, uint32_t slot) const {
  save_sealed(w, slot);
  save_derived(w, slot);
}

void local_shard::save_sealed(index_writer& w, uint32_t slot) const {
  const uint32_t s = slot + 1;
  w.add(section_tag(s, f_stats), std::span<const shard_stats>(&stats_, 1));
  std::vector<disk_doc> docs;
  assign_huge(docs, docs_.size(), disk_doc{});
  w.begin_section(section_tag(s, f_stories));
  uint64_t off = 0;
  for (size_t d = 0; d < docs_.size(); ++d) {
    const doc_rec& r = docs_[d];
    const size_t n = read_head(r.base).size;
    w.append(r.base, n);
    docs[d] = {off, r.text_len, r.tags_off};
    off += n;
  }
  w.end_section();
  w.add(section_tag(s, f_docs), std::span<const disk_doc>(docs));
  if (corpus_) {
    w.add(section_tag(s, f_text_lines), lines_);
  } else {
    w.add(section_tag(s, f_texts), std::span<const uint8_t>(texts_.get(), texts_bytes_));
    w.add(section_tag(s, f_text_at), text_at_);
    w.add(section_tag(s, f_text_dict), text_dict_);
  }
  w.add(section_tag(s, f_time), std::span<const int64_t>(time_));
  w.add(section_tag(s, f_doc_tags), std::span<const uint32_t>(doc_tags_));
  std::vector<uint32_t> tag_lens;
  w.begin_section(section_tag(s, f_tag_chars));
  for (const std::string& t : tag_names_) {
    w.append(t.data(), t.size());
    tag_lens.push_back(static_cast<uint32_t>(t.size()));
  }
  w.end_section();
  w.add(section_tag(s, f_tag_lens), std::span<const uint32_t>(tag_lens));
  w.add(section_tag(s, f_tag_escape), std::span<const uint8_t>(tag_escape_));
  w.add(section_tag(s, f_tag_table), std::span<const uint32_t>(tag_table_));
  w.add(section_tag(s, f_title_len), std::span<const uint32_t>(title_len_));
  w.add(section_tag(s, f_text_len), std::span<const uint32_t>(text_len_));
  w.add(section_tag(s, f_term_chars), std::span<const char>(term_chars_));
  w.add(section_tag(s, f_terms), std::span<const term_info>(terms_));
  w.add(section_tag(s, f_term_table), std::span<const term_slot>(term_table_));
  w.add(section_tag(s, f_doc_stream),
        std::span<const uint8_t>(doc_stream_.get(), doc_stream_bytes_));
  w.add(section_tag(s, f_pos_stream),
        std::span<const uint8_t>(pos_stream_.get(), pos_stream_bytes_));
  w.add(section_tag(s, f_skips), skips_);
  w.add(section_tag(s, f_pair_terms), std::span<const uint32_t>(pair_terms_));
  w.add(section_tag(s, f_pair_docs), pair_docs_);
  w.add(section_tag(s, f_pair_posting_ranks), std::span<const uint32_t>(&pair_posting_ranks_, 1));
}

// finalize()'s output, when there is one (it is most of a start's work once the rest is mapped).
void local_shard::save_derived(index_writer& w, uint32_t slot) const {
  if (len_norm_.size() != docs_.size() || block_max_.size() != skips_.size() ||
      block_max_time_.size() != skips_.size() || champ_at_.size() != terms_.size()) {
    return;  // not finalized
  }
  const uint32_t s = slot + 1;
  w.add(section_tag(s, f_avgdl), std::span<const double>(&avgdl_, 1));
  w.add(section_tag(s, f_len_norm), std::span<const double>(len_norm_));
  w.add(section_tag(s, f_block_max), block_max_);
  w.add(section_tag(s, f_block_max_time), block_max_time_);
  w.add(section_tag(s, f_champ_at), std::span<const uint32_t>(champ_at_));
  w.add(section_tag(s, f_champ_part), champ_part_);
  w.add(section_tag(s, f_champ_doc), champ_doc_);
  w.add(section_tag(s, f_champ_date), champ_date_);
  w.add(section_tag(s, f_impact_terms), std::span<const uint32_t>(prune_.impact_terms));
  w.add(section_tag(s, f_impact_at), std::span<const uint32_t>(prune_.impact_at));
  w.add(section_tag(s, f_impact_doc), std::span<const uint32_t>(prune_.impact_doc));
  w.add(section_tag(s, f_impact_part), std::span<const float>(prune_.impact_part));
  w.add(section_tag(s, f_impact_rows), prune_.impact_rows);
  const prune_index& p = prune_;
  const uint32_t sets = p.words == 0 ? 0 : static_cast<uint32_t>(p.bits.size() / p.words);
  const uint32_t head[] = {dense_divisor, p.words, p.min_len, p.time_step, sets};
  w.add(section_tag(s, f_prune_head), std::span<const uint32_t>(head));
  w.add(section_tag(s, f_prune_set_of_term), p.set_of_term);
  w.add(section_tag(s, f_prune_bits), p.bits);
  w.add(section_tag(s, f_prune_by_time), p.by_time);
  w.add(section_tag(s, f_prune_time_cum), p.time_cum);
  w.add(section_tag(s, f_prune_tag_at), p.tag_at);
  w.add(section_tag(s, f_prune_tag_docs), p.tag_docs);
  w.add(section_tag(s, f_prune_len_class), p.len_class);
}

// Restores finalize()'s output when the file has all of it, consistent; else leaves it to
// finalize(). Returns whether it was restored.
bool local_shard::load_derived(const index_reader& r, uint32_t slot) {
  const uint32_t s = slot + 1;
  std::span<const double> avgdl, len_norm, champ_part;
  std::span<const float> block_max;
  std::span<const int64_t> block_max_time;
  std::span<const uint32_t> champ_at, champ_doc, champ_date;
  if (!r.get(section_tag(s, f_avgdl), avgdl) || !r.get(section_tag(s, f_len_norm), len_norm) ||
      !r.get(section_tag(s, f_block_max), block_max) ||
      !r.get(section_tag(s, f_block_max_time), block_max_time) ||
      !r.get(section_tag(s, f_champ_at), champ_at) ||
      !r.get(section_tag(s, f_champ_part), champ_part) ||
      !r.get(section_tag(s, f_champ_doc), champ_doc) ||
      !r.get(section_tag(s, f_champ_date), champ_date)) {
    return false;
  }
  if (avgdl.size() != 1 || len_norm.size() != docs_.size() || block_max.size() != skips_.size() ||
      block_max_time.size() != skips_.size() || champ_at.size() != terms_.size() ||
      champ_part.size() != champ_doc.size() || champ_date.size() != champ_doc.size()) {
    return false;
  }
  for (uint32_t at : champ_at) {
    if (at != UINT32_MAX && (at > champ_doc.size() || champ_doc.size() - at < kChampLen)) {
      return false;
    }
  }
  // (The lists' docs are read whole only in a file this process did not just write, as in
  // load(); so are the impact lists' and the prune tables' below.)
  for (size_t i = 0; !r.written_here() && i < champ_doc.size(); ++i) {
    if (champ_doc[i] >= docs_.size() || champ_date[i] >= docs_.size()) {
      return false;
    }
  }
  avgdl_ = avgdl[0];
  copy_to(len_norm_, len_norm);
  // The block maxima are read in place, like the skip entries.
  std::vector<float>().swap(block_max_store_);
  std::vector<int64_t>().swap(block_max_time_store_);
  block_max_ = block_max;
  block_max_time_ = block_max_time;
  copy_to(champ_at_, champ_at);
  // The champion lists are read in place (and released with the sections copied: their pages
  // fault back in as terms ask for them).
  std::vector<double>().swap(champ_part_store_);
  std::vector<uint32_t>().swap(champ_doc_store_);
  std::vector<uint32_t>().swap(champ_date_store_);
  champ_part_ = champ_part;
  champ_doc_ = champ_doc;
  champ_date_ = champ_date;
  loaded_avgdl_ = avgdl_;
  load_impact(r, s);
  return true;
}

// The impact terms' sections, when present and consistent (else finalize() computes them).
void local_shard::load_impact(const index_reader& r, uint32_t s) {
  saved_impact x;
  if (!r.get(section_tag(s, f_impact_terms), x.terms) ||
      !r.get(section_tag(s, f_impact_at), x.at) || !r.get(section_tag(s, f_impact_doc), x.doc) ||
      !r.get(section_tag(s, f_impact_part), x.part) ||
      !r.get(section_tag(s, f_impact_rows), x.rows)) {
    return;
  }
  const size_t m = x.terms.size();
  bool ok = m <= kImpactTermsMost && x.at.size() == m + 1 && x.at[0] == 0 &&
            x.at[m] == x.doc.size() && x.part.size() == x.doc.size() &&
            x.rows.size() == (m == 0 ? 0 : docs_.size()) &&
            reinterpret_cast<uintptr_t>(x.rows.data()) % alignof(impact_row) == 0;
  for (size_t i = 0; ok && i < m; ++i) {
    ok = x.terms[i] < terms_.size() && x.at[i] <= x.at[i + 1] &&
         x.at[i + 1] - x.at[i] <= terms_[x.terms[i]].df;
  }
  for (size_t j = 0; ok && !r.written_here() && j < x.doc.size(); ++j) {
    ok = x.doc[j] < docs_.size();
  }
  x.valid = ok;
  loaded_impact_ = x;
}

// The prune_index's tables besides the impact terms', when present and consistent with the
// shard and with this build's dense_divisor (else finalize() derives them). Bounds only: a
// wrong value the checksums let through answers wrongly, never reads out of bounds.
void local_shard::load_prune(const index_reader& r, uint32_t s) {
  saved_prune x;
  std::span<const uint32_t> head;
  if (!r.get(section_tag(s, f_prune_head), head) ||
      !r.get(section_tag(s, f_prune_set_of_term), x.set_of_term) ||
      !r.get(section_tag(s, f_prune_bits), x.bits) ||
      !r.get(section_tag(s, f_prune_by_time), x.by_time) ||
      !r.get(section_tag(s, f_prune_time_cum), x.time_cum) ||
      !r.get(section_tag(s, f_prune_tag_at), x.tag_at) ||
      !r.get(section_tag(s, f_prune_tag_docs), x.tag_docs) ||
      !r.get(section_tag(s, f_prune_len_class), x.len_class) || head.size() != 5) {
    return;
  }
  const uint64_t n = docs_.size();
  x.words = head[1];
  x.min_len = head[2];
  x.time_step = head[3];
  const uint32_t sets = head[4];
  bool ok = head[0] == dense_divisor && x.words == (n + 63) / 64 &&
            x.time_step == time_step_of(n) && x.set_of_term.size() == terms_.size() &&
            x.bits.size() == uint64_t{sets} * x.words &&
            x.time_cum.size() == time_cums_of(n, x.time_step) * x.words && x.by_time.size() == n &&
            x.len_class.size() == n && x.tag_at.size() == tag_names_.size() + 1 &&
            x.tag_at[0] == 0 && x.tag_at.back() == x.tag_docs.size();
  for (size_t t = 0; ok && t < terms_.size(); ++t) {
    ok = x.set_of_term[t] < sets || x.set_of_term[t] == UINT32_MAX;
  }
  const bool whole = !r.written_here();
  for (size_t i = 0; ok && whole && i < n; ++i) {
    ok = x.by_time[i] < n;
  }
  for (size_t t = 0; ok && t + 1 < x.tag_at.size(); ++t) {
    ok = x.tag_at[t] <= x.tag_at[t + 1];
  }
  for (size_t i = 0; ok && whole && i < x.tag_docs.size(); ++i) {
    ok = x.tag_docs[i] < n;
  }
  x.valid = ok;
  loaded_prune_ = x;
}

std::string local_shard::load(const index_reader& r, uint32_t slot,
                              const std::shared_ptr<const corpus_file>& corpus) {
  static_assert(sizeof(term_slot) == sizeof(disk_term_slot));
  shard_sections x;
  if (!x.read(r, slot + 1)) {
    return fmt::format("shard {}: a section is missing", slot);
  }
  if (std::string why = x.check(kTextRaw, corpus.get(), !r.written_here()); !why.empty()) {
    return fmt::format("shard {}: {}", slot, why);
  }
  stats_ = x.stats[0];
  docs_.clear();
  docs_.reserve(x.docs.size());  // filled without a zeroing pass first
  const char* story_base = reinterpret_cast<const char*>(x.stories.data());
  for (const disk_doc& d : x.docs) {
    docs_.push_back({story_base + d.off, d.text_len, d.tags_off});
  }
  copy_to(time_, x.time);
  copy_to(doc_tags_, x.doc_tags);
  tag_names_.clear();
  for (size_t t = 0, at = 0; t < x.tag_lens.size(); at += x.tag_lens[t++]) {
    tag_names_.emplace_back(reinterpret_cast<const char*>(x.tag_chars.data()) + at, x.tag_lens[t]);
  }
  copy_to(tag_escape_, x.tag_escape);
  copy_to(tag_table_, x.tag_table);
  copy_to(title_len_, x.title_len);
  copy_to(text_len_, x.text_len);
  copy_to(term_chars_, x.term_chars);
  copy_to(terms_, x.terms);
  term_table_.resize(x.term_table.size());
  std::memcpy(term_table_.data(), x.term_table.data(), x.term_table.size_bytes());
  std::vector<skip_entry>().swap(skips_store_);
  skips_ = x.skips;  // read in place
  copy_to(pair_terms_, x.pair_terms);
  std::vector<uint32_t>().swap(pair_docs_store_);
  pair_docs_ = x.pair_docs;  // read in place, like the champion lists
  pair_posting_ranks_ = x.pair_posting_ranks[0];
  pair_rank_.assign(terms_.size(), UINT16_MAX);
  for (size_t r = 0; r < pair_terms_.size(); ++r) {
    pair_rank_[pair_terms_[r]] = static_cast<uint16_t>(r);
  }
  // The streams and the stories are read in place; the mapping lives as long as the shard.
  doc_stream_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.doc_stream.data()),
                                                       free_deleter{false});
  pos_stream_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.pos_stream.data()),
                                                       free_deleter{false});
  doc_stream_bytes_ = x.doc_stream.size();
  pos_stream_bytes_ = x.pos_stream.size();
  texts_ = std::unique_ptr<uint8_t, free_deleter>(const_cast<uint8_t*>(x.texts.data()),
                                                  free_deleter{false});
  texts_bytes_ = x.texts.size();
  if (index_file_reader f = r.file_reader()) {
    texts_file_ = std::make_shared<const index_file_reader>(std::move(f));
  }
  text_at_store_.clear();
  text_at_ = x.text_at;
  line_store_.clear();
  lines_ = x.text_lines;
  corpus_ = x.lines ? corpus : nullptr;
  text_dict_store_.clear();
  text_dict_ = x.text_dict;
  if (!digest_text_dict()) {
    return fmt::format("shard {}: a text dictionary zstd does not take", slot);
  }
  mapping_ = r.mapping();
  load_derived(r, slot);
  load_prune(r, slot + 1);
  // What was copied (or only checked) leaves the process' resident set: its pages stay in the
  // page cache, and nothing reads them through the mapping again (a section left off this list
  // by mistake still reads right: its pages fault back in, a cost only). The sections read in
  // place that the checks above read whole (the stories' heads, the impact rows and lists, the
  // prune tables) are released too: a query touches few of their pages, which fault back in as
  // it reads them; the texts and their entries are read through the file (texts_file_), never
  // the mapping.
  static constexpr uint32_t in_place[] = {f_text_dict, f_doc_stream, f_pos_stream};
  r.release(slot + 1, in_place);
  return {};
}

}  // namespace tollgate::search
