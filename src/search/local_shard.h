// local_shard: an in-process slice of the corpus: stored stories plus an inverted index.
//
// Lifecycle:
//   1. add() each story of this slot (copied into 1 MiB arena chunks; any order).
//   2. seal(): sorts stories by id (doc handle order == id_less order, so ties within a shard
//      break by doc), drops duplicate ids, tokenizes titles and texts and builds the postings,
//      then packs the stored stories (story_pack.cc): the short fields back to back; each text
//      compressed alone with a dictionary trained on the shard's texts, or, for a shard built
//      from a corpus file (texts_in()), left there: only each story's line place is kept.
//   3. finalize(global stats): per-doc BM25 length norms (query_plan's formula), block maxima,
//      champion lists. By the backend, or earlier by build_shards() once every shard it builds
//      is tokenized (the backend's finalize with the same average then has nothing to do).
//   4. Queries, concurrently from any number of cores, each with its own shard_workspace. A
//      query runs whole (search, add_doc_freqs) or in budgeted slices (search_slice,
//      doc_freqs_slice) whose state (cursors, heap, phase) stays in the workspace between them.
//
// Units: storage, hashing and the term table (local_shard.cc), index_build.cc, finalize.cc,
// evaluate.cc (the evaluation's start and steps, phrases), reference.cc, render.cc,
// story_pack.cc (stored texts), shard_file.cc (save/load); shared helpers in shard_impl.h. The
// types the shard is made of have headers of their own: the postings and their cursor
// (postings.h), the pruning index and its builder (prune_index.h), a core's evaluation state
// (shard_workspace.h), and the evaluators, one type per way of answering a query (evaluators.h:
// the pruned evaluation of queries without phrases in prune.cc, see docs/design.md; filters
// and date order in filter.cc; ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "search/postings.h"
#include "search/prune_index.h"
#include "search/shard_workspace.h"
#include "search/story_head.h"
#include "tollgate/common/buffer.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/shard.h"

struct ZSTD_DDict_s;  // <zstd.h>: a digested decompression dictionary

namespace tollgate::search {

class index_writer;  // index_file.h
class index_reader;
class index_file_reader;
class corpus_file;  // corpus_text.h

/// A story as parsed from a line; views valid only during add(). `line_at`, `line_len`: where
/// its line is in the corpus text (what texts_in() reads back).
struct story_in {
  std::string_view id, title, url, by, text;
  int64_t time = 0, score = 0, comments = 0;
  std::span<const std::string_view> tags;
  uint64_t line_at = 0, line_len = 0;
};

/// A story's line in its corpus file (byte offset and length, without the line end), as a
/// shard whose texts stay in the corpus keeps it, in memory and in its index file.
struct corpus_line {
  uint64_t at, len;
};

/// Whether queries without phrases take the pruned evaluation (prune.cc). Only tests turn it
/// off, to compare both paths; set it between queries, never during one.
inline bool prune_enabled = true;
/// ... and only when the rarest term has at least this many docs in the shard: below it the
/// one-pass leapfrog is cheaper than seeding, bounding and counting apart. Settable for tests.
inline uint32_t prune_min_lead_df = 8 * kBlockDocs;
/// The pruned evaluation finds the top k and the total in one walk of the lead's docs when the
/// share of them expected to match is below this (see begin_pruned). Settable for tests.
inline double one_pass_share = 0.25;
/// Two-word phrases of frequent words get their document count at build time (index_build.cc,
/// see docs/design.md): the words are the (at most pair_max_words) terms whose df, estimated
/// from the shard's first pair_sample_docs docs, is at least pair_min_df. A phrase of two of
/// them needs no postings walk for its df nor for the total of a search of it alone. Settable
/// so tests can vary them (pair_max_words 0: no table); set them before loading, never during.
inline uint32_t pair_min_df = 1024;
inline uint32_t pair_max_words = 1024;  // at most 65535 (ranks are 16-bit)
inline uint32_t pair_sample_docs = 4096;
/// The first pair_posting_words of those words (the most frequent) also index their adjacent
/// pairs as terms of their own, named "a\0b" (no query token holds a NUL), whose postings give
/// each doc's occurrences of the phrase "a b" in title and text: a search of such a phrase
/// alone is a one-term search of its pair term (champion lists, block maxima, exact df).
inline uint32_t pair_posting_words = 128;
/// Whether seal() compresses the stories' texts (story_pack.cc). Only tests turn it off, to
/// compare a packed shard with one whose texts are all stored raw; set it before loading.
inline bool pack_texts = true;
/// Whether a shard built from a corpus file leaves its texts there (texts_in(), index format 5)
/// rather than packing them like one built from text in memory. Only tests turn it off, to
/// test packed texts through index files; set it before loading.
inline bool texts_from_corpus = true;
/// A shard with at least this many postings finalizes on several threads. Settable so tests
/// can run the threaded path on a small corpus; set it before loading, never during.
inline uint64_t parallel_finalize_postings = 4'000'000;

/// The least docs in a shard for the intersection to prefetch its lead's rows or norms (2 MB of
/// rows, 512 KB of norms: about a core's L2; below it they mostly stay cached between queries).
inline constexpr size_t kPrefetchMinDocs = size_t{1} << 16;

/// A phrase check reads the words' positions: it counts as this many units of a slice's budget.
inline constexpr uint64_t kPhraseCost = 8;

/// A phrase's docs kept by its count's walk (a shard's) for the search that follows, up to this.
inline constexpr uint32_t kListedDocsMost = 4096;

class local_shard final : public shard_source {
 public:
  local_shard();
  ~local_shard() override;

