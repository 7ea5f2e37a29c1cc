// The evaluators of local_shard, one type each. local_shard::begin_search() (evaluate.cc) picks
// one per query and records it in eval_state::mode; local_shard::step() runs its step until the
// query is done or the slice's budget is spent:
//
//   mode       evaluator         unit              queries
//   single     single_term_eval  evaluate.cc       one term, no filters (block skipping; a small
//                                                  k from the champion lists, at the start)
//   intersect  intersect_eval    evaluate.cc       the leapfrog: phrases, a rare lead, or
//                                                  prune_enabled off
//   pruned     pruned_eval       prune.cc          no phrases (or one whose total is known): the
//                                                  top k by block bounds, the total apart
//   filtered   filter_eval       filter.cc         ... with since/until or tags that pass few docs
//   time_walk  filter_eval       filter.cc         ... sorted by date, every term dense (one
//                                                  term without filters too)
//   listed     phrase_totals     phrase_totals.cc  a phrase whose docs its document frequency
//                                                  kept
//   phrase_walk phrase_walk_eval phrase_walk.cc    a two-word phrase alone, no filters (also
//                                                  its count's sub-search): the leapfrog in
//                                                  batches
//
// and, consulted by them: impact_eval (impact_eval.cc), the top k of the commonest words from
// their impact lists, which seeds or replaces the pruned walk; pair_table (pair_table.cc), the
// table of adjacent pairs of frequent words, which counts a two-word phrase and rewrites phrases
// into pair terms.
//
// Each evaluator is stateless: what it needs between slices is in the shard_workspace (cursors,
// heap, eval_state), so a sliced search resumes where its last slice stopped. Each is a friend
// of local_shard and takes the shard as its first argument: it reads the shard's tables (the
// postings, block maxima, prune_index, times, norms) and calls its shared steps (accepts, score,
// cursor_for; shard_impl.h). The shard is read-only here: thread-safe for any number of cores,
// each with its own workspace.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "search/postings.h"
#include "search/shard_workspace.h"
#include "tollgate/search/shard.h"

namespace tollgate::search {

class local_shard;

/// One term, no filters: every posting matches, so the total is its df; blocks whose maximum
/// cannot reach the heap are skipped undecoded, and a small k may be answered from the term's
/// champion list without touching the postings.
struct single_term_eval {
  static bool single_term_champions(const local_shard& shard, uint32_t term, bool by_date,
                                    double idf, size_t k, shard_answer& out);
  template <bool Bounded>  // false: no budget accounting at all (search())
  static bool single_term_step(const local_shard& shard, const query_plan& plan,
                               shard_workspace& ws, shard_answer& out, uint64_t& budget);
};

/// The leapfrog intersection with block-max bounds: the rarest term leads, the others seek to
/// its docs; every match is counted, checked against the phrases and filters, and scored unless
/// the block maxima rule it out of a full heap. One unit with the phrase checks (evaluate.cc),
/// so that they inline into its loop.
struct intersect_eval {
  template <bool Bounded>  // false: no budget accounting at all (search())
  static bool intersect_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                             shard_answer& out, uint64_t& budget);

 private:
  struct lineup {  // the workspace's parts align() reads, held for one step
    posting_cursor* cursors;
    const uint32_t* order;
    size_t terms;
    const uint64_t* const* sets;
    const uint32_t* row_slot;
    bool rows_on;
    bool probe;
  };
  template <bool Rows>  // whether a term may be read from its impact row (l.rows_on)
  static bool align(const local_shard& shard, const lineup& l, posting_cursor& lead, bool& end);
};

