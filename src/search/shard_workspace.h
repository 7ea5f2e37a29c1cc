// shard_workspace: one core's evaluation state for local shards, reused query after query: the
// cursors, the heap's bounds and where a sliced evaluation stands (eval_state), so that a search
// resumes where its last slice stopped. Shard-local to its core; never shared.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "search/postings.h"
#include "tollgate/search/query.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

/// A phrase's matches in one shard as its document frequency counted them (doc_freqs_slice),
/// so that a search for that phrase alone, which must count the same matches, need not.
struct known_phrase_total {
  uint64_t shard = 0;             ///< the shard's serial; 0: empty
  uint32_t len = 0;               ///< bytes of `words`
  std::array<char, 256> words{};  ///< the phrase's words in order, each followed by a NUL
  uint64_t total = 0;
  /// The phrase's docs in the shard, ascending, when its count's walk kept them all (listed)
  std::vector<uint32_t> docs;
  bool listed = false;
};

/// Where a local shard's evaluation stands between slices (search_slice).
struct eval_state {
  enum mode_t : uint8_t {
    done,
    single,
    intersect,
    pruned,
    filtered,
    time_walk,
    listed,
    phrase_walk
  } mode = done;
  bool by_date = false;
  // pruned: the top k first (the lead's blocks, bounded), then the total (counted apart)
  bool counting = false;
  bool all_dense = false;  ///< counting: every term has a bitset
  bool one_pass = false;   ///< some term has no bitset: top k and total in one walk
  enum impact_t : uint8_t { impact_none, impact_seeded, impact_found } impact = impact_none;
  bool time_filtered = false;  ///< since or until set
  double kn_min = 0;           ///< the smallest length norm of the shard under avgdl
  uint32_t seed_at = 0;        ///< the first seed not below the lead's doc
  bool total_known = false;    ///< the total is a phrase's known count (no counting phase)
  uint64_t known_total = 0;
  uint32_t word = 0;                  ///< counting by bitsets: the next word (listed: doc)
  uint32_t bound_block = UINT32_MAX;  ///< the lead block whose bounds term_ub holds
  uint32_t pf_block = UINT32_MAX;     ///< the lead block whose docs' lines were prefetched
  double block_ub = 0;                ///< that block's bound on any of its docs' keys
  double avgdl = 0;                   ///< the average D the norms use
  double bound_scale = 1;             ///< block maxima scale under another corpus average
  bool filter_on = false;             ///< ws.filter holds the time window and tags (pruned)
  uint32_t rank = 0;                  ///< time_walk: the rank below the next one to visit
  uint32_t rank_lo = 0;               ///< time_walk: the window's lowest rank
  mode_t began = done;                ///< search(): the mode begin_search chose (for tests)

  const double* kn_class = nullptr;  ///< pruned: per length class, its norm (a lower bound)
  uint64_t below_f = 0;  ///< pruned: docs rejected by their length class's frequency threshold
};

/// Per-core evaluation state for local shards.
struct shard_workspace {
  eval_state ev;
  std::vector<posting_cursor> cursors;  // in term order
  std::vector<uint32_t> order;          // cursor indices by ascending df
  std::vector<uint32_t> term_ids;       // per cursor: the shard's term index
  std::vector<uint32_t> tag_ids;
  // per cursor: its term's bitset or nullptr (in the intersection, only those of terms in at
  // most half the docs, tested before their seeks when `probe`)
  std::vector<const uint64_t*> sets;
  bool probe = false;
  std::vector<uint32_t> shallow;     // per cursor: the block bounds read up to (pruned)
  std::vector<double> term_ub;       // per cursor: idf x its bound in the lead block
  std::vector<uint32_t> seeds;       // docs offered before the walk, ascending (pruned)
  std::vector<uint64_t> seen;        // impact_top: the docs it visited (a bitset)
  std::vector<uint32_t> seen_docs;   // ... and the same docs, to clear it
  std::vector<uint32_t> impact_pos;  // impact_top: per term, its next list entry
  // Per cursor: the impact term number whose rows give its frequencies (never sought), or
  // UINT32_MAX; rows_on when one does (set by begin_search, plans without phrases only).
  std::vector<uint32_t> row_slot;
  bool rows_on = false;
  std::vector<uint64_t> filter, tag_bits;           // the docs passing the time window and tags
  std::array<known_phrase_total, 8> phrase_totals;  // the latest phrases' counts, any shard
  uint32_t phrase_totals_next = 0;                  // the entry to replace next
  // a phrase's document frequency (add_doc_freqs): the phrase as a query of its own
  std::vector<std::string_view> sub_terms;
  std::vector<uint32_t> sub_phrase_terms;
  shard_answer sub_answer;
  query_plan sub_plan{};
  phrase_span sub_whole{};
  // two-word phrases searched as their pair terms (begin_search): the plan step() then follows
  bool pair_on = false;
  std::string pair_name;                     // the pair terms' names back to back
  std::vector<std::string_view> pair_terms;  // the plan's words that stand alone, then the pairs
  std::vector<double> pair_idf;
  std::vector<uint8_t> pair_words;  // per term of the searched plan: a word of a phrase
  query_plan pair_plan{};
  uint32_t df_phrase = 0;       // doc_freqs_slice: the phrase being counted
  bool df_sub_running = false;  // ... and whether its sub-search has begun
  bool keep_docs = false;       // ... keeping its matches in kept_docs (intersect_step)
  std::vector<uint32_t> kept_docs;
  std::vector<uint32_t> listed_docs;  // listed: the phrase's docs to score (listed_step)

  // pruned top k: per length class, its norm (made for the average length kn_class_avgdl), and
  // the lead's least weighted frequency (3 x title + text tf) that can reach the k-th key with
  // every other term at its largest block maximum (term_max); valid where f_gen[c] ==
  // f_gen_now, made for the k-th key f_kth; f_age: docs tested since they were invalidated
  std::array<double, 256> kn_class{};
  double kn_class_avgdl = 0;
  std::vector<double> term_max;
  std::array<uint32_t, 256> f_min{};
  std::array<uint32_t, 256> f_gen{};
  uint32_t f_gen_now = 0;
  double f_kth = 0;
  uint32_t f_age = 0;
  shard_workspace() {
    sub_terms.reserve(64);
    sub_phrase_terms.reserve(64);
    sub_answer.hits.reserve(2);
    cursors.reserve(64);
    order.reserve(64);
    term_ids.reserve(64);
    tag_ids.reserve(max_tags);
    sets.reserve(64);
    shallow.reserve(64);
    term_ub.reserve(64);
    seeds.reserve(64 * kChampLen);
    row_slot.reserve(64);
    pair_name.reserve(512);
    pair_terms.reserve(64);
    pair_idf.reserve(64);
    pair_words.reserve(64);
  }
};

}  // namespace tollgate::search