  /// Phase 1. Not thread-safe.
  void add(const story_in& s, uint64_t line);
  /// Phase 1: takes over every story added to `other` (a shard filled by another parse thread),
  /// its line numbers shifted by `line_base`; `other` is left empty. The stored bytes move
  /// (no copy); tags are re-interned here. Not thread-safe.
  void absorb(local_shard&& other, uint64_t line_base);
  /// Phase 1: the corpus text the stories were added from is all of `file`, from offset 0:
  /// seal() keeps where each story's line is instead of packing its text, and text() reads the
  /// line back from `file` (see corpus_text.h).
  void texts_in(std::shared_ptr<const corpus_file> file) noexcept { corpus_ = std::move(file); }
  /// Whether its texts are read from its corpus file (texts_in(), or an index file of such a
  /// shard) rather than kept packed.
  bool texts_in_corpus() const noexcept { return corpus_ != nullptr; }
  /// Phase 2. Duplicate ids: the first occurrence (lowest line) stays; each later one is
  /// recorded in `dups` as {line, reason}. Not thread-safe (one thread per shard).
  /// `records`, when given, is the build's scratch record buffer, kept (and its pages, already
  /// faulted in) for the next shard a thread seals. `steps`, when given, advances by
  /// build_steps_indexed and build_steps_sealed per story as the work is done (progress).
  /// `counted`, when given, is incremented (release) and notified as soon as stats() are final:
  /// every story tokenized, before the postings are laid out, so that other threads can know
  /// the global average length (and finalize) while this seal goes on.
  void seal(std::vector<load_issue>& dups, out_buffer* records = nullptr,
            std::atomic<uint64_t>* steps = nullptr, std::atomic<uint32_t>* counted = nullptr);

