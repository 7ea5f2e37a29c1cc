// Filters and date order (src/search/filter.cc): random corpora and random plans with time
// windows, tags, sort=date and offsets up to 1000, evaluated with pruning on (whole and in
// slices), with pruning off (the leapfrog) and by the exhaustive reference: the same totals,
// ids, docs and keys, bit for bit. Also checks that the filter-led evaluation and the time walk
// are the paths these plans take.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "search/differential_fixture.h"
#include "search/local_shard.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

// The evaluation tests' corpus, with its time range.
struct filter_corpus : test_support::corpus_fixture {
  int64_t min_time = std::numeric_limits<int64_t>::max();
  int64_t max_time = std::numeric_limits<int64_t>::min();

  filter_corpus(uint64_t count, uint64_t seed, uint32_t nshards)
      : corpus_fixture(count, seed, nshards) {
    for (const int64_t t : times) {
      min_time = std::min(min_time, t);
      max_time = std::max(max_time, t);
    }
  }
};

struct filter_plan {
  std::vector<std::string> store;
  std::vector<std::string_view> terms, tags;
  std::vector<double> idf;
  query_plan plan{};
  std::string text;
};

// 1-3 terms (common words or a story's title words), a time window (none, narrow, wide, one
// side, or matching nothing), no tag, one or two of the frequent ones, either sort, a k from 1
// to past offset 1000.
void make_filter_plan(const filter_corpus& fx, std::mt19937_64& rng, filter_plan& fp) {
  static const char* common[] = {"the", "of", "a", "and", "to", "in", "is"};
  static const char* tags[] = {"rust", "go", "python", "ai", "ml", "security"};
  static const uint32_t ks[] = {1, 3, 10, 10, 31, 33, 100, 1010, 1050};
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  const size_t nterms = 1 + pick(3);
  const auto& title = fx.titles[pick(fx.titles.size())];
  for (size_t i = 0; i < nterms; ++i) {
    std::string t =
        pick(3) != 0 || title.empty() ? common[pick(std::size(common))] : title[pick(title.size())];
    if (std::find(fp.store.begin(), fp.store.end(), t) == fp.store.end()) {
      fp.store.push_back(std::move(t));
    }
  }
  for (const std::string& t : fp.store) {
    fp.terms.emplace_back(t);
    fp.idf.push_back(0.2 + static_cast<double>(pick(1000)) / 400.0);
    fp.text += t + " ";
  }
  fp.plan.terms = fp.terms;
  fp.plan.idf = fp.idf;
  fp.plan.since = std::numeric_limits<int64_t>::min();
  fp.plan.until = std::numeric_limits<int64_t>::max();
  const int64_t span = fx.max_time - fx.min_time;
  // a story's time, so that window bounds fall on stories (inclusive at both ends)
  const int64_t at = fx.times[pick(fx.times.size())];
  switch (pick(6)) {
    case 1:  // narrow: about 1% of the time range
      fp.plan.since = at;
      fp.plan.until = at + span / 100;
      break;
    case 2:  // wide: about two thirds
      fp.plan.since = at - 2 * span / 3;
      fp.plan.until = at;
      break;
    case 3:
      fp.plan.since = at;
      break;
    case 4:
      fp.plan.until = at;
      break;
    case 5:  // nothing in it
      fp.plan.since = fx.max_time + 1;
      break;
    default:
      break;
  }
  for (size_t n = pick(3) == 0 ? 0 : 1 + pick(2); fp.tags.size() < n;) {
    const std::string_view t = tags[pick(std::size(tags))];
    if (std::find(fp.tags.begin(), fp.tags.end(), t) == fp.tags.end()) {
      fp.tags.push_back(t);
    }
  }
  fp.plan.tags = fp.tags;
  fp.plan.sort = pick(5) < 3 ? sort_order::date : sort_order::relevance;
  fp.plan.k = ks[pick(std::size(ks))];
  fp.text += " since=" + std::to_string(fp.plan.since) + " until=" + std::to_string(fp.plan.until);
  for (std::string_view t : fp.tags) {
    fp.text += " tag=" + std::string(t);
  }
  fp.text += fp.plan.sort == sort_order::date ? " sort=date" : " sort=relevance";
  fp.text += " k=" + std::to_string(fp.plan.k);
}

