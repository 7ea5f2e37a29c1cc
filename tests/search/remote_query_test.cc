// The gateway's fan-out state (remote_query.cc): the global idf over every slot, and answers
// from shard nodes refused whole when malformed.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cmath>
#include <string>
#include <vector>

#include "search/fleet_fixture.h"
#include "search/fleet_impl.h"
#include "search/test_corpus.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/corpus.h"
#include "tollgate/search/fleet.h"

namespace tollgate::search {
namespace {

using namespace test_support;

TEST(fleet_test, global_idf_equals_the_union_backends) {
  // Verifies the idf a gateway sends in phase 2 is bit-identical to the idf a single node over
  // the union corpus computes from its own document frequencies.
  fleet_fixture f(generated(1200, 5), 2, {2, 2});
  remote_query q(f.remotes());
  remote_query whole(0);
  for (const query_args& a : sample_queries()) {
    f.fan_out(q, a);
    whole.start_search(*f.all, a);
    whole.finish_df();
    ASSERT_EQ(q.idf().size(), whole.idf().size());
    for (size_t i = 0; i < q.idf().size(); ++i) {
      EXPECT_EQ(q.idf()[i], whole.idf()[i]) << a.query << " term " << i;
    }
    ASSERT_EQ(q.phrase_idf().size(), whole.phrase_idf().size());
    for (size_t i = 0; i < q.phrase_idf().size(); ++i) {
      EXPECT_EQ(q.phrase_idf()[i], whole.phrase_idf()[i]) << a.query << " phrase " << i;
    }
    EXPECT_EQ(q.avgdl(), whole.avgdl()) << a.query;
    EXPECT_EQ(q.avgdl(), average_length(f.all->local_stats()));
    // and that is FTS5's formula over the union's frequencies (0 for a phrase-only term)
    auto s = f.all->make_scratch();
    query_plan dp{};
    dp.terms = q.terms();
    std::vector<uint64_t> df(q.terms().size(), 0);
    ASSERT_TRUE(f.all->add_local_doc_freqs(dp, *s, df.data()));
    const planned pl(a.query);
    for (size_t i = 0; i < df.size(); ++i) {
      const double n = static_cast<double>(f.all->story_count());
      const double d = static_cast<double>(df[i]);
      const double idf = std::log((n - d + 0.5) / (d + 0.5));
      EXPECT_EQ(q.idf()[i], pl.alone[i] * std::max(idf, 1e-6)) << a.query;
    }
  }
}

// Over 80 lines on purpose: a table of malformed answers per phase (df, search, story).
TEST(fleet_test, gateway_rejects_malformed_answers) {
  // Verifies unusable phase 1, phase 2 and story answers (bad status, malformed or inconsistent
  // bodies) return false and leave the remote counted as not answered, without crashing.
  fleet_fixture f(to_jsonl(small_corpus_for_fleet()), 1, {1});
  remote_query q(1);
  query_args a;
  a.query = "rust compiler";
  a.limit = 2;
  auto feed = [](std::string_view body, out_buffer& b) {
    b.clear();
    b.append(body);
    return padded(b);
  };
  out_buffer b;
  const std::vector<std::string> bad_df = {
      "",
      "{}",
      "[]",
      R"({"docs":3,"title_tokens":1,"text_tokens":1})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2,3]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,4]})",
      R"({"docs":-3,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":"3","title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2.5]})",
      R"({"docs":3,"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
      R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]}])",
      R"({"docs":99999999999999,"title_tokens":1,"text_tokens":1,"df":[1,2]})",
  };
  q.start_search(*f.gateway, a);
  EXPECT_FALSE(q.on_df(0, 0, {}));
  EXPECT_FALSE(
      q.on_df(0, 500, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  for (const std::string& body : bad_df) {
    EXPECT_FALSE(q.on_df(0, 200, feed(body, b))) << body;
  }
  EXPECT_FALSE(
      q.on_df(1, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  EXPECT_TRUE(
      q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  EXPECT_FALSE(
      q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[1,2]})", b)));
  q.finish_df();
  EXPECT_TRUE(q.df_ok(0));
  const std::string good = R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},)"
                           R"({"key":1.5,"id":"9","story":{"id":"9","t":"x"}}]})";
  const std::vector<std::string> bad_search = {
      "",
      "{}",
      "[]",
      R"({"total":2})",
      R"({"hits":[]})",
      R"({"total":-1,"hits":[]})",
      R"({"total":1,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":1.5,"id":"9","story":{"id":"9"}}]})",
      R"({"total":5,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":1.5,"id":"9","story":{"id":"9"}},{"key":1,"id":"10","story":{"id":"10"}}]})",
      R"({"total":2,"hits":[{"key":1.5,"id":"8","story":{"id":"8"}},{"key":2.5,"id":"9","story":{"id":"9"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}},{"key":2.5,"id":"8","story":{"id":"8"}}]})",
      R"({"total":2,"hits":[{"key":"2.5","id":"8","story":{"id":"8"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"","story":{"id":""}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":"{}"}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"7"}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8"}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8",}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8","x":tru}}]})",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}}]} x)",
      R"({"total":2,"hits":[{"key":2.5,"id":"8","story":{"id":"8"}})",
      R"({"total":2,"hits":{}})",
  };
  for (const std::string& body : bad_search) {
    EXPECT_FALSE(q.on_search(0, 200, feed(body, b))) << body;
  }
  EXPECT_FALSE(q.on_search(0, 503, feed(good, b)));
  auto r = f.gateway->search(a, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->answered, 1u);
  EXPECT_TRUE(r->partial());
  // the well-formed answer is taken (once), with its stories as received
  EXPECT_TRUE(q.on_search(0, 200, feed(good, b)));
  EXPECT_FALSE(q.on_search(0, 200, feed(good, b)));
  b.clear();
  b.append("garbage that overwrites the body buffer");
  r = f.gateway->search(a, *f.gs, &q);
  ASSERT_TRUE(r.has_value());
  EXPECT_FALSE(r->partial());
  out_buffer out;
  json_out j(out, false);
  f.gateway->render(*r, j);
  EXPECT_NE(out.view().find(R"({"id":"9","t":"x"})"), std::string_view::npos) << out.view();

  // stories: 404 is an answer, anything else is not; a 200 must be the story asked for
  q.start_story("8");
  EXPECT_FALSE(q.on_story(0, 200, feed(R"({"id":"7"})", b)));
  EXPECT_FALSE(q.on_story(0, 200, feed(R"({"id":"8")", b)));
  EXPECT_FALSE(q.on_story(0, 200, feed(R"(["id","8"])", b)));
  EXPECT_FALSE(q.on_story(0, 0, {}));
  EXPECT_FALSE(q.on_df(0, 200, feed(R"({"docs":3,"title_tokens":1,"text_tokens":1,"df":[]})", b)));
  EXPECT_TRUE(q.on_story(0, 200, feed(R"({"id":"8","title":"x"} )", b)));
  EXPECT_FALSE(q.on_story(0, 404, {}));
  auto s = f.gateway->find_story("8", &q);
  ASSERT_TRUE(s.has_value());
  out.clear();
  ASSERT_TRUE(f.gateway->get_story("8", out, false, &q).has_value());
  EXPECT_EQ(out.view(), R"({"id":"8","title":"x"})");
}

}  // namespace
}  // namespace tollgate::search
