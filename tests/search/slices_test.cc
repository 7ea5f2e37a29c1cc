// Searches in tiny slices, class by class (issue 33, "resumable evaluation"): a search that
// yields keeps its cursors, heap and counts and resumes where it stopped, so
//   1. its answer is the whole search's, bit for bit, and the exhaustive reference's, with
//      pruning on and off, for every query class (one term, two and three terms, phrases,
//      filters, date order, deep pages) and slices down to one posting;
//   2. its work, summed over the slices, is the whole search's (nothing is evaluated twice).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "search/differential_fixture.h"
#include "search/fleet_impl.h"
#include "search/local_shard.h"
#include "tollgate/search/backend.h"

namespace tollgate::search {
namespace {

using namespace test_support;

// A query of each class, with its arguments (query_args views into `text` and `tags`).
struct class_query {
  class_query(std::string w, std::string t, sort_order s = sort_order::relevance, uint32_t off = 0,
              uint32_t lim = 10, int64_t from = std::numeric_limits<int64_t>::min(),
              int64_t to = std::numeric_limits<int64_t>::max())
      : what(std::move(w)),
        text(std::move(t)),
        sort(s),
        offset(off),
        limit(lim),
        since(from),
        until(to) {}
  std::string what;  // the class, for failure messages
  std::string text;
  sort_order sort;
  uint32_t offset;
  uint32_t limit;
  int64_t since;
  int64_t until;
  std::vector<std::string> tags;

