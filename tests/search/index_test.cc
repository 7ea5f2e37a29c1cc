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

}  // namespace
}  // namespace tollgate::search

// Differential test of local_shard::search (champion lists, block-max skipping, leapfrog
// intersection, streamed phrase checks) against local_shard::reference_search (tokenize every
// story, score every match, sort fully): the same total, ids, docs and keys, bit for bit.
namespace tollgate::search {
namespace {

struct corpus_fixture {
  std::vector<std::unique_ptr<shard_source>> owned;
  std::vector<local_shard*> shards;
  std::vector<std::vector<std::string>> docs;  // tokens of title + text, per generated story
  std::vector<int64_t> times;
  uint64_t total_docs = 0;

  corpus_fixture(uint64_t count, uint64_t seed, uint32_t nshards) {
    std::string data;
    generate_corpus(count, seed, [&data](std::string_view c) { data += c; });
    load_options o;
    o.shards = nshards;
    o.skip_bad_lines = false;
    load_report rep;
    auto built = build_shards(data, o, rep);
    EXPECT_TRUE(built.has_value());
    owned = std::move(*built);
    shard_stats global;
    for (auto& s : owned) {
      shards.push_back(static_cast<local_shard*>(s.get()));
      shard_stats st = s->stats();
      global.docs += st.docs;
      global.title_tokens += st.title_tokens;
      global.text_tokens += st.text_tokens;
    }
    for (auto& s : owned) {
      s->finalize(global);
    }
    total_docs = global.docs;
    // Query material: the tokens of each story (raw JSON fields; an escape only makes a token
    // that matches nothing, which is a fine query too).
    size_t at = 0;
    while (at < data.size()) {
      size_t nl = data.find('\n', at);
      std::string_view line(data.data() + at, nl - at);
      std::vector<std::string> toks;
      for (std::string_view field : {"\"title\":\"", "\"text\":\""}) {
        size_t f = line.find(field) + field.size();
        token_stream ts(line.substr(f, line.find('"', f) - f));
        std::string_view tok;
        while (ts.next(tok)) {
          toks.emplace_back(tok);
        }
      }
      size_t t = line.find("\"time\":") + 7;
      times.push_back(std::strtoll(line.data() + t, nullptr, 10));
      docs.push_back(std::move(toks));
      at = nl + 1;
    }
  }
};

// A random query plan over the fixture; owns its storage.
struct random_plan {
  std::vector<std::string> term_store;
  std::vector<std::string_view> terms;
  std::vector<double> idf;
  std::vector<double> phrase_idf;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  std::vector<uint8_t> alone;  // per term: stands on its own (else only inside a phrase)
  std::vector<std::string_view> tags;
  query_plan plan{};
  std::string text;  // for failure messages

