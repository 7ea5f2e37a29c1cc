// Query semantics through the backend over local shards: all terms must match, phrases, BM25
// order and weights, ties, filters, paging, date sort, any shard count, sliced search jobs and
// block skipping giving the same pages, no allocation after warm-up.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "search/fleet_impl.h"
#include "search/local_shard.h"
#include "search/test_corpus.h"
#include "support/alloc_counter.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/tokenizer.h"

namespace tollgate::search {
namespace {

using namespace test_support;

std::vector<mini_story> small_corpus() {
  return {
      {"1", "Rust compiler news", "the borrow checker got faster this year"},
      {"2", "Python release notes", "new york based team ships the python release"},
      {"3", "Go and Rust compared", "york new is not new york; the compiler story"},
      {"4", "Databases", "postgres and sqlite compared with a rust storage engine"},
      {"5", "Weekend reading", "nothing about languages here"},
  };
}

TEST(index_test, all_terms_must_match) {
  // Verifies a multi-term query returns only stories containing every term.
  auto b = make_backend(small_corpus());
  uint64_t total = 0;
  auto got = ids_for(*b, "rust compiler", &total);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (ids{"1", "3"}));
  EXPECT_EQ(total, 2u);
  EXPECT_EQ(ids_for(*b, "rust zebra"), ids{});
}

TEST(index_test, query_terms_are_tokenized_like_documents) {
  // Verifies case and accents in queries fold the same way as in documents.
  auto b = make_backend({{"1", "Café culture", "x"}, {"2", "Tea", "y"}});
  EXPECT_EQ(ids_for(*b, "CAFE"), ids{"1"});
  EXPECT_EQ(ids_for(*b, "café"), ids{"1"});
}

TEST(index_test, quoted_phrase_matches_in_order_only) {
  // Verifies "new york" matches adjacent in-order occurrences, not the words apart or reversed.
  auto b = make_backend({
      {"1", "t", "new york is big"},
      {"2", "t", "york new"},
      {"3", "t", "new and york"},
      {"4", "t", "we love new   york"},
  });
  auto got = ids_for(*b, "\"new york\"");
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (ids{"1", "4"}));
  auto plain = ids_for(*b, "new york");
  EXPECT_EQ(plain.size(), 4u);
}

TEST(index_test, phrase_does_not_span_title_and_text) {
  // Verifies a phrase cannot match the last title word followed by the first text word.
  auto b = make_backend({{"1", "visit new", "york today"}, {"2", "x", "visit new york"}});
  EXPECT_EQ(ids_for(*b, "\"new york\""), ids{"2"});
}

TEST(index_test, phrase_with_repeated_word_and_combined_with_terms) {
  // Verifies phrases with a repeated token and phrase + plain term AND semantics.
  auto b = make_backend({
      {"1", "t", "bye bye baby"},
      {"2", "t", "bye baby bye"},
      {"3", "rust", "bye bye baby"},
  });
  auto got = ids_for(*b, "\"bye bye baby\"");
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (ids{"1", "3"}));
  EXPECT_EQ(ids_for(*b, "rust \"bye bye\""), ids{"3"});
}

TEST(index_test, two_word_phrase_scans_both_position_lists) {
  // Verifies the two-word phrase check finds a match late in either list, in the title, with
  // many near misses before it, and rejects docs whose words are never adjacent in order.
  auto b = make_backend({
      {"1", "t", "alpha x alpha x alpha x alpha x beta alpha beta"},  // match at the very end
      {"2", "alpha beta", "x"},                                       // match in the title
      {"3", "t", "beta alpha x beta x alpha x x beta"},               // never alpha then beta
      {"4", "t", "beta beta beta beta alpha beta"},                   // second list runs ahead
      {"5", "t", "alpha alpha alpha alpha beta"},                     // first list runs ahead
      {"6", "alpha", "beta"},                                         // across fields: no
      {"7", "t", "x beta x x x x x x x x alpha"},                     // reversed, far apart
  });
  uint64_t total = 0;
  auto got = ids_for(*b, "\"alpha beta\"", &total);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (ids{"1", "2", "4", "5"}));
  EXPECT_EQ(total, 4u);
  // The same phrase as the tail of a three-word phrase goes through the general check.
  auto three = ids_for(*b, "\"x beta alpha\"");
  EXPECT_EQ(three, ids{"1"});
  auto rev = ids_for(*b, "\"beta alpha\"");
  std::sort(rev.begin(), rev.end());
  EXPECT_EQ(rev, (ids{"1", "3", "4"}));
}