  shard_stats stats() const override { return stats_; }
  /// Again with the same average length (global's), after it was done: nothing to do.
  void finalize(const shard_stats& global) override;
  /// Whether finalize() was done with global's average length.
  bool finalized_with(const shard_stats& global) const noexcept {
    return finalized_avgdl_ == average_length(global);
  }
  bool add_doc_freqs(const query_plan& plan, shard_workspace& ws, uint64_t* df) const override;
  bool search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const override;
  slice search_slice(const query_plan& plan, shard_workspace& ws, shard_answer& out, bool first,
                     uint64_t& budget) const override;
  slice doc_freqs_slice(const query_plan& plan, shard_workspace& ws, uint64_t* df, bool first,
                        uint64_t& budget) const override;
  result<uint32_t, errc> find(std::string_view id) const override;
  using shard_source::render_story;
  result<void, errc> render_story(uint32_t doc, bool with_text, json_out& out,
                                  pending_read* nowait) const override;

  /// The answer search() must give, computed the slow, obvious way for tests: tokenizes every
  /// stored story, scores every match (same BM25 formula and summation order), sorts fully.
  /// No postings, no pruning; allocates. Call after finalize().
  void reference_search(const query_plan& plan, shard_answer& out) const;

  size_t doc_count() const noexcept { return docs_.size(); }
  std::string_view id(uint32_t doc) const noexcept { return detail::head_id(docs_[doc].base); }
  /// The text of a sealed shard's `doc`: a view of the stored bytes, or of the calling thread's
  /// scratch buffers once read from the index file or decompressed into them, or of its parser
  /// once its line is read from the corpus file and parsed (valid until that thread's next
  /// text() call). No allocation once the scratch has grown to the longest text read.
  /// errc::unreadable when the stored bytes cannot be read or do not decompress, or when the
  /// line read from the corpus is not this story's (the corpus was changed in place) (the first
  /// such story of the process is logged).
  /// `nowait` (may be null): its reads from a file do not wait for the disk (errc::would_block,
  /// `nowait` saying which bytes; shard_source::render_story).
  result<std::string_view, errc> text(uint32_t doc, pending_read* nowait = nullptr) const;
  /// How many docs hold their text compressed (the others store it raw: empty, or compression
  /// did not make it smaller; none when the texts are read from the corpus file).
  size_t packed_texts() const noexcept;
  /// Bytes held by the shard: its stored stories and every table of the index, those read in
  /// place from an index file's mapping included (resident or not), and the ones finalize()
  /// derives (prune_index: bitsets, time order, tags, length classes). Capacities, not sizes.
  size_t memory_bytes() const noexcept;
  /// How many frequent words the shard's table of adjacent pairs covers (0: no table).
  size_t pair_words() const noexcept { return pair_terms_.size(); }
  /// How many impact terms the shard has (prune_index), and whether their lists and rows are
  /// an index file's (not derived at load).
  size_t impact_terms() const noexcept { return prune_.impact_terms.size(); }
  bool impact_from_file() const noexcept { return loaded_impact_.valid; }
  /// Whether its bitsets, time order, tags' docs and length classes were read from its index
  /// file (in place) rather than derived at load.
  bool prune_from_file() const noexcept { return loaded_prune_.valid; }

  /// The persisted index (shard_file.cc): save() writes a sealed shard's stories and postings
  /// as sections of `w` tagged with `slot`; load() makes an empty shard the one saved, reading
  /// the sections of `r` (checked already) in place: the stored stories and the posting streams
  /// stay in the mapping `r` holds (kept alive by the shard), the smaller tables are copied.
  /// A finalized shard also saves what finalize() derived, with the average length it used;
  /// finalize() with that same average then keeps what load() read (another recomputes it).
  /// load() returns an empty string or what is inconsistent.
  /// `corpus`: the corpus file open, for a file whose shards read their texts there (its
  /// absence then fails the load).
  void save(index_writer& w, uint32_t slot) const;
  /// save() in two parts: the sections seal() made (a sealed shard's, which finalize() does
  /// not change: they can be written while it runs), then what finalize() derived (nothing
  /// when not finalized).
  void save_sealed(index_writer& w, uint32_t slot) const;
  void save_derived(index_writer& w, uint32_t slot) const;
  std::string load(const index_reader& r, uint32_t slot,
                   const std::shared_ptr<const corpus_file>& corpus = nullptr);