  query_args args() const {
    query_args a;
    a.query = text;
    a.sort = sort;
    a.offset = offset;
    a.limit = limit;
    a.since = since;
    a.until = until;
    for (const std::string& t : tags) {
      a.add_tag(t);
    }
    return a;
  }
};

// Common words (long postings, impact lists, pair terms) and rarer ones, so that each class
// takes its evaluators' paths: champion lists and block skipping, the pruned walk and its
// count, the leapfrog with position checks, pair terms, listed phrases, the filter and the time
// walk. The generated corpora's times lie in 2019-2024.
std::vector<class_query> classes() {
  const int64_t y2020 = 1577836800, y2021 = 1609459200, y2023 = 1672531200;
  std::vector<class_query> q;
  for (const char* t : {"the", "rust", "linux"}) {
    q.push_back({"one term", t});
    q.push_back({"one term, past the champion lists", t, sort_order::relevance, 40, 50});
  }
  for (const char* t : {"of the", "linux kernel", "rust the", "a new"}) {
    q.push_back({"two terms", t});
  }
  for (const char* t : {"new the a", "of the a", "the a rust", "linux kernel the"}) {
    q.push_back({"three terms", t});
  }
  for (const char* t : {"\"of the\"", "\"the a\" linux", "\"of the a\"", "\"of the\" \"the a\"",
                        "rust \"the new\"", "\"a the the\""}) {
    q.push_back({"phrase", t});
  }
  for (const char* t : {"the", "of the", "linux kernel", "\"of the\" a"}) {
    q.push_back({"since/until", t, sort_order::relevance, 0, 10, y2020, y2021});
    q.push_back({"since", t, sort_order::relevance, 0, 10, y2023});
    class_query tag{"tag", t};
    tag.tags = {"rust"};
    q.push_back(tag);
    tag.what = "tags and a window, by date";
    tag.tags = {"linux", "programming"};
    tag.sort = sort_order::date;
    tag.since = y2020;
    q.push_back(tag);
  }
  for (const char* t : {"the", "of the", "the a rust", "\"of the\""}) {
    q.push_back({"by date", t, sort_order::date});
  }
  for (const char* t : {"the", "the a", "\"of the\"", "linux"}) {
    q.push_back({"deep page", t, sort_order::relevance, 1000, 50});
    q.push_back({"deep page by date", t, sort_order::date, 1000, 50});
  }
  return q;
}

std::string rendered(const backend& b, const result<search_result, errc>& r) {
  if (!r) {
    return "error " + std::string(code(r.error()));
  }
  out_buffer out;
  json_out j(out, false);
  b.render(*r, j);
  return std::string(out.view());
}

TEST(slices_test, every_class_in_tiny_slices_equals_whole_and_spends_the_same_work) {
  // Verifies a search_job run in slices of 1, 2, 7 and 512 postings, two jobs interleaved
  // slice by slice (as parked requests are), renders exactly what backend::search renders for
  // each query class, and that its work summed over the slices is at most the work of the same
  // job run in one slice plus one unit per slice: a slice resumes, nothing is done again.
  auto b = load_sample(4);
  auto s = b->make_scratch();
  search_job job(*b), other(*b);
  query_args interleaved;
  interleaved.query = "the linux";
  interleaved.offset = 700;
  uint32_t multi_slice = 0;
  for (const class_query& q : classes()) {
    const query_args a = q.args();
    const std::string what = q.what + ": " + q.text + " offset " + std::to_string(q.offset);
    const std::string want = rendered(*b, b->search(a, *s));
    // the whole job's work, in one bounded slice
    b->start(a, job);
    ASSERT_TRUE(b->run(job, uint64_t{1} << 62)) << what;
    ASSERT_EQ(rendered(*b, job.outcome()), want) << what;
    const uint64_t whole_work = job.work();
    for (uint64_t budget : {1, 2, 7, 512}) {
      b->start(a, job);
      b->start(interleaved, other);
      uint64_t slices = 0;
      bool done = false, other_done = false;
      while (!done) {
        done = b->run(job, budget);
        ++slices;
        if (!other_done) {
          other_done = b->run(other, budget);
        }
      }
      EXPECT_EQ(rendered(*b, job.outcome()), want) << what << ", slices of " << budget;
      EXPECT_LE(job.work(), whole_work + slices) << what << ", slices of " << budget;
      multi_slice += budget == 1 && slices > 100;
    }
  }
  // the classes hold heavy queries: most take many slices of one posting
  EXPECT_GT(multi_slice, 30u);
}

// A plan for `q` as the backend makes it (plan_terms, document frequencies over the fixture's
// shards, score_weights), owned by rp.
void plan_of(const corpus_fixture& fx, const class_query& q, random_plan& rp) {
  out_buffer chars;
  std::vector<std::string_view> terms;
  std::vector<phrase_span> phrases;
  std::vector<uint32_t> phrase_terms;
  std::vector<uint8_t> alone;
  plan_terms(q.text, chars, terms, phrases, phrase_terms, alone);
  for (std::string_view t : terms) {
    rp.term_store.emplace_back(t);
  }
  for (const std::string& t : rp.term_store) {
    rp.terms.emplace_back(t);
  }
  rp.phrases = phrases;
  rp.phrase_terms = phrase_terms;
  rp.alone = alone;
  rp.text = q.what + ": " + q.text;
  query_plan& p = rp.plan;
  p.terms = rp.terms;
  p.phrases = rp.phrases;
  p.phrase_terms = rp.phrase_terms;
  const bool phrase_df = needs_phrase_df(rp.alone, rp.phrases.size(), q.sort);
  query_plan df_plan{};
  df_plan.terms = rp.terms;
  if (phrase_df) {
    df_plan.phrases = rp.phrases;
    df_plan.phrase_terms = rp.phrase_terms;
  }
  std::vector<uint64_t> df(rp.terms.size() + (phrase_df ? rp.phrases.size() : 0), 0);
  shard_workspace ws;
  for (local_shard* sh : fx.shards) {
    sh->add_doc_freqs(df_plan, ws, df.data());
  }
  score_weights(fx.total_docs, rp.alone, df, rp.phrases.size(), phrase_df, rp.idf, rp.phrase_idf);
  p.idf = rp.idf;
  p.phrase_idf = rp.phrase_idf;
  for (const std::string& t : q.tags) {
    rp.tags.emplace_back(t);
  }
  p.tags = rp.tags;
  p.since = q.since;
  p.until = q.until;
  p.sort = q.sort;
  p.k = std::min<uint32_t>(q.offset + q.limit, kMaxK);
}

TEST(slices_test, every_class_in_slices_of_one_posting_equals_the_reference) {
  // Verifies each shard's search_slice in slices of one and of three postings, with pruning on
  // and off, gives the exhaustive reference's total, ids, docs and keys bit for bit for every
  // query class, its document frequencies counted in slices too.
  corpus_fixture fx(3000, 33, 2);
  shard_workspace ws;
  shard_answer got, want;
  for (const class_query& q : classes()) {
    random_plan rp;
    plan_of(fx, q, rp);
    for (bool prune : {true, false}) {
      prune_enabled = prune;
      for (uint64_t budget : {1, 3}) {
        const std::string what =
            rp.text + (prune ? " pruned" : " unpruned") + ", slices of " + std::to_string(budget);
        // the document frequencies in slices equal the whole count
        std::vector<uint64_t> df_whole(rp.terms.size() + rp.phrases.size(), 0);
        std::vector<uint64_t> df_sliced(df_whole.size(), 0);
        for (local_shard* sh : fx.shards) {
          ASSERT_TRUE(sh->add_doc_freqs(rp.plan, ws, df_whole.data()));
          bool first = true;
          slice sd = slice::more;
          while (sd == slice::more) {
            uint64_t left = budget;
            sd = sh->doc_freqs_slice(rp.plan, ws, df_sliced.data(), first, left);
            first = false;
          }
          ASSERT_EQ(sd, slice::done) << what;
        }
        EXPECT_EQ(df_sliced, df_whole) << what;
        for (size_t si = 0; si < fx.shards.size(); ++si) {
          local_shard& sh = *fx.shards[si];
          sh.reference_search(rp.plan, want);
          bool first = true;
          slice sl = slice::more;
          while (sl == slice::more) {
            uint64_t left = budget;
            sl = sh.search_slice(rp.plan, ws, got, first, left);
            first = false;
          }
          ASSERT_EQ(sl, slice::done) << what;
          expect_same(got, want, what + " shard " + std::to_string(si));
          if (::testing::Test::HasFatalFailure()) {
            prune_enabled = true;
            return;
          }
        }
      }
    }
    prune_enabled = true;
  }
}

}  // namespace
}  // namespace tollgate::search