TEST(index_test, bm25_prefers_higher_tf_then_shorter_docs) {
  // Verifies BM25 ordering: more occurrences win at equal length; at equal tf, shorter wins.
  auto b = make_backend({
      {"10", "a", "apple pie cream sugar"},  // tf 1, 4 tokens
      {"11", "a", "apple apple apple pie"},  // tf 3, 4 tokens
      {"12", "a", "apple pie"},              // tf 1, 2 tokens
      {"13", "a", "pear pie"},
  });
  EXPECT_EQ(ids_for(*b, "apple"), (ids{"11", "12", "10"}));
}

TEST(index_test, rarer_terms_weigh_more) {
  // Verifies idf: among docs matching both terms, the one with more of the rare term wins.
  std::vector<mini_story> c;
  for (int i = 0; i < 20; ++i) {
    c.push_back({std::to_string(100 + i), "x", "common filler words"});
  }
  c.push_back({"1", "x", "common common common rare filler"});
  c.push_back({"2", "x", "common rare rare rare filler"});
  auto b = make_backend(c);
  EXPECT_EQ(ids_for(*b, "common rare"), (ids{"2", "1"}));
}

TEST(index_test, title_matches_weigh_more_than_text) {
  // Verifies a term in the title outranks the same term in the text at equal lengths.
  auto b = make_backend({
      {"1", "weekly news", "rust and more stuff"},
      {"2", "rust news", "weekly and more stuff"},
  });
  EXPECT_EQ(ids_for(*b, "rust"), (ids{"2", "1"}));
}

TEST(index_test, ties_break_by_id) {
  // Verifies identical scores order by id (numeric order for decimal ids), across shards.
  std::vector<mini_story> c;
  for (int id : {42, 7, 1000, 99, 8, 300}) {
    c.push_back({std::to_string(id), "same title", "same text"});
  }
  for (uint32_t shards : {1u, 2u, 5u}) {
    auto b = make_backend(c, shards);
    EXPECT_EQ(ids_for(*b, "same"), (ids{"7", "8", "42", "99", "300", "1000"})) << shards;
  }
}

TEST(index_test, filters_by_since_until_and_tags) {
  // Verifies since/until are inclusive bounds and every requested tag must be present.
  auto b = make_backend({
      {"1", "rust", "a", 100, {"lang", "systems"}},
      {"2", "rust", "b", 200, {"lang"}},
      {"3", "rust", "c", 300, {"systems"}},
  });
  EXPECT_EQ(ids_for(*b, "rust", [](query_args& a) { a.since = 200; }).size(), 2u);
  EXPECT_EQ(ids_for(*b, "rust", [](query_args& a) { a.until = 200; }).size(), 2u);
  EXPECT_EQ(ids_for(*b, "rust",
                    [](query_args& a) {
                      a.since = 200;
                      a.until = 200;
                    }),
            ids{"2"});
  auto tagged = ids_for(*b, "rust", [](query_args& a) { a.add_tag("systems"); });
  std::sort(tagged.begin(), tagged.end());
  EXPECT_EQ(tagged, (ids{"1", "3"}));
  EXPECT_EQ(ids_for(*b, "rust",
                    [](query_args& a) {
                      a.add_tag("systems");
                      a.add_tag("lang");
                    }),
            ids{"1"});
  EXPECT_EQ(ids_for(*b, "rust", [](query_args& a) { a.add_tag("nope"); }), ids{});
}

