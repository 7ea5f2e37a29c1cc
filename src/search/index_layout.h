// The index file's bytes, in one place: the container's header and directory (index_writer
// writes them, index_reader checks them) and what a shard's sections hold (local_shard's
// save/load in shard_file.cc lay a shard out in them). The layout in prose and the lifecycle are
// in include/tollgate/search/index_file.h. A change to any struct here, or to what a section
// holds, bumps index_format_version; fields are never renumbered, only added.
#pragma once

#include <cstddef>
#include <cstdint>

#include "search/index_file.h"

namespace tollgate::search::index_layout {

// ---- the container ----

inline constexpr char kMagic[8] = {'T', 'G', 'I', 'N', 'D', 'E', 'X', '\n'};
inline constexpr size_t kHeaderRoom = 4096;
inline constexpr size_t kAlign = 64;
// O_DIRECT's alignment of offsets, sizes and buffers: the largest logical block size in use.
inline constexpr size_t kDirectAlign = 4096;

struct file_header {
  char magic[8];
  uint32_t version;
  uint32_t shards;
  uint64_t corpus_size;
  int64_t corpus_mtime_ns;
  uint64_t corpus_sample_hash;
  uint64_t loaded, skipped;
  uint64_t file_bytes;
  uint64_t dir_offset, dir_count, dir_checksum;
  uint64_t header_checksum;  // of the bytes above
};
static_assert(sizeof(file_header) == 96 && sizeof(file_header) <= kHeaderRoom);

inline uint64_t sum_of(const void* p, size_t n) {
  index_checksum c;
  c.update(p, n);
  return c.final();
}

struct dir_entry {  // as index_writer::entry writes it
  uint32_t tag, reserved;
  uint64_t offset, bytes, checksum;
};
static_assert(sizeof(dir_entry) == 32);

// ---- a shard's sections ----

// What a shard's sections hold (the low byte of their tags). Never renumber: add new ones.
enum shard_field : uint32_t {
  f_stats = 1,
  f_docs,     // disk_doc per doc, in doc order
  f_stories,  // each doc's head (story_head.h) back to back (format 3: the text apart)
  f_time,
  f_doc_tags,
  f_tag_chars,  // tag names back to back
  f_tag_lens,
  f_tag_escape,
  f_tag_table,
  f_title_len,
  f_text_len,
  f_term_chars,
  f_terms,
  f_term_table,
  f_doc_stream,  // with its 16 bytes of padding
  f_pos_stream,
  f_skips,
  // What finalize() derived (optional: a file without them is finalized at load)
  f_avgdl,  // the one average length the rest was made with
  f_len_norm,
  f_block_max,
  f_block_max_time,
  f_champ_at,
  f_champ_part,
  f_champ_doc,
  f_champ_date,
  // The table of adjacent pairs of frequent words (format 2)
  f_pair_terms,
  f_pair_docs,
  f_pair_posting_ranks,  // the pair table's ranks that have pair terms
  // The texts (format 3, story_pack.cc): per doc a zstd frame or the raw text (kTextRaw),
  // back to back; each doc's first byte (one more entry: the end); the shard's dictionary
  f_texts,
  f_text_at,
  f_text_dict,
  // The impact terms (prune_index, derived: optional): their term indices, lists (first entry
  // per term, one more at the end; docs; parts) and one row per doc
  f_impact_terms,
  f_impact_at,
  f_impact_doc,
  f_impact_part,
  f_impact_rows,
  // The rest of the prune_index (derived: optional; prune_index.h): {dense_divisor, words,
  // min_len, time_step, bitsets}; per term its bitset or UINT32_MAX; the bitsets; the docs by
  // time; the cumulative time bitsets; per tag its first entry (one more at the end) and the
  // tags' docs; per doc its length class
  f_prune_head,
  f_prune_set_of_term,
  f_prune_bits,
  f_prune_by_time,
  f_prune_time_cum,
  f_prune_tag_at,
  f_prune_tag_docs,
  f_prune_len_class,
  // Texts left in the corpus file (format 5, local_shard::texts_in): per doc its line's place
  // there (corpus_line). A shard has these or f_texts, f_text_at and f_text_dict.
  f_text_lines,
};

// A doc_rec with its story's head's place in f_stories instead of a pointer (format 6; the
// heads tile f_stories in doc order, the tags' runs f_doc_tags).
struct disk_doc {
  uint64_t off;
  uint32_t text_len, tags_off;
};
static_assert(sizeof(disk_doc) == 16);

struct disk_term_slot {  // local_shard::term_slot's layout
  uint64_t key, head;
};

// Adds a section of `bytes` to its part (by the field in its tag's low byte).
void count_part(index_parts& p, uint32_t tag, uint64_t bytes);

// A file's bytes by part: its sections (each with a tag and a size in bytes) counted by
// count_part, the rest (header, directory, padding) as other.
template <class Sections>
index_parts parts_of(const Sections& sections, uint64_t file_bytes) {
  index_parts p;
  for (const auto& s : sections) {
    count_part(p, s.tag, s.bytes);
  }
  p.other = file_bytes - p.stories - p.postings - p.positions;
  return p;
}

}  // namespace tollgate::search::index_layout
