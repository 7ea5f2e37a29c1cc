// The persisted index: a corpus file's shards, built once and written to an index file that
// later starts map instead of parsing and indexing the corpus again.
//
// Lifecycle of an index file (load_indexed):
//   1. The corpus' fingerprint is taken: its size, its mtime (ns) and a hash of a sample of its
//      bytes (16 blocks of 64 KiB spread over it, all of it when smaller).
//   2. Each candidate path (index_paths) is tried in order. A file is used only when its header
//      holds this format version, the same fingerprint and shard count, its length is the one
//      written, and every section's checksum matches; then it is mapped and its shards load in
//      place (stories and posting streams stay in the mapping, the small tables are copied).
//   3. Otherwise the corpus is loaded as load_jsonl_file does, and the shards are written to
//      the first candidate that takes them (each as soon as it is sealed, while the others
//      build; should that write fail, to the next candidate once built): a temporary file
//      beside it, fsync, rename, fsync of the directory, so a reader sees the old file or the
//      whole new one. The file written is
//      then opened as in 2. and served from, as every later start is, and the built shards are
//      given back (at 1M stories 1.36 GB resident falls to 0.56 GB). None writable (or the file
//      does not open again): the built shards serve from memory, and the next start builds
//      again when none was written.
//   The corpus is opened once: its fingerprint, the build's text and the shards' reads of their
//   stories' texts (which stay in the corpus: the index keeps each story's line place, format
//   5) all go through that descriptor.
//   4. The backend finalizes the shards (norms, block maxima, champion lists are derived, not
//      stored), so a loaded index answers exactly what a fresh build does.
//
// Layout (little-endian): a 4 KiB header {magic, format version, fingerprint, shard count,
// loaded/skipped counts, file length, directory offset and count, checksums}, then sections
// aligned to 64 bytes, then the directory: one {tag, offset, bytes, checksum} per section. A
// tag names a shard slot and one of its arrays; a reader looks sections up by tag, so a later
// format adds sections (e.g. derived per-block metadata) without moving the others. Any change
// to what a section holds or how it is built (tokenizer, postings layout) bumps
// index_format_version.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tollgate/common/result.h"
#include "tollgate/search/backend.h"

namespace tollgate::search {

/// 2: each shard also holds its table of adjacent pairs of frequent words (phrase counts).
/// 3: the stories' texts apart from their short fields, each compressed alone (zstd, with a
/// dictionary per shard).
/// 4: a posting's two frequencies share one byte in the doc stream (search/postings.h): most
/// postings are three bytes instead of four.
/// 5: a shard built from a corpus file keeps only where each story's line is in it; get_story
/// reads the text from the corpus (see corpus_text.h).
/// 6: each story's lengths, escape flags, score and comments are varints in front of its
/// fields (search/story_head.h); the per-doc record is 16 bytes, a doc's tags end where the
/// next doc's begin.
inline constexpr uint32_t index_format_version = 6;

/// Identifies a corpus file's content well enough to trust an index built from it.
struct corpus_fingerprint {
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t sample_hash = 0;
  bool operator==(const corpus_fingerprint&) const = default;
};
/// The fingerprint of the file at `path`, or why it cannot be had.
result<corpus_fingerprint, std::string> fingerprint_of(const std::string& path);

/// Where `serve` looks for and writes the index of `corpus`, in order: beside it
/// (`corpus` + ".tollgate-index"), then `data_dir`/index/NAME.HASH.tollgate-index (HASH: of
/// the corpus' absolute path). An empty data_dir leaves out the second.
std::vector<std::string> index_paths(const std::string& corpus, const std::string& data_dir);

/// An index file's bytes by part (for the reports of `index build` and `serve`).
struct index_parts {
  uint64_t stories = 0;    ///< stored stories: short fields, texts, doc records, times, tags
  uint64_t postings = 0;   ///< doc streams, skips, block maxima, champion lists
  uint64_t positions = 0;  ///< position streams
  uint64_t other = 0;      ///< term tables, length norms, pair tables, header, directory
  /// "N MB; per story: stories S B, postings P B, positions Q B, other O B" (the size in KB
  /// under 0.1 MB; "...; no stories" when story_count is 0)
  std::string per_story(uint64_t story_count) const;
};

/// What load_indexed did with the index files.
struct index_use {
  bool mapped = false;    ///< true: an index file that matched was found and mapped
  bool remapped = false;  ///< true: built, written to `path`, then served from it, mapped
  /// true: every section's checksum of the file mapped was read and held at this load. A
  /// remap trusts the file it wrote and synced a moment before (it is checked at the next
  /// start) and only brings it into the page cache: false.
  bool checked = false;
  std::string path;                ///< the file mapped or written; empty: none
  std::vector<std::string> notes;  ///< per file found but not used or not written: why
  index_parts parts;               ///< the file at `path`, by part
};

/// load_jsonl_file() through the persisted index (see the lifecycle above): maps the first
/// candidate in `paths` that matches the corpus, else builds and writes one and then serves
/// from that file, mapped, as a later start would (the build's memory is given back; a file
/// that does not open again leaves the built shards serving, with a note). The report is the
/// one the build gave (kept in the file). Corpus errors are load_jsonl_file's; index problems
/// are never errors, only notes.
result<std::unique_ptr<backend>, load_issue> load_indexed(const std::string& corpus,
                                                          std::span<const std::string> paths,
                                                          const load_options& opts,
                                                          load_report& report, index_use& use);

/// Builds the shards of `corpus` and writes them to `out` (atomically, as above). Errors: the
/// corpus' (line > 0: a bad line) or the file's (line 0). `parts`, when given: the file's.
result<void, load_issue> build_index_file(const std::string& corpus, const std::string& out,
                                          const load_options& opts, load_report& report,
                                          index_parts* parts = nullptr);

/// `tollgate index build --corpus F [--out FILE] [--shards N] [--skip-bad-lines true|false]`
/// (argv[0] is "index"). --help prints usage (exit 0); bad usage: stderr, exit 2; a corpus or
/// write error: stderr, exit 1.
int run_index_command(int argc, char** argv);
/// The flags `index build` takes (its parser refuses any other) and its usage text.
std::span<const std::string_view> index_build_flags();
std::string_view index_usage_text();

}  // namespace tollgate::search