TEST(index_test, offset_limit_and_exact_total) {
  // Verifies paging slices the ranking while total counts every match.
  std::vector<mini_story> c;
  for (int i = 1; i <= 30; ++i) {
    c.push_back({std::to_string(i), "page", "x", 1000 + i});
  }
  auto b = make_backend(c, 4);
  uint64_t total = 0;
  auto page = ids_for(
      *b, "page",
      [](query_args& a) {
        a.sort = sort_order::date;
        a.offset = 5;
        a.limit = 3;
      },
      &total);
  EXPECT_EQ(total, 30u);
  EXPECT_EQ(page, (ids{"25", "24", "23"}));
  auto past = ids_for(
      *b, "page",
      [](query_args& a) {
        a.offset = 40;
        a.limit = 5;
      },
      &total);
  EXPECT_EQ(total, 30u);
  EXPECT_TRUE(past.empty());
}

TEST(index_test, date_sort_newest_first_ties_by_id) {
  // Verifies sort=date orders by time descending, then id ascending.
  auto b = make_backend({
      {"5", "news", "a", 100},
      {"3", "news", "b", 300},
      {"4", "news", "c", 300},
      {"1", "news news news", "d", 50},
  });
  EXPECT_EQ(ids_for(*b, "news", [](query_args& a) { a.sort = sort_order::date; }),
            (ids{"3", "4", "5", "1"}));
}

TEST(index_test, query_without_tokens_matches_nothing) {
  // Verifies a query of only punctuation is a valid search with zero results.
  auto b = make_backend(small_corpus());
  uint64_t total = 7;
  EXPECT_EQ(ids_for(*b, "?!", &total), ids{});
  EXPECT_EQ(total, 0u);
}

TEST(index_test, results_identical_for_any_shard_count) {
  // Verifies global statistics and the merge make results independent of sharding.
  std::string first;
  for (uint32_t shards : {1u, 3u, 8u}) {
    auto b = load_sample(shards);
    auto s = b->make_scratch();
    std::string all;
    for (std::string_view q :
         {"the rust", "kernel", "\"open source\"", "database query", "the", "go python"}) {
      for (sort_order so : {sort_order::relevance, sort_order::date}) {
        query_args a;
        a.query = q;
        a.limit = 20;
        a.offset = 3;
        a.sort = so;
        out_buffer out;
        ASSERT_TRUE(b->search_stories(a, *s, out, false).has_value());
        all += out.view();
        all += '\n';
      }
    }
    if (first.empty()) {
      first = all;
    } else {
      EXPECT_EQ(all, first) << shards;
    }
  }
}

TEST(index_test, sample_corpus_loads_and_answers) {
  // Verifies the embedded sample has its size and common words find many stories.
  auto b = load_sample(4);
  EXPECT_EQ(b->story_count(), sample_count);
  uint64_t total = 0;
  auto got = ids_for(*b, "rust", &total);
  EXPECT_GT(total, 10u);
  EXPECT_EQ(got.size(), std::min<uint64_t>(50, total));
}