 private:
  static constexpr uint32_t kEscapeId = 1, kEscapeTitle = 2, kEscapeUrl = 4, kEscapeBy = 8;
  static constexpr uint32_t kTextRaw = 16;  // sealed: the text is stored uncompressed
  // A story: its head (story_head.h: id, the kEscape* bits (which short fields need JSON
  // escaping) and kTextRaw, title, url, by, score, comments), then, before seal(), its text.
  struct doc_rec {
    const char* base;   // the head
    uint32_t text_len;  // bytes
    uint32_t tags_off;  // its tags: doc_tags_ from here to the next doc's tags_off
  };
  struct field_views;
  std::span<const uint32_t> tags_of(uint32_t doc) const noexcept;
  const term_info* lookup_term(std::string_view t) const noexcept;
  int64_t probe_term(std::string_view t, uint64_t h) const noexcept;
  uint32_t intern_term(std::string_view t, uint64_t h);
  int64_t lookup_tag(std::string_view t) const noexcept;
  uint32_t intern_tag(std::string_view t);
  char* arena_alloc(size_t n);
  void pack_stories();  // story_pack.cc
  result<std::string_view, errc> text_from_corpus(uint32_t doc, pending_read* nowait) const;
  bool digest_text_dict();  // ddict_ from text_dict_; false: zstd refuses it
  static std::string_view unpacked_text(const doc_rec& r) noexcept;  // before pack_stories()
  bool load_derived(const index_reader& r, uint32_t slot);
  void load_impact(const index_reader& r, uint32_t s);
  void load_prune(const index_reader& r, uint32_t s);
  struct index_builder;  // index_build.cc
  void build_index(out_buffer* records, std::atomic<uint64_t>* steps,
                   std::atomic<uint32_t>* counted);
  struct champ_lists {
    std::vector<double> part;
    std::vector<uint32_t> doc, date;
  };
  void join_champs(std::vector<champ_lists>& parts, const std::vector<size_t>& cut);
  template <class DocKeys>
  void finalize_terms(size_t from, size_t to, const DocKeys& keys, champ_lists& out);
  bool phrase_match(const query_plan& plan, shard_workspace& ws) const;
  // Occurrences of phrase `ph` in the cursors' current doc: 3 per title one + 1 per text one.
  double phrase_freq(const query_plan& plan, const phrase_span& ph, shard_workspace& ws,
                     uint32_t doc) const;
  // The length norm k1 (1 - b + b D / avgdl) of `doc` under the plan's avgdl.
  double length_norm(uint32_t doc, double avgdl) const noexcept;
  posting_cursor cursor_for(const term_info& t) const noexcept;
  void finish(shard_answer& out) const;
  // Evaluation (evaluate.cc): begin_search() opens the cursors and answers what needs no
  // postings walk (true: `out` is final); step() walks until done (true) or out of budget.
  bool begin_search(const query_plan& plan, shard_workspace& ws, shard_answer& out) const;
  bool step(const query_plan& plan, shard_workspace& ws, shard_answer& out, uint64_t& budget) const;
  bool open_cursors(const query_plan& plan, shard_workspace& ws) const;
  // The impact rows (or length norms; `classes`: and length classes) of the lead block's docs
  // from the current one, once per block.
  void prefetch_lead(shard_workspace& ws, bool classes) const;
  void prefetch_block(shard_workspace& ws, bool classes) const;
  bool accepts(const query_plan& plan, shard_workspace& ws, uint32_t doc) const;
  bool score(const query_plan& plan, shard_workspace& ws, uint32_t doc, bool full, double kth,
             double& s) const;
  bool blocks_below(const query_plan& plan, const shard_workspace& ws, double kth) const;
  uint32_t row_frequency(const shard_workspace& ws, size_t i, uint32_t doc) const;
  void choose_rows(const query_plan& plan, shard_workspace& ws) const;
  void plan_phrase_df(const query_plan& plan, const phrase_span& ph, shard_workspace& ws) const;
  // The pruning index's builder (prune_index.h) and the evaluators (evaluators.h) are types of
  // their own, each with its steps: they read the tables below and call the shared steps above
  // (accepts, score, cursor_for, ...), as friends rather than as members of the shard.
  friend struct prune_index_builder;
  friend struct single_term_eval;
  friend struct intersect_eval;
  friend struct pruned_eval;
  friend struct impact_eval;
  friend struct filter_eval;
  friend struct phrase_totals;
  friend struct phrase_walk_eval;
  friend struct pair_table;

