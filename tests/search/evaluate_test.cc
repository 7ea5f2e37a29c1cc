// Differential test of local_shard::search (champion lists, block-max skipping, leapfrog
// intersection, streamed phrase checks) against local_shard::reference_search (tokenize every
// story, score every match, sort fully): the same total, ids, docs and keys, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>

#include "search/differential_fixture.h"
#include "search/local_shard.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"

namespace tollgate::search {
namespace {

using namespace test_support;

void run_differential(uint64_t stories, uint64_t seed, uint32_t nshards, int queries) {
  corpus_fixture fx(stories, seed, nshards);
  ASSERT_EQ(fx.total_docs, stories);
  shard_workspace ws;
  shard_answer got, want;
  got.hits.reserve(1050);
  std::mt19937_64 rng(seed * 7919 + nshards);
  uint64_t nonempty = 0, fast = 0;
  for (int q = 0; q < queries; ++q) {
    random_plan rp;
    make_plan(fx, rng, rp);
    for (size_t si = 0; si < fx.shards.size(); ++si) {
      ASSERT_TRUE(fx.shards[si]->search(rp.plan, ws, got));
      fx.shards[si]->reference_search(rp.plan, want);
      expect_same(got, want,
                  "query " + std::to_string(q) + ": " + rp.text + " shard " + std::to_string(si));
      nonempty += want.total > 0;
      fast += rp.terms.size() == 1 && want.total > kChampMinDf && rp.plan.k < kChampLen;
      if (::testing::Test::HasFatalFailure()) {
        return;
      }
    }
  }
  // the random plans exercise matches and the champion-list path, not only empty answers
  EXPECT_GT(nonempty, static_cast<uint64_t>(queries) * nshards / 2);
  EXPECT_GT(fast, 0u);
}

// One shard built and finalized from JSON Lines, as the hand-made corpora below need.
struct one_shard {
  std::vector<std::unique_ptr<shard_source>> built;
  local_shard* shard = nullptr;