void expect_same(const shard_answer& got, const shard_answer& want, const std::string& what) {
  ASSERT_EQ(got.total, want.total) << what;
  ASSERT_EQ(got.hits.size(), want.hits.size()) << what;
  for (size_t i = 0; i < got.hits.size(); ++i) {
    ASSERT_EQ(got.hits[i].doc, want.hits[i].doc) << what << " rank " << i;
    ASSERT_EQ(got.hits[i].id, want.hits[i].id) << what << " rank " << i;
    ASSERT_EQ(std::bit_cast<uint64_t>(got.hits[i].key), std::bit_cast<uint64_t>(want.hits[i].key))
        << what << " rank " << i;
  }
}

// Runs `queries` plans on every shard: pruned (whole, and sliced with a random budget),
// unpruned and the reference agree. Returns how many evaluations began in each mode.
std::vector<uint64_t> run_filter_plans(filter_corpus& fx, uint64_t seed, int queries) {
  std::vector<uint64_t> began(8, 0);
  shard_workspace ws, ws_sliced;
  shard_answer on, off, sliced, want;
  std::mt19937_64 rng(seed);
  for (int q = 0; q < queries; ++q) {
    filter_plan fp;
    make_filter_plan(fx, rng, fp);
    const uint64_t budget = 1 + rng() % 50;
    for (size_t si = 0; si < fx.shards.size(); ++si) {
      local_shard& s = *fx.shards[si];
      const std::string what =
          "query " + std::to_string(q) + ": " + fp.text + " shard " + std::to_string(si);
      prune_enabled = true;
      EXPECT_TRUE(s.search(fp.plan, ws, on));
      ++began[ws.ev.began];
      bool first = true;
      slice sl = slice::more;
      while (sl == slice::more) {
        uint64_t left = budget;
        sl = s.search_slice(fp.plan, ws_sliced, sliced, first, left);
        first = false;
      }
      prune_enabled = false;
      EXPECT_TRUE(s.search(fp.plan, ws, off));
      prune_enabled = true;
      s.reference_search(fp.plan, want);
      expect_same(off, want, what + " (pruning off)");
      expect_same(on, want, what);
      expect_same(sliced, want, what + " (sliced)");
      if (::testing::Test::HasFatalFailure()) {
        return began;
      }
    }
  }
  return began;
}

TEST(filter_test, windows_tags_and_date_order_equal_reference_pruned_or_not) {
  // Verifies plans with time windows (narrow, wide, one-sided, empty), tags, sort=date and k up
  // to 1050 give the reference's totals, ids, docs and keys with pruning on (whole and sliced)
  // and off, over two corpora and shard counts, and that the filter-led evaluation and the
  // time walk both ran.
  const uint32_t saved = prune_min_lead_df;
  std::vector<uint64_t> began(8, 0);
  for (uint32_t min_lead : {0u, saved}) {
    prune_min_lead_df = min_lead;
    filter_corpus a(3000, 5, 1);
    for (size_t m = 0; uint64_t n : run_filter_plans(a, 17 + min_lead, 250)) {
      began[m++] += n;
    }
    filter_corpus b(2500, 8, 2);
    for (size_t m = 0; uint64_t n : run_filter_plans(b, 29 + min_lead, 200)) {
      began[m++] += n;
    }
  }
  prune_min_lead_df = saved;
  EXPECT_GT(began[eval_state::filtered], 20u);
  EXPECT_GT(began[eval_state::time_walk], 20u);
  EXPECT_GT(began[eval_state::pruned], 20u);
}

TEST(filter_test, equal_with_every_term_dense_or_none) {
  // Verifies the same equality when every term of 128+ docs has a bitset (the time walk and the
  // bitset ANDs everywhere) and when none has (the filter drives cursor seeks only).
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;
  for (uint32_t divisor : {1u << 20, 1u}) {
    const uint32_t saved = dense_divisor;
    dense_divisor = divisor;
    filter_corpus fx(2000, 41 + divisor % 5, 1);
    dense_divisor = saved;
    run_filter_plans(fx, divisor, 200);
  }
  prune_min_lead_df = saved_min_lead;
}

}  // namespace
}  // namespace tollgate::search