  // stored stories
  struct free_deleter {
    free_deleter() noexcept : owned(true) {}
    explicit free_deleter(bool own) noexcept : owned(own) {}
    bool owned;  // false: memory of the index file's mapping (load())
    void operator()(void* p) const noexcept {
      if (owned) {
        std::free(p);
      }
    }
  };
  std::vector<std::unique_ptr<char, free_deleter>> chunks_;
  char* chunk_ptr_ = nullptr;
  size_t chunk_left_ = 0;
  size_t arena_bytes_ = 0;
  std::vector<doc_rec> docs_;
  // Texts once sealed (story_pack.cc): per doc, stored raw (kTextRaw) or compressed alone as
  // one zstd frame with the dictionary text_dict_, back to back in doc order: doc d's bytes
  // are texts_[text_at_[d], text_at_[d + 1]). Owned (a build) or in the index file's mapping.
  struct ddict_deleter {
    void operator()(ZSTD_DDict_s* d) const noexcept;
  };
  std::unique_ptr<uint8_t, free_deleter> texts_;
  size_t texts_bytes_ = 0;
  // A loaded shard's texts are read through the file, not the mapping: get_story reads one
  // text once, and a fault would map the 64 KB around it (null: a build's, read in memory).
  std::shared_ptr<const index_file_reader> texts_file_;
  std::vector<uint64_t> text_at_store_;  // a build's text_at_
  std::span<const uint64_t> text_at_;
  std::vector<uint8_t> text_dict_store_;  // a build's dictionary
  std::span<const uint8_t> text_dict_;
  std::unique_ptr<ZSTD_DDict_s, ddict_deleter> ddict_;  // text_dict_ digested (a copy)
  // Texts left in the corpus file (texts_in()): per doc its line there, read back and parsed
  // by text(); none of texts_, text_at_, text_dict_ then. lines_ is a build's own (line_store_,
  // which add() fills for every build) or the index file's mapping, read through texts_file_.
  std::shared_ptr<const corpus_file> corpus_;
  std::vector<corpus_line> line_store_;
  std::span<const corpus_line> lines_;
  std::vector<int64_t> time_;
  std::vector<uint64_t> line_;  // build only
  std::vector<uint32_t> doc_tags_;
  std::vector<std::string> tag_names_;
  std::vector<uint8_t> tag_escape_;  // per tag: 1 when its name needs JSON escaping
  std::vector<uint32_t> tag_table_;  // open addressing: tag id + 1, 0 = empty