/// The pruned evaluation of queries without phrases (prune.cc): the top k by the lead's blocks
/// and per-doc bounds, the total counted apart by bitsets or the lead's walk; or both in one
/// walk when few of the lead's docs are expected to match.
struct pruned_eval {
  static void begin_pruned(const local_shard& shard, const query_plan& plan, shard_workspace& ws);
  static void seed_heap(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                        shard_answer& out);
  static bool pruned_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          shard_answer& out, uint64_t& budget);

 private:
  static void reopen_cursors(const local_shard& shard, shard_workspace& ws);
  static bool lead_block_bound(const local_shard& shard, const query_plan& plan,
                               shard_workspace& ws);
  static bool top_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                       shard_answer& out, uint64_t& budget);
  static double doc_bound(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          double kn, bool& end);
  static uint32_t lead_f_min(const query_plan& plan, shard_workspace& ws, double kn, double kth);
  static void fill_term_max(const local_shard& shard, shard_workspace& ws);
  static bool reaches_f_min(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                            double kth, const posting_cursor& lead);
  static void top_doc(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                      std::vector<hit>& heap, bool& end);
  static bool others_dense(const query_plan& plan, const shard_workspace& ws) noexcept;
  template <bool Offer>
  static bool lead_walk(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                        shard_answer& out, uint64_t& budget);
  static bool lead_matches(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                           bool& more);
  static bool seek_sparse(shard_workspace& ws, uint32_t doc, bool& end);
  static void offer_match(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          std::vector<hit>& heap, uint32_t doc);
  static double match_bound(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                            uint32_t doc, double kn);
  static bool count_dense_step(const local_shard& shard, const query_plan& plan,
                               shard_workspace& ws, shard_answer& out, uint64_t& budget);
};

/// The top k of a conjunction of the shard's commonest words (prune_index's impact terms) by
/// the threshold algorithm over their lists of best docs (impact_eval.cc): the answer, or the
/// seeds of the pruned walk when a list runs out first.
struct impact_eval {
  static bool impact_top(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                         shard_answer& out);
};

/// Filters and date order (filter.cc): queries without phrases with since/until or tags, or
/// sorted by date; reached from the pruned evaluation's start.
struct filter_eval {
  static bool begin_filtered(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                             shard_answer& out);
  static bool begin_time_walk(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                              shard_answer& out);
  static bool filtered_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                            shard_answer& out, uint64_t& budget);
  static bool time_walk_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                             shard_answer& out, uint64_t& budget);

 private:
  static void time_ranks(const local_shard& shard, const query_plan& plan, uint32_t& lo,
                         uint32_t& hi) noexcept;
  static uint64_t build_filter(const local_shard& shard, const query_plan& plan,
                               shard_workspace& ws);
  static uint64_t count_sets(const local_shard& shard, const shard_workspace& ws) noexcept;
};

/// A two-word phrase alone, no filters (the sub-search of a phrase's count is one): the
/// leapfrog's docs, count and heap, from batches of the lead's docs whose lookups in the other
/// word run side by side (phrase_walk.cc).
struct phrase_walk_eval {
  static bool fits(const query_plan& plan, const shard_workspace& ws) noexcept;
  template <bool Bounded>
  static bool walk_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                        shard_answer& out, uint64_t& budget);
};

/// A phrase's matches in a shard, counted once (phrase_totals.cc): its document frequency's walk
/// leaves the count, and up to kListedDocsMost docs, in the workspace (known_phrase_total), so
/// that the search of that phrase alone that follows skips the count (known_total) or scores
/// just the docs kept (listed_phrase, listed_step).
struct phrase_totals {
  static void remember_phrase_total(const local_shard& shard, const query_plan& plan,
                                    const phrase_span& ph, shard_workspace& ws, uint64_t total);
  static bool known_total(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          uint64_t& total);
  static bool listed_phrase(const local_shard& shard, const query_plan& plan, shard_workspace& ws);
  static bool listed_step(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                          shard_answer& out, uint64_t& budget);
  static bool lookup_phrase_total(const local_shard& shard, const query_plan& plan,
                                  const phrase_span& ph, const shard_workspace& ws,
                                  uint64_t& total);
};

/// The table of adjacent pairs of frequent words (built by index_build.cc) as queries use it
/// (pair_table.cc).
struct pair_table {
  // A two-word phrase's docs in this shard from the table of adjacent pairs; false when either
  // word is not in the table.
  static bool pair_total(const local_shard& shard, const query_plan& plan, const phrase_span& ph,
                         uint64_t& total);
  // Whether pair terms can stand in for `plan`'s phrases: when every phrase is two words that
  // index their pairs, each phrase as its pair term (the words only in them dropped); else the
  // phrases' adjacent pairs of such words added as terms of weight 0. Sets up ws.pair_plan, and
  // `absent` when one of the pairs never occurs here.
  static bool pair_term_plan(const local_shard& shard, const query_plan& plan, shard_workspace& ws,
                             bool& absent);

 private:
  // The pair term of words a, b (appended to ws.pair_name, viewed by `name`) when both index
  // their pairs here; whether the pair occurs is for the caller to look up.
  static bool pair_of(const local_shard& shard, std::string_view a, std::string_view b,
                      shard_workspace& ws, std::string_view& name);
};

}  // namespace tollgate::search