  explicit one_shard(const std::string& data) {
    load_options o;
    o.shards = 1;
    load_report rep;
    auto b = build_shards(data, o, rep);
    if (!b.has_value()) {
      return;
    }
    built = std::move(*b);
    built[0]->finalize(built[0]->stats());
    shard = static_cast<local_shard*>(built[0].get());
  }
};

// Checks search() against the reference for `plan` over every time, by `so`, top k.
void expect_as_reference(local_shard& s, query_plan plan, sort_order so, uint32_t k,
                         shard_workspace& ws, shard_answer& got, shard_answer& want,
                         const std::string& what) {
  plan.since = std::numeric_limits<int64_t>::min();
  plan.until = std::numeric_limits<int64_t>::max();
  plan.sort = so;
  plan.k = k;
  ASSERT_TRUE(s.search(plan, ws, got));
  s.reference_search(plan, want);
  expect_same(got, want, what + " k=" + std::to_string(k));
}

TEST(differential_test, optimised_search_equals_exhaustive_reference) {
  // Verifies search() gives exactly the exhaustive reference's total, ids, docs and keys for
  // random 1-, 2-, 3-term, phrase (2 to 5 words) and common-word queries, with and without
  // filters, both sorts, k around the champion-list and block sizes.
  run_differential(2400, 11, 2, 250);
}

TEST(differential_test, equal_on_another_corpus_and_shard_count) {
  // Verifies the same equality on a different corpus, a single shard (long posting lists of
  // many blocks), finalized on several threads (block maxima and champion lists computed per
  // term range, then joined), and other random queries.
  const uint64_t saved = parallel_finalize_postings;
  parallel_finalize_postings = 0;
  run_differential(2000, 23, 1, 150);
  parallel_finalize_postings = saved;
}

TEST(differential_test, sliced_evaluation_equals_whole) {
  // Verifies search_slice and doc_freqs_slice, stopped every few postings and continued (two
  // evaluations interleaved slice by slice on separate workspaces), give exactly search()'s
  // and add_doc_freqs()'s answers, and that long evaluations do take several slices.
  corpus_fixture fx(2400, 31, 2);
  shard_workspace ws, ws_a, ws_b;
  shard_answer whole, a, b;
  whole.hits.reserve(1050);
  std::mt19937_64 rng(4242);
  uint64_t multi_slice = 0;
  for (int q = 0; q < 200; ++q) {
    random_plan rp, rq;
    make_plan(fx, rng, rp);
    make_plan(fx, rng, rq);
    const uint64_t budget = 1 + rng() % 64;
    for (local_shard* s : fx.shards) {
      bool first = true;
      slice sa = slice::more, sb = slice::more;
      uint64_t slices = 0;
      while (sa == slice::more || sb == slice::more) {
        uint64_t left = budget;
        if (sa == slice::more) {
          sa = s->search_slice(rp.plan, ws_a, a, first, left);
          ++slices;
        }
        left = budget;
        if (sb == slice::more) {
          sb = s->search_slice(rq.plan, ws_b, b, first, left);
        }
        first = false;
      }
      ASSERT_EQ(sa, slice::done);
      ASSERT_EQ(sb, slice::done);
      multi_slice += slices > 1;
      ASSERT_TRUE(s->search(rp.plan, ws, whole));
      expect_same(a, whole, "query " + std::to_string(q) + ": " + rp.text);
      ASSERT_TRUE(s->search(rq.plan, ws, whole));
      expect_same(b, whole, "query " + std::to_string(q) + "': " + rq.text);
      std::vector<uint64_t> df_whole(rp.terms.size() + rp.phrases.size(), 0);
      std::vector<uint64_t> df_sliced(df_whole.size(), 0);
      ASSERT_TRUE(s->add_doc_freqs(rp.plan, ws, df_whole.data()));
      first = true;
      slice sd = slice::more;
      while (sd == slice::more) {
        uint64_t left = budget;
        sd = s->doc_freqs_slice(rp.plan, ws_a, df_sliced.data(), first, left);
        first = false;
      }
      ASSERT_EQ(sd, slice::done);
      EXPECT_EQ(df_sliced, df_whole) << rp.text;
      if (::testing::Test::HasFatalFailure()) {
        return;
      }
    }
  }
  EXPECT_GT(multi_slice, 50u);
}

TEST(differential_test, equal_under_heavy_score_ties) {
  // Verifies equality when many stories score the same (identical titles and texts), so ties
  // reach past the champion lists and across blocks and the id order decides.
  std::string data;
  for (int i = 0; i < 700; ++i) {
    const char* text = i % 3 == 0 ? "rust rust kernel" : (i % 3 == 1 ? "rust kernel" : "kernel");
    data += "{\"id\":\"" + std::to_string(1000 + i) + "\",\"title\":\"" +
            (i % 5 == 0 ? "rust news" : "news") +
            "\",\"url\":\"u\",\"by\":\"b\",\"time\":" + std::to_string(1600000000 + (i % 7)) +
            ",\"score\":1,\"comments\":0,\"tags\":[\"t\"],\"text\":\"" + text + "\"}\n";
  }
  one_shard one(data);
  ASSERT_NE(one.shard, nullptr);
  shard_workspace ws;
  shard_answer got, want;
  got.hits.reserve(1050);
  for (std::string_view q : {"rust", "kernel", "news", "rust kernel"}) {
    for (sort_order so : {sort_order::relevance, sort_order::date}) {
      for (uint32_t k : {1u, 5u, 10u, 31u, 100u, 500u}) {
        std::vector<std::string_view> terms;
        token_stream ts(q);
        std::string_view tok;
        while (ts.next(tok)) {
          terms.push_back(tok);
        }
        std::vector<double> idf(terms.size(), 0.7);
        query_plan plan{};
        plan.terms = terms;
        plan.idf = idf;
        expect_as_reference(*one.shard, plan, so, k, ws, got, want, std::string(q));
        if (::testing::Test::HasFatalFailure()) {
          return;
        }
      }
    }
  }
}

TEST(differential_test, equal_with_frequencies_past_the_one_byte_form) {
  // Verifies equality when postings leave the doc stream's three-byte form (postings.h): a
  // title tf over 3, a text tf over 31 or positions longer than 127 bytes take the escape and
  // varints. They sit among three-byte postings of the same term, over several 128-doc blocks,
  // so seeks pass over them both five postings at a time and one by one, and phrases read the
  // positions found after them.
  std::string data;
  for (int i = 0; i < 900; ++i) {
    std::string title = i % 2 == 0 ? "alpha zeta" : "zeta news";
    std::string text = "alpha zeta kernel";
    if (i % 7 == 0) {
      title = "zeta zeta zeta zeta zeta alpha zeta";  // title tf 6
    }
    if (i % 11 == 0) {
      for (int r = 0; r < 40 + i % 50; ++r) {  // text tf 41..90 of zeta, 40..89 of alpha
        text += " alpha zeta";
      }
    }
    if (i % 13 == 0) {
      for (int r = 0; r < 150; ++r) {  // 150 two-byte positions of a word at the text's end
        text += " filler" + std::to_string(r % 9);
      }
      text += " alpha zeta";
    }
    data += "{\"id\":\"" + std::to_string(1000 + i) + "\",\"title\":\"" + title +
            "\",\"url\":\"u\",\"by\":\"b\",\"time\":" + std::to_string(1600000000 + i) +
            ",\"score\":1,\"comments\":0,\"tags\":[\"t\"],\"text\":\"" + text + "\"}\n";
  }
  one_shard one(data);
  ASSERT_NE(one.shard, nullptr);
  shard_workspace ws;
  shard_answer got, want;
  got.hits.reserve(1050);
  // (words, whether they form one phrase)
  const std::pair<std::vector<std::string_view>, bool> queries[] = {
      {{"zeta"}, false},
      {{"kernel", "zeta"}, false},
      {{"news", "zeta"}, false},
      {{"alpha", "zeta"}, true},
      {{"zeta", "zeta"}, true},
      {{"zeta", "kernel"}, true},
      {{"filler8", "alpha"}, true},
      {{"zeta", "alpha", "zeta"}, true}};
  uint64_t matched = 0;
  for (const auto& [words, phrase] : queries) {
    for (sort_order so : {sort_order::relevance, sort_order::date}) {
      for (uint32_t k : {1u, 10u, 100u, 1000u}) {
        std::vector<std::string_view> terms;
        std::vector<uint32_t> phrase_terms;
        for (std::string_view w : words) {
          const auto at = std::find(terms.begin(), terms.end(), w);
          phrase_terms.push_back(static_cast<uint32_t>(at - terms.begin()));
          if (at == terms.end()) {
            terms.push_back(w);
          }
        }
        std::vector<double> idf(terms.size(), phrase ? 0.0 : 0.7);
        std::vector<double> phrase_idf(phrase ? 1 : 0, 1.3);
        std::vector<phrase_span> spans;
        if (phrase) {
          spans.push_back({0, static_cast<uint32_t>(phrase_terms.size())});
        } else {
          phrase_terms.clear();
        }
        query_plan plan{};
        plan.terms = terms;
        plan.idf = idf;
        plan.phrases = spans;
        plan.phrase_terms = phrase_terms;
        plan.phrase_idf = phrase_idf;
        expect_as_reference(*one.shard, plan, so, k, ws, got, want, std::string(words[0]));
        if (::testing::Test::HasFatalFailure()) {
          return;
        }
        matched += want.total;
      }
    }
  }
  EXPECT_GT(matched, 0u);
}

TEST(differential_soak, random_corpora_until_the_time_is_up) {
  // A soak, not part of the test command: perf/soak/differential.sh sets the seconds. Verifies,
  // on one random corpus after another (size, seed, shard count and finalize threads drawn),
  // that every random plan gets exactly the exhaustive reference's answer with pruning on, with
  // it off, and in slices of a random budget (after a df phase or not, as the backend may).
  const char* env = std::getenv("TOLLGATE_SOAK_SECONDS");
  if (env == nullptr) {
    GTEST_SKIP() << "a soak run: set TOLLGATE_SOAK_SECONDS (perf/soak/differential.sh)";
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(std::atoll(env));
  const char* seed_env = std::getenv("TOLLGATE_SOAK_SEED");
  std::mt19937_64 draw(seed_env != nullptr ? std::strtoull(seed_env, nullptr, 10) : 1);
  // The knobs the tests may set, drawn per corpus (the build's before it loads), so small
  // corpora also take the paths a large one takes: dense bitsets, the pruned walk's one-pass
  // and two-pass evaluations, the pair table and the pair terms, threaded finalize.
  struct knobs {
    uint64_t parallel = parallel_finalize_postings;
    uint32_t dense = dense_divisor, lead = prune_min_lead_df;
    double share = one_pass_share;
    uint32_t pmin = pair_min_df, pmax = pair_max_words, pwords = pair_posting_words;
    void restore() const {
      parallel_finalize_postings = parallel;
      dense_divisor = dense;
      prune_min_lead_df = lead;
      one_pass_share = share;
      pair_min_df = pmin;
      pair_max_words = pmax;
      pair_posting_words = pwords;
      prune_enabled = true;
    }
  } const saved;
  uint64_t corpora = 0, queries = 0, pruned = 0, nonempty = 0;
  shard_workspace ws, ws_sliced;
  shard_answer got, want;
  got.hits.reserve(1050);
  while (std::chrono::steady_clock::now() < until) {
    const uint64_t stories = 200 + draw() % 5000;
    const uint64_t seed = draw() % 1000000;
    const uint32_t nshards = 1 + static_cast<uint32_t>(draw() % 3);
    saved.restore();
    if (draw() % 4 != 0) {
      parallel_finalize_postings = 0;  // every shard splits its terms over threads
      dense_divisor = 2 + static_cast<uint32_t>(draw() % 31);
      prune_min_lead_df = static_cast<uint32_t>(draw() % (2 * kBlockDocs));
      one_pass_share = static_cast<double>(draw() % 101) / 100.0;
      pair_min_df = 8 + static_cast<uint32_t>(draw() % 1024);
      pair_max_words = static_cast<uint32_t>(draw() % 1025);
      pair_posting_words = static_cast<uint32_t>(draw() % 129);
    }
    const std::string where =
        "corpus " + std::to_string(stories) + " stories, seed " + std::to_string(seed) + ", " +
        std::to_string(nshards) + " shards, dense 1/" + std::to_string(dense_divisor) +
        ", lead df " + std::to_string(prune_min_lead_df) + ", one-pass share " +
        std::to_string(one_pass_share) + ", pairs df " + std::to_string(pair_min_df) + " max " +
        std::to_string(pair_max_words) + " terms " + std::to_string(pair_posting_words);
    corpus_fixture fx(stories, seed, nshards);
    ++corpora;
    std::mt19937_64 rng(draw());
    for (int q = 0; q < 200; ++q) {
      random_plan rp;
      make_plan(fx, rng, rp);
      if (rng() % 4 == 0) {
        rp.plan.k = 1000 + static_cast<uint32_t>(rng() % 51);  // a deep offset's page
        rp.text += ", then k=" + std::to_string(rp.plan.k);
      }
      const uint64_t budget = 1 + rng() % 64;
      ++queries;
      for (size_t si = 0; si < fx.shards.size(); ++si) {
        local_shard* s = fx.shards[si];
        const std::string what = where + ", query " + std::to_string(q) + ": " + rp.text +
                                 " shard " + std::to_string(si);
        s->reference_search(rp.plan, want);
        if (rng() % 2) {  // the df phase first, as the backend runs it for several terms
          std::vector<uint64_t> df(rp.terms.size() + rp.phrases.size(), 0);
          ASSERT_TRUE(s->add_doc_freqs(rp.plan, ws, df.data())) << what;
        }
        prune_enabled = true;
        ASSERT_TRUE(s->search(rp.plan, ws, got)) << what;
        expect_same(got, want, what + " (pruned)");
        pruned += ws.ev.began == eval_state::pruned;
        nonempty += want.total > 0;
        prune_enabled = false;
        ASSERT_TRUE(s->search(rp.plan, ws, got)) << what;
        expect_same(got, want, what + " (unpruned)");
        prune_enabled = true;
        bool first = true;
        slice sl = slice::more;
        while (sl == slice::more) {
          uint64_t left = budget;
          sl = s->search_slice(rp.plan, ws_sliced, got, first, left);
          first = false;
        }
        ASSERT_EQ(sl, slice::done) << what;
        expect_same(got, want, what + " (sliced)");
        if (::testing::Test::HasFailure()) {
          saved.restore();
          return;
        }
      }
    }
  }
  saved.restore();
  std::printf(
      "soak: %llu corpora, %llu queries (%llu shard answers not empty, %llu by the pruned walk), "
      "every answer equal to the reference\n",
      static_cast<unsigned long long>(corpora), static_cast<unsigned long long>(queries),
      static_cast<unsigned long long>(nonempty), static_cast<unsigned long long>(pruned));
  EXPECT_GT(nonempty, 0u);
}

}  // namespace
}  // namespace tollgate::search