  uint32_t add_term(std::string_view t, bool on_its_own = true) {
    for (size_t i = 0; i < term_store.size(); ++i) {
      if (term_store[i] == t) {
        alone[i] = alone[i] || on_its_own;
        return static_cast<uint32_t>(i);
      }
    }
    term_store.emplace_back(t);
    alone.push_back(on_its_own);
    return static_cast<uint32_t>(term_store.size() - 1);
  }
};

void make_plan(const corpus_fixture& fx, std::mt19937_64& rng, random_plan& rp) {
  static const char* common[] = {"the", "of", "a", "and", "to", "in", "is", "rust", "linux"};
  auto pick = [&rng](size_t n) { return static_cast<size_t>(rng() % n); };
  const auto& doc = fx.docs[pick(fx.docs.size())];
  const size_t kind = pick(6);  // 0-2: n terms, 3: phrase, 4: phrase + term, 5: common terms
  if (doc.empty()) {
    rp.add_term("the");
  } else if (kind <= 2) {
    for (size_t i = 0; i <= kind; ++i) {
      rp.add_term(doc[pick(doc.size())]);
    }
  } else if (kind <= 4) {
    const size_t len = 2 + pick(2);
    const size_t start = doc.size() > len ? pick(doc.size() - len + 1) : 0;
    const uint32_t first = static_cast<uint32_t>(rp.phrase_terms.size());
    for (size_t i = start; i < std::min(doc.size(), start + len); ++i) {
      rp.phrase_terms.push_back(rp.add_term(doc[i], false));
    }
    const uint32_t n = static_cast<uint32_t>(rp.phrase_terms.size()) - first;
    if (n >= 2) {
      rp.phrases.push_back({first, n});
    }
    if (kind == 4) {
      rp.add_term(common[pick(std::size(common))]);
    }
  } else {
    const size_t n = 1 + pick(3);
    for (size_t i = 0; i < n; ++i) {
      rp.add_term(common[pick(std::size(common))]);
    }
  }
  for (const std::string& t : rp.term_store) {
    rp.terms.emplace_back(t);
    rp.text += t + " ";
  }
  if (rp.phrases.empty()) {
    rp.alone.assign(rp.terms.size(), 1);  // a lone "phrase" of one word is a term
  }
  rp.plan.terms = rp.terms;
  rp.plan.phrases = rp.phrases;
  rp.plan.phrase_terms = rp.phrase_terms;
  // weights as the backend makes them: idf for lone terms, 0 for phrase-only ones, and the
  // phrases' own idf from their document frequencies
  std::vector<uint64_t> df(rp.terms.size() + rp.phrases.size(), 0);
  shard_workspace ws;
  for (local_shard* s : fx.shards) {
    s->add_doc_freqs(rp.plan, ws, df.data());
  }
  score_weights(fx.total_docs, rp.alone, df, rp.phrases.size(), true, rp.idf, rp.phrase_idf);
  rp.plan.idf = rp.idf;
  rp.plan.phrase_idf = rp.phrase_idf;
  // a quarter of the plans rank under another corpus average (a fleet's), above or below the
  // shards' own, which takes the per-doc norm and scaled-bound path
  static const double avgdl_factor[] = {0, 0, 0, 0, 0, 0, 0.7, 1.6};
  const double factor = avgdl_factor[pick(std::size(avgdl_factor))];
  if (factor != 0) {
    uint64_t tokens = 0;
    for (const auto& d : fx.docs) {
      tokens += d.size();
    }
    rp.plan.avgdl = factor * static_cast<double>(tokens) / static_cast<double>(fx.docs.size());
    rp.text += " avgdl*" + std::to_string(factor);
  }
  rp.plan.since = std::numeric_limits<int64_t>::min();
  rp.plan.until = std::numeric_limits<int64_t>::max();
  const size_t filter = pick(8);
  if (filter == 1 || filter == 3) {
    rp.plan.since = fx.times[pick(fx.times.size())];
    rp.text += " since=" + std::to_string(rp.plan.since);
  }
  if (filter == 2 || filter == 3) {
    rp.plan.until = fx.times[pick(fx.times.size())];
    rp.text += " until=" + std::to_string(rp.plan.until);
  }
  if (filter == 4) {
    static const char* tags[] = {"rust", "linux", "python", "go", "security"};
    rp.tags.emplace_back(tags[pick(std::size(tags))]);
    rp.text += " tag=" + std::string(rp.tags.back());
  }
  rp.plan.tags = rp.tags;
  rp.plan.sort = pick(2) ? sort_order::relevance : sort_order::date;
  static const uint32_t ks[] = {1, 2, 5, 10, 10, 10, 20, 31, 32, 33, 50, 128, 129, 1050};
  rp.plan.k = ks[pick(std::size(ks))];
  rp.text += rp.plan.sort == sort_order::date ? " sort=date" : " sort=relevance";
  rp.text += " k=" + std::to_string(rp.plan.k);
}

void expect_same(const shard_answer& got, const shard_answer& want, const std::string& what) {
  ASSERT_EQ(got.total, want.total) << what;
  ASSERT_EQ(got.hits.size(), want.hits.size()) << what;
  for (size_t i = 0; i < got.hits.size(); ++i) {
    EXPECT_EQ(got.hits[i].id, want.hits[i].id) << what << " rank " << i;
    EXPECT_EQ(got.hits[i].doc, want.hits[i].doc) << what << " rank " << i;
    EXPECT_EQ(std::bit_cast<uint64_t>(got.hits[i].key), std::bit_cast<uint64_t>(want.hits[i].key))
        << what << " rank " << i << ": " << got.hits[i].key << " vs " << want.hits[i].key;
  }
}

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
      fast += rp.terms.size() == 1 && want.total > champ_min_df && rp.plan.k < champ_len;
      if (::testing::Test::HasFatalFailure()) {
        return;
      }
    }
  }
  // the random plans exercise matches and the champion-list path, not only empty answers
  EXPECT_GT(nonempty, static_cast<uint64_t>(queries) * nshards / 2);
  EXPECT_GT(fast, 0u);
}

TEST(differential_test, optimised_search_equals_exhaustive_reference) {
  // Verifies search() gives exactly the exhaustive reference's total, ids, docs and keys for
  // random 1-, 2-, 3-term, phrase and common-word queries, with and without filters, both sorts,
  // k around the champion-list and block sizes.
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

// Runs `queries` random plans on each shard with pruning off (the leapfrog path, every match
// scored) and on (whole and in slices of a random budget): same totals, ids, order, keys.
void run_prune_queries(corpus_fixture& fx, uint64_t seed, int queries) {
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
        ASSERT_TRUE(s->add_doc_freqs(rp.plan, ws, df.data()));
      }
      prune_enabled = false;
      ASSERT_TRUE(s->search(rp.plan, ws, off));
      prune_enabled = true;
      ASSERT_TRUE(s->search(rp.plan, ws, on));
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
        return;
      }
    }
  }
  EXPECT_GT(pruned_plans, static_cast<uint64_t>(queries) / 2);
}

void run_prune_on_off(corpus_fixture& fx, uint64_t seed, int queries) {
  const uint32_t saved_min_lead = prune_min_lead_df;
  prune_min_lead_df = 0;  // every query without phrases pruned, however rare its terms
  run_prune_queries(fx, seed, queries);
  prune_min_lead_df = saved_min_lead;
}

TEST(prune_test, pruning_on_and_off_give_identical_answers) {
  // Verifies the pruned evaluation (block and per-doc bounds, totals counted apart) gives the
  // unpruned evaluation's totals, ids, order and keys bit for bit, whole and sliced, for terms,
  // phrases, filters, both sorts, a fleet's avgdl and offsets up to 1000.
  corpus_fixture fx(2400, 57, 2);
  run_prune_on_off(fx, 99, 300);
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
  load_options o;
  o.shards = 1;
  load_report rep;
  auto built = build_shards(data, o, rep);
  ASSERT_TRUE(built.has_value());
  auto& s = *(*built)[0];
  s.finalize(s.stats());
  auto* ls = static_cast<local_shard*>(&s);
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
        plan.since = std::numeric_limits<int64_t>::min();
        plan.until = std::numeric_limits<int64_t>::max();
        plan.sort = so;
        plan.k = k;
        ASSERT_TRUE(ls->search(plan, ws, got));
        ls->reference_search(plan, want);
        expect_same(got, want, std::string(q) + " k=" + std::to_string(k));
      }
    }
  }
}

}  // namespace
}  // namespace tollgate::search
