// The top k of conjunctions of a shard's commonest terms from their impact lists (impact_top in
// prune.cc): the same totals, ids, order and keys bit for bit as the unpruned leapfrog, whether
// the lists find the top k or only seed the walk, whole and in slices.
#include <gtest/gtest.h>

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

// Conjunctions of 2-3 of the commonest words, by relevance, no filters, the shards' own average
// length: pruned (through impact_top) against unpruned, whole and sliced. Returns how many
// shard evaluations ended in each impact_top outcome.
std::array<uint64_t, 3> run_common_queries(corpus_fixture& fx, uint64_t seed, int queries) {
  static const char* common[] = {"the", "of", "a", "and", "to", "in", "is", "for", "on", "that"};
  std::array<uint64_t, 3> outcomes{};
  shard_workspace ws;
  shard_answer off, on, sliced;
  std::mt19937_64 rng(seed);
  for (int q = 0; q < queries; ++q) {
    random_plan rp;
    const size_t n = 2 + rng() % 2;
    for (size_t i = 0; i < n; ++i) {
      rp.add_term(common[rng() % std::size(common)]);
    }
    for (const std::string& t : rp.term_store) {
      rp.terms.emplace_back(t);
      rp.text += t + " ";
    }
    rp.alone.assign(rp.terms.size(), 1);
    rp.plan.terms = rp.terms;
    std::vector<uint64_t> df(rp.terms.size(), 0);
    for (local_shard* s : fx.shards) {
      s->add_doc_freqs(rp.plan, ws, df.data());
    }
    score_weights(fx.total_docs, rp.alone, df, 0, true, rp.idf, rp.phrase_idf);
    rp.plan.idf = rp.idf;
    rp.plan.since = std::numeric_limits<int64_t>::min();
    rp.plan.until = std::numeric_limits<int64_t>::max();
    rp.plan.sort = sort_order::relevance;
    static const uint32_t ks[] = {1, 2, 3, 5, 10, 20, 50, 128};
    rp.plan.k = ks[rng() % std::size(ks)];
    const std::string what =
        "query " + std::to_string(q) + ": " + rp.text + " k=" + std::to_string(rp.plan.k);
    for (local_shard* s : fx.shards) {
      prune_enabled = false;
      EXPECT_TRUE(s->search(rp.plan, ws, off));
      prune_enabled = true;
      EXPECT_TRUE(s->search(rp.plan, ws, on));
      ++outcomes[ws.ev.impact];
      expect_same(on, off, what);
      bool first = true;
      slice sl = slice::more;
      while (sl == slice::more) {
        uint64_t left = 1 + rng() % 200;
        sl = s->search_slice(rp.plan, ws, sliced, first, left);
        first = false;
      }
      expect_same(sliced, off, what + " sliced");
      if (::testing::Test::HasFailure()) {
        return outcomes;
      }
    }
  }
  return outcomes;
}

TEST(impact_test, impact_lists_find_the_top_k_of_common_words) {
  // Verifies conjunctions of the commonest words take their top k from the impact lists (the
  // threshold algorithm stops before the lists run out) and answer exactly as the leapfrog.
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;
  corpus_fixture fx(4000, 91, 2);
  const auto outcomes = run_common_queries(fx, 7, 150);
  prune_min_lead_df = saved_min_lead;
  EXPECT_GT(outcomes[eval_state::impact_found], 100u);
}

TEST(impact_test, short_impact_lists_seed_the_walk) {
  // Verifies that lists cut short (impact_depth 6) that run out before the bound falls below
  // the k-th key leave the docs they offered as the walk's seeds, and the walk completes the
  // same top k (no doc offered twice, none missed).
  const uint32_t saved_depth = impact_depth, saved_min_lead = prune_min_lead_df;
  impact_depth = 6;
  prune_min_lead_df = 0;
  corpus_fixture fx(3000, 93, 2);
  impact_depth = saved_depth;
  const auto outcomes = run_common_queries(fx, 11, 120);
  prune_min_lead_df = saved_min_lead;
  EXPECT_GT(outcomes[eval_state::impact_seeded], 100u);
}

TEST(impact_test, frequencies_beyond_a_byte_are_read_from_the_postings) {
  // Verifies a doc whose weighted frequency of an impact term is 255 or more (its row holds
  // 255) is scored with its exact frequency: among 300 stories holding "the" and "of" once,
  // five whose titles repeat "the" 90 times (3 x 90 = 270) rank first for "the of", with the
  // keys the leapfrog gives them.
  std::string data;
  auto story = [&data](const std::string& id, const std::string& title, const std::string& text) {
    data += R"({"id":")" + id + R"(","title":")" + title +
            R"(","url":"https://example.com/","by":"x","time":1600000000,"score":1,)" +
            R"("comments":0,"tags":[],"text":")" + text + "\"}\n";
  };
  for (int i = 0; i < 295; ++i) {
    std::string title;
    for (int w = 0; w < 20; ++w) {
      title += "w" + std::to_string(i) + "x" + std::to_string(w) + " ";
    }
    story("a" + std::to_string(1000 + i), title, "the of");
  }
  std::string the90, of30;
  for (int i = 0; i < 90; ++i) {
    the90 += "the ";
  }
  for (int i = 0; i < 30; ++i) {
    of30 += "of ";
  }
  for (int i = 0; i < 5; ++i) {
    story("zz" + std::to_string(i), the90, of30 + std::string(static_cast<size_t>(i + 1), 'q'));
  }
  load_options o;
  o.shards = 1;
  o.skip_bad_lines = false;
  load_report rep;
  auto built = build_shards(data, o, rep);
  ASSERT_TRUE(built.has_value());
  local_shard& s = static_cast<local_shard&>(*(*built)[0]);
  s.finalize(s.stats());
  random_plan rp;
  rp.add_term("the");
  rp.add_term("of");
  for (const std::string& t : rp.term_store) {
    rp.terms.emplace_back(t);
  }
  rp.plan.terms = rp.terms;
  rp.alone.assign(2, 1);
  std::vector<uint64_t> df(2, 0);
  shard_workspace ws;
  s.add_doc_freqs(rp.plan, ws, df.data());
  score_weights(s.stats().docs, rp.alone, df, 0, true, rp.idf, rp.phrase_idf);
  rp.plan.idf = rp.idf;
  rp.plan.since = std::numeric_limits<int64_t>::min();
  rp.plan.until = std::numeric_limits<int64_t>::max();
  rp.plan.k = 10;
  shard_answer off, on;
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;
  prune_enabled = false;
  ASSERT_TRUE(s.search(rp.plan, ws, off));
  prune_enabled = true;
  ASSERT_TRUE(s.search(rp.plan, ws, on));
  prune_min_lead_df = saved_min_lead;
  EXPECT_EQ(ws.ev.impact, eval_state::impact_found);
  expect_same(on, off, "the of");
  ASSERT_GE(off.hits.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(off.hits[i].id.substr(0, 2), "zz") << i;
  }
}

}  // namespace
}  // namespace tollgate::search