  // index
  std::vector<uint32_t> title_len_, text_len_;
  std::vector<double> len_norm_;  // per doc: k1 (1 - b + b D / avgdl_)
  double avgdl_ = 1.0;            // the corpus average the norms (and bounds) were made with
  std::vector<char> term_chars_;
  std::vector<term_info> terms_;
  struct term_slot {
    uint64_t key;   // hash bits 40..63 << 40 | length << 32 | term index + 1; 0 = empty
    uint64_t head;  // the term's first 8 bytes, zero padded
  };
  std::vector<term_slot> term_table_;  // open addressing, power-of-two size
  // Posting streams: every byte is written by build_index's scatter, so they are allocated
  // without the zero-fill a vector would do (plus 16 zeroed bytes for over-reading loads).
  std::unique_ptr<uint8_t, free_deleter> doc_stream_, pos_stream_;
  size_t doc_stream_bytes_ = 0, pos_stream_bytes_ = 0;
  // Per block of a term's postings: its skip entry, the largest term_part and the latest time
  // of its docs. Read where they are: a build's own (the _store_ vectors) or the index file's
  // mapping, where only the blocks of the terms asked for become resident.
  std::vector<skip_entry> skips_store_;
  std::vector<float> block_max_store_;
  std::vector<int64_t> block_max_time_store_;
  std::span<const skip_entry> skips_;
  std::span<const float> block_max_;
  std::span<const int64_t> block_max_time_;
  // Champion lists (see kChampLen): per term, the first entry of its kChampLen entries in
  // champ_part_/champ_doc_ (best term_part first, ties by doc) and champ_date_ (latest time
  // first, ties by doc), or UINT32_MAX when the term has none. The lists are read where they
  // are: a build's own (the _store_ vectors) or the index file's mapping, where only the pages
  // of the terms asked for become resident.
  std::vector<uint32_t> champ_at_;
  std::vector<double> champ_part_store_;
  std::vector<uint32_t> champ_doc_store_;
  std::vector<uint32_t> champ_date_store_;
  std::span<const double> champ_part_;
  std::span<const uint32_t> champ_doc_;
  std::span<const uint32_t> champ_date_;
  prune_index prune_;  // computed by finalize
  // The impact terms' lists and rows as an index file holds them (load_derived), for
  // compute_prune_index to take instead of computing them; valid only with the rest of
  // finalize()'s output read from the same file.
  struct saved_impact {
    bool valid = false;
    std::span<const uint32_t> terms, at, doc;
    std::span<const float> part;
    std::span<const impact_row> rows;
  };
  saved_impact loaded_impact_;
  // The rest of the prune_index as an index file holds it (load_prune): the same for any
  // average length, so valid whenever the file's sections are there and consistent.
  struct saved_prune {
    bool valid = false;
    uint32_t words = 0, min_len = 0, time_step = 1;
    std::span<const uint32_t> set_of_term, by_time, tag_at, tag_docs;
    std::span<const uint64_t> bits, time_cum;
    std::span<const uint8_t> len_class;
  };
  saved_prune loaded_prune_;
  // Adjacent pairs of frequent words (index_build.cc): the words (term indices) by rank, per
  // term its rank or UINT16_MAX, and per pair (rank a * words + rank b) how many docs hold a
  // directly followed by b within one field; pair_docs_ is a build's own (pair_docs_store_) or
  // the index file's mapping.
  std::vector<uint32_t> pair_terms_;
  std::vector<uint16_t> pair_rank_;
  std::vector<uint32_t> pair_docs_store_;
  std::span<const uint32_t> pair_docs_;
  uint32_t pair_posting_ranks_ = 0;  // the ranks below it have pair terms
  // Tells shards apart in a workspace's phrase_totals (an address can be reused).
  static uint64_t next_serial() noexcept {
    static std::atomic<uint64_t> n{0};
    return n.fetch_add(1, std::memory_order_relaxed) + 1;  // only unique, orders nothing
  }
  const uint64_t serial_ = next_serial();
  shard_stats stats_;
  std::shared_ptr<const void> mapping_;  // the index file a loaded shard's streams point into
  double loaded_avgdl_ = -1;     // load(): the avgdl of the finalize() output read from the file
  double finalized_avgdl_ = -1;  // the avgdl the last finalize() was done with
};

/// 64-bit hash of bytes (little-endian reads); stable across runs and nodes.
uint64_t hash_bytes(std::string_view s) noexcept;

/// How many CPUs this process may run on (its affinity mask, e.g. `taskset` or a cpuset), at
/// least 1: the loading and build threads. More threads than that only take turns on the same
/// cores, each evicting the others' tables from the caches.
uint32_t usable_cpus() noexcept;

}  // namespace tollgate::search
