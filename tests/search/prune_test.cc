// local_shard's pruned evaluation (prune.cc) against the unpruned one: the same totals, ids,
// order and keys bit for bit, whole and in slices.
#include <gtest/gtest.h>

#include <array>
#include <iterator>
#include <limits>
#include <random>
#include <string>

#include "search/differential_fixture.h"
#include "search/local_shard.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

using namespace test_support;

// Runs `queries` random plans on each shard with pruning off (the leapfrog path, every match
// scored) and on (whole and in slices of a random budget): same totals, ids, order, keys.
// Returns how many pruned evaluations took one walk for the top k and the total, how many two
// (the top k's, then the count), and how many scored a phrase's docs kept by its count's walk.
std::array<uint64_t, 3> run_prune_queries(corpus_fixture& fx, uint64_t seed, int queries) {
  std::array<uint64_t, 3> walks{};
  shard_workspace ws;
  shard_answer off, on, sliced;
  off.hits.reserve(1050);
  std::mt19937_64 rng(seed);
  uint64_t pruned_plans = 0;
  for (int q = 0; q < queries; ++q) {
    random_plan rp;
    make_plan(fx, rng, rp);
    if (q % 2 == 0) {  // half of them at deep offsets (up to 1000 + a page)
      rp.plan.k = 1000 + static_cast<uint32_t>(rng() % 51);
    }
    pruned_plans += rp.phrases.empty();
    const uint64_t budget = 1 + rng() % 40;
    for (local_shard* s : fx.shards) {
      const std::string what = "query " + std::to_string(q) + ": " + rp.text;
      if (q % 3 != 0) {  // the phrase's count remembered, as the backend's df phase leaves it
        std::vector<uint64_t> df(rp.terms.size() + rp.phrases.size(), 0);
        EXPECT_TRUE(s->add_doc_freqs(rp.plan, ws, df.data()));
      }
      prune_enabled = false;
      EXPECT_TRUE(s->search(rp.plan, ws, off));
      prune_enabled = true;
      EXPECT_TRUE(s->search(rp.plan, ws, on));
      if (ws.ev.began == eval_state::pruned) {
        ++walks[ws.ev.one_pass ? 0 : 1];
      }
      walks[2] += ws.ev.began == eval_state::listed;
      expect_same(on, off, what);
      bool first = true;
      slice sl = slice::more;
      while (sl == slice::more) {
        uint64_t left = budget;
        sl = s->search_slice(rp.plan, ws, sliced, first, left);
        first = false;
      }
      expect_same(sliced, off, what + " sliced");
      if (::testing::Test::HasFatalFailure()) {
        return walks;
      }
    }
  }
  EXPECT_GT(pruned_plans, static_cast<uint64_t>(queries) / 2);
  return walks;
}

std::array<uint64_t, 3> run_prune_on_off(corpus_fixture& fx, uint64_t seed, int queries) {
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;  // every query without phrases pruned, however rare its terms
  const auto walks = run_prune_queries(fx, seed, queries);
  prune_min_lead_df = saved_min_lead;
  return walks;
}

TEST(prune_test, pruning_on_and_off_give_identical_answers) {
  // Verifies the pruned evaluation (block and per-doc bounds, totals counted apart) gives the
  // unpruned evaluation's totals, ids, order and keys bit for bit, whole and sliced, for terms,
  // phrases, filters, both sorts, a fleet's avgdl and offsets up to 1000.
  corpus_fixture fx(2400, 57, 2);
  const auto walks = run_prune_on_off(fx, 99, 300);
  EXPECT_GT(walks[0], 50u);  // one walk: few of the lead's docs expected to match
  EXPECT_GT(walks[1], 50u);  // two: most of them
  EXPECT_GT(walks[2], 20u);  // a phrase alone whose docs its df walk kept
}

TEST(prune_test, identical_with_every_frequent_term_dense_or_none) {
  // Verifies the same equality when every term of 128+ docs has a bitset (the AND + popcount
  // total and the bitset rejections) and when none has (every total from the lead's walk).
  for (uint32_t divisor : {1u << 20, 1u}) {
    const uint32_t saved = dense_divisor;
    dense_divisor = divisor;
    corpus_fixture fx(1500, 61 + divisor % 7, 1);
    dense_divisor = saved;
    run_prune_on_off(fx, divisor, 200);
  }
}

TEST(prune_test, frequency_thresholds_of_length_classes_reject_only_what_cannot_rank) {
  // Verifies the top k's first test (the lead's 3 x title + text frequency against the least
  // one whose bound, at its length class's norm and the other terms' largest block maxima,
  // reaches the k-th key) keeps the unpruned answers bit for bit: relevance order, small k
  // (a full heap early, so the thresholds are high), common and random terms, the shards' own
  // average length and a fleet's, whole and sliced; and that it rejected docs.
  corpus_fixture fx(3000, 71, 2);
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;
  shard_workspace ws;
  shard_answer off, on, sliced;
  std::mt19937_64 rng(5);
  uint64_t rejected = 0;
  for (int q = 0; q < 300; ++q) {
    random_plan rp;
    do {
      rp = random_plan{};
      make_plan(fx, rng, rp);
    } while (!rp.phrases.empty());
    rp.plan.sort = sort_order::relevance;
    rp.plan.since = std::numeric_limits<int64_t>::min();
    rp.plan.until = std::numeric_limits<int64_t>::max();
    rp.plan.tags = {};
    static const uint32_t ks[] = {1, 2, 3, 5, 10, 20};
    rp.plan.k = ks[rng() % std::size(ks)];
    const std::string what =
        "query " + std::to_string(q) + ": " + rp.text + " k'=" + std::to_string(rp.plan.k);
    for (local_shard* s : fx.shards) {
      prune_enabled = false;
      ASSERT_TRUE(s->search(rp.plan, ws, off));
      prune_enabled = true;
      ASSERT_TRUE(s->search(rp.plan, ws, on));
      rejected += ws.ev.below_f;
      expect_same(on, off, what);
      bool first = true;
      slice sl = slice::more;
      while (sl == slice::more) {
        uint64_t left = 1 + rng() % 300;
        sl = s->search_slice(rp.plan, ws, sliced, first, left);
        first = false;
      }
      expect_same(sliced, off, what + " sliced");
      if (::testing::Test::HasFatalFailure()) {
        prune_min_lead_df = saved_min_lead;
        return;
      }
    }
  }
  prune_min_lead_df = saved_min_lead;
  EXPECT_GT(rejected, 1000u);
}

}  // namespace
}  // namespace tollgate::search