TEST(index_test, queries_allocate_nothing_after_warm_up) {
  // Verifies the steady-state search + render path makes no heap allocation.
  auto b = load_sample(4);
  auto s = b->make_scratch();
  out_buffer out(1 << 20);
  std::vector<std::string_view> queries = {"the", "rust kernel", "\"open source\" linux",
                                           "database query performance", "nothingmatcheshere"};
  std::string known_id = ids_for(*b, "the").at(0);
  auto run = [&] {
    for (std::string_view q : queries) {
      for (sort_order so : {sort_order::relevance, sort_order::date}) {
        query_args a;
        a.query = q;
        a.limit = 50;
        a.offset = 1000;
        a.sort = so;
        a.add_tag("rust");
        out.clear();
        ASSERT_TRUE(b->search_stories(a, *s, out, true).has_value());
        a.tag_count = 0;
        a.offset = 0;
        out.clear();
        ASSERT_TRUE(b->search_stories(a, *s, out, false).has_value());
      }
    }
    out.clear();
    ASSERT_TRUE(b->get_story(known_id, out, true).has_value());
    out.clear();
    ASSERT_FALSE(b->get_story("no-such-id", out, false).has_value());
  };
  run();
  run();
  test::alloc_scope scope;
  run();
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::search

namespace tollgate::search {
namespace {

std::vector<std::string> page(const backend& b, scratch& s, std::string_view q, sort_order so,
                              uint32_t offset, uint32_t limit, int64_t since) {
  query_args a;
  a.query = q;
  a.sort = so;
  a.offset = offset;
  a.limit = limit;
  a.since = since;
  auto r = b.search(a, s);
  EXPECT_TRUE(r.has_value());
  std::vector<std::string> out;
  for (const hit& h : r->stories) {
    out.emplace_back(h.id);
  }
  return out;
}

TEST(index_test, search_job_in_slices_equals_search) {
  // Verifies a search_job run in small slices (interleaved with other searches on the core's
  // own scratch) renders exactly what backend::search renders, for terms, phrases, filters,
  // date sort and deep offsets, and that heavy queries take many slices.
  auto b = load_sample(3);
  auto s = b->make_scratch();
  search_job job(*b);
  uint32_t most_slices = 0;
  for (std::string_view q : {"the", "rust", "of the", "\"of the\"", "\"the a\" linux",
                             "linux kernel", "nothingmatcheshere", "new the a"}) {
    for (sort_order so : {sort_order::relevance, sort_order::date}) {
      for (uint32_t off : {0u, 40u, 1000u}) {
        query_args a;
        a.query = q;
        a.sort = so;
        a.offset = off;
        a.limit = 10;
        if (off == 40) {
          a.since = 1600000000;
          a.add_tag("rust");
        }
        out_buffer want, got;
        ASSERT_TRUE(b->search_stories(a, *s, want, false).has_value());
        b->start(a, job);
        EXPECT_TRUE(job.matches(a));
        uint32_t slices = 1;
        while (!b->run(job, 37)) {
          ++slices;
          query_args other;  // another search on the core between slices
          other.query = "kernel";
          out_buffer scratch_out;
          ASSERT_TRUE(b->search_stories(other, *s, scratch_out, false).has_value());
        }
        most_slices = std::max(most_slices, slices);
        ASSERT_TRUE(job.done());
        ASSERT_TRUE(job.outcome().has_value());
        json_out j(got, false);
        b->render(*job.outcome(), j);
        EXPECT_EQ(got.view(), want.view()) << q << " offset " << off;
      }
    }
  }
  EXPECT_GT(most_slices, 100u);
  query_args other;
  other.query = "the";
  EXPECT_FALSE(job.matches(other));
}

TEST(index_test, block_skipping_never_changes_results) {
  // Verifies pruned evaluation (single-term block skipping, multi-term bound checks) returns
  // exactly the pages of the unpruned ranking: any page equals the matching slice of a deeper
  // ranking, and the filter-free fast path equals the general path.
  auto b = load_sample(3);
  auto s = b->make_scratch();
  const int64_t open = std::numeric_limits<int64_t>::min();
  for (std::string_view q : {"the", "rust", "a", "of the", "linux kernel", "new the a", "is"}) {
    for (sort_order so : {sort_order::relevance, sort_order::date}) {
      auto deep = page(*b, *s, q, so, 0, 50, open + 1);  // general path
      auto deep_fast = page(*b, *s, q, so, 0, 50, open);
      EXPECT_EQ(deep, deep_fast) << q;
      for (uint32_t off : {0u, 7u, 30u}) {
        auto p = page(*b, *s, q, so, off, 10, open);
        std::vector<std::string> want(deep.begin() + std::min<size_t>(off, deep.size()),
                                      deep.begin() + std::min<size_t>(off + 10, deep.size()));
        EXPECT_EQ(p, want) << q << " offset " << off;
      }
    }
  }
}

TEST(index_test, postings_exact_over_many_terms_and_long_records) {
  // Verifies the build's record streams (one per range of 1,024 term numbers, in extents of
  // 64 KB) lose and reorder nothing: a shard of ~12,000 distinct words, where a word's docs
  // come from many streams' extents, and one doc whose positions for a word (70,000
  // occurrences) are longer than an extent, answers every kind of term exactly.
  std::vector<mini_story> stories;
  for (int i = 0; i < 300; ++i) {
    std::string text = "common shared" + std::to_string(i % 7);
    for (int j = 0; j < 40; ++j) {
      text += " u" + std::to_string(i) + "x" + std::to_string(j);
    }
    if (i == 0) {
      for (int r = 0; r < 70000; ++r) {
        text += " rep";
      }
    }
    text += " tail";
    stories.push_back({std::to_string(1000 + i), "story " + std::to_string(i), text});
  }
  auto b = make_backend(stories, 1);
  uint64_t total = 0;
  EXPECT_EQ(ids_for(*b, "u5x3", &total), ids{"1005"});
  EXPECT_EQ(total, 1u);
  EXPECT_EQ(ids_for(*b, "u299x39 common", &total), ids{"1299"});
  for (int i = 0; i < 300; ++i) {  // a word of every stream
    const std::string word = "u" + std::to_string(i) + "x" + std::to_string(i % 40);
    EXPECT_EQ(ids_for(*b, word + " common"), ids{std::to_string(1000 + i)}) << word;
  }
  EXPECT_EQ(ids_for(*b, "rep"), ids{"1000"});
  EXPECT_EQ(ids_for(*b, "\"rep rep\" tail"), ids{"1000"});
  EXPECT_EQ(ids_for(*b, "\"u0x39 rep\""), ids{"1000"});
  EXPECT_EQ(ids_for(*b, "\"rep tail\""), ids{"1000"});
  ids_for(*b, "common", &total);
  EXPECT_EQ(total, 300u);
  const auto shared3 = ids_for(*b, "shared3 tail", &total);
  EXPECT_EQ(total, 43u);  // i = 3, 10, ..., 297
  for (const std::string& id : shared3) {
    EXPECT_EQ((std::stoi(id) - 1000) % 7, 3) << id;
  }
  EXPECT_EQ(ids_for(*b, "\"u7x5 u7x6\""), ids{"1007"});
  EXPECT_EQ(ids_for(*b, "\"u7x6 u7x5\""), ids{});
}

// The in-process shards of `jsonl` loaded into one shard, finalized, with terms in at least
// 1 / `divisor` of the docs given bitsets (0: none).
std::unique_ptr<backend> one_shard(const std::string& jsonl, uint32_t divisor) {
  const uint32_t saved = dense_divisor;
  dense_divisor = divisor;
  load_options o;
  o.shards = 1;
  load_report rep;
  auto b = load_jsonl(jsonl, o, rep);
  dense_divisor = saved;
  EXPECT_TRUE(b.has_value());
  return b ? std::move(*b) : nullptr;
}

TEST(index_test, memory_bytes_counts_the_bitsets_of_dense_terms) {
  // Verifies local_shard::memory_bytes() counts the tables finalize() derives: the same shard
  // with its frequent terms given doc bitsets (everything else alike) reports at least one
  // bitset's bytes more than with none; the old figure left the prune index out.
  std::string jsonl;
  generate_corpus(3000, 17, [&jsonl](std::string_view c) { jsonl += c; });
  auto none = one_shard(jsonl, 0);  // df * 0 < docs: no term has a bitset
  auto dense = one_shard(jsonl, 16);
  ASSERT_TRUE(none && dense);
  const auto& a = static_cast<const local_shard&>(none->local_shard(0));
  const auto& b = static_cast<const local_shard&>(dense->local_shard(0));
  ASSERT_EQ(a.doc_count(), 3000u);
  const size_t bitset_bytes = (a.doc_count() + 63) / 64 * 8;
  EXPECT_GE(b.memory_bytes(), a.memory_bytes() + bitset_bytes)
      << "without bitsets " << a.memory_bytes() << ", with " << b.memory_bytes();
}

}  // namespace
}  // namespace tollgate::search
