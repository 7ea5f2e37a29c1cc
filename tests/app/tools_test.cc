// The MCP tools run against a tool_context built here, with a fake tool_caller: no core_host,
// no quota service, no endpoint. What a tool may use is only what tools.h declares, so these
// tests hand it exactly that (the sample corpus's backend, a cache, search jobs) and compare
// its payloads with the backend's own answers.
#include "app/tools.h"

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "app/search_cache.h"
#include "tollgate/common/buffer.h"
#include "tollgate/common/json_out.h"
#include "tollgate/quota/service.h"
#include "tollgate/search/backend.h"
#include "tollgate/search/query.h"

namespace tollgate::app {
namespace {

// The request's caller as a test states it: a fixed key and figures, and what the tools
// told it.
class fake_caller final : public tool_caller {
 public:
  quota::key_record k;
  quota::figures fig;
  int figures_asked = 0;
  uint32_t partial_answered = 0;
  uint32_t partial_total = 0;

  const quota::key_record& key() const override { return k; }
  const quota::figures& figures_now() override {
    ++figures_asked;
    return fig;
  }
  void note_partial(uint32_t answered, uint32_t total) override {
    partial_answered = answered;
    partial_total = total;
  }
  bool billed = false;  // a call before this one in the delivery was billed
  bool billed_earlier() const override { return billed; }
};

// A context of some other application's tools.
class other_env final : public mcp::tool_env {
 public:
  other_env() : mcp::tool_env(&tag_) {}

 private:
  static constexpr char tag_ = 0;
};

class tools_test : public ::testing::Test {
 protected:
  std::unique_ptr<search::backend> backend = search::load_sample(2);
  fake_caller caller;
  tool_context tools{*backend, caller};
  mcp::registry reg;
  out_buffer out;

  tools_test() { register_tools(reg); }

  // The arguments of a call of `tool`, the endpoint's way: the given ones by name, defaults
  // for the rest.
  mcp::arguments args_of(
      std::string_view tool,
      std::initializer_list<std::pair<std::string_view, std::string_view>> given) {
    const mcp::tool_def* def = reg.find(tool);
    mcp::arguments a;
    for (size_t i = 0; i < def->args.size(); ++i) {
      const mcp::arg_spec& s = def->args[i];
      mcp::arg_value& v = a.values[i];
      if (s.has_default) {
        v.has_value = true;
        v.num = s.default_int;
        v.str = s.default_string;
      }
      for (const auto& [name, value] : given) {
        if (name == s.name) {
          v.present = v.has_value = true;
          v.str = value;
        }
      }
    }
    return a;
  }

  // Runs `tool` in the test's context; its payload is `out` (nested, as in the text block).
  mcp::tool_result call(std::string_view tool, const mcp::arguments& a) {
    out.clear();
    json_out j(out, true);
    mcp::call_context ctx{&tools, envelope::revision::v2025_03_26};
    return reg.find(tool)->impl->call(a, j, ctx);
  }

  // The backend's own answer to `query` (whole, in one search), rendered as the tool writes it.
  std::string whole_answer(std::string_view query) {
    search::query_args q;
    q.query = query;
    auto s = backend->make_scratch();
    auto r = backend->search(q, *s);
    EXPECT_TRUE(r.has_value());
    out_buffer b;
    json_out j(b, true);
    backend->render(*r, j);
    return std::string(b.view());
  }
};

TEST_F(tools_test, search_stories_writes_the_backends_answer) {
  // Verifies search_stories, given only a tool_context, writes exactly the backend's answer
  // for its arguments and asks the caller nothing (no figures, no partial note).
  ASSERT_TRUE(call("search_stories", args_of("search_stories", {{"query", "the"}})).ok);
  EXPECT_EQ(out.view(), whole_answer("the"));
  EXPECT_NE(out.view().find("\\\"total\\\":"), std::string_view::npos);
  EXPECT_EQ(caller.figures_asked, 0);
  EXPECT_EQ(caller.partial_total, 0u);
}

TEST_F(tools_test, search_stories_answers_a_repeat_from_the_contexts_cache) {
  // Verifies the answer cache set on the context is what search_stories fills and reads: the
  // second identical call is a hit with the same bytes.
  search_cache_stats st;
  search_cache cache({64, 1 << 16}, &st);
  tools.set_search_cache(&cache);
  const mcp::arguments a = args_of("search_stories", {{"query", "the"}});
  ASSERT_TRUE(call("search_stories", a).ok);
  const std::string first(out.view());
  ASSERT_TRUE(call("search_stories", a).ok);
  EXPECT_EQ(out.view(), first);
  EXPECT_EQ(st.inserts.load(), 1u);
  EXPECT_EQ(st.hits.load(), 1u);
}

TEST_F(tools_test, search_stories_in_slices_yields_until_its_job_is_done) {
  // Verifies searches in slices through the context alone: a search that outlasts its slice
  // yields (an unavailable tool error, the delivery discarded) and leaves its job; once
  // advance_jobs() completed it, the same call on a new delivery answers exactly the whole
  // search's bytes.
  tool_context::job_group jobs;
  tools.use_jobs(&jobs);
  tools.set_search_slice(1);
  const mcp::arguments a = args_of("search_stories", {{"query", "the a"}});
  tools.begin_request();
  mcp::tool_result r = call("search_stories", a);
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.code, envelope::tool_error_code::unavailable);
  EXPECT_TRUE(tools.yielded());
  ASSERT_EQ(tools.jobs_used(), 1u);
  int slices = 0;
  while (!tools.advance_jobs(1)) {
    ++slices;
    ASSERT_LT(slices, 1000000);
  }
  tools.begin_request();
  ASSERT_TRUE(call("search_stories", a).ok);
  EXPECT_FALSE(tools.yielded());
  EXPECT_EQ(out.view(), whole_answer("the a"));
}

TEST_F(tools_test, a_batch_of_searches_in_slices_starts_every_job_in_its_first_delivery) {
  // Verifies that in a delivery whose first search yields, the later searches start their jobs
  // without running them (still answering the yield's error), so that advance_jobs() carries
  // all of them to the end and one more delivery answers every call with the whole search's
  // bytes: the endpoint runs twice for the batch, not once per search.
  tool_context::job_group jobs;
  tools.use_jobs(&jobs);
  tools.set_search_slice(1);
  const mcp::arguments a = args_of("search_stories", {{"query", "the a"}});
  const mcp::arguments b = args_of("search_stories", {{"query", "of the"}});
  tools.begin_request();
  ASSERT_FALSE(call("search_stories", a).ok);
  ASSERT_TRUE(tools.yielded());
  ASSERT_FALSE(call("search_stories", b).ok);
  ASSERT_EQ(tools.jobs_used(), 2u);
  ASSERT_TRUE(jobs[1]->started());
  EXPECT_FALSE(jobs[1]->done());
  EXPECT_EQ(jobs[1]->work(), 0u);  // started, not run
  int slices = 0;
  while (!tools.advance_jobs(2)) {
    ++slices;
    ASSERT_LT(slices, 1000000);
  }
  EXPECT_TRUE(jobs[0]->done());
  EXPECT_TRUE(jobs[1]->done());
  tools.begin_request();
  ASSERT_TRUE(call("search_stories", a).ok);
  EXPECT_EQ(out.view(), whole_answer("the a"));
  ASSERT_TRUE(call("search_stories", b).ok);
  EXPECT_EQ(out.view(), whole_answer("of the"));
  EXPECT_FALSE(tools.yielded());
}

TEST_F(tools_test, get_story_renders_a_story_and_reports_an_unknown_id) {
  // Verifies get_story finds a story through the context's backend (the id of the first hit
  // of a search) and answers an unknown id with the not_found tool error.
  search::query_args q;
  q.query = "the";
  auto s = backend->make_scratch();
  auto found = backend->search(q, *s);
  ASSERT_TRUE(found.has_value());
  ASSERT_FALSE(found->stories.empty());
  const std::string id(found->stories[0].id);
  ASSERT_TRUE(call("get_story", args_of("get_story", {{"id", id}})).ok);
  EXPECT_NE(out.view().find("\\\"id\\\":\\\"" + id + "\\\""), std::string_view::npos) << out.view();
  EXPECT_NE(out.view().find("\\\"text\\\":"), std::string_view::npos);
  mcp::tool_result r = call("get_story", args_of("get_story", {{"id", "no-such-story"}}));
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.code, envelope::tool_error_code::not_found);
}

TEST_F(tools_test, get_usage_renders_the_callers_key_and_current_figures) {
  // Verifies get_usage writes the key and the figures the context's caller gives as of the
  // call (asked once), nothing else.
  caller.k.account = "acme";
  caller.k.plan = "pro";
  caller.fig.rate_limit = 5;
  caller.fig.rate_remaining = 4;
  caller.fig.rate_reset_secs = 1;
  caller.fig.quota_limit = 100;
  caller.fig.quota_used = 7;
  caller.fig.quota_remaining = 93;
  caller.fig.quota_reset_secs = 3600;
  ASSERT_TRUE(call("get_usage", args_of("get_usage", {})).ok);
  EXPECT_EQ(caller.figures_asked, 1);
  const std::string_view v = out.view();
  EXPECT_NE(v.find("\\\"account\\\":\\\"acme\\\",\\\"plan\\\":\\\"pro\\\",\\\"status\\\":"
                   "\\\"active\\\""),
            std::string_view::npos)
      << v;
  EXPECT_NE(v.find("\\\"rate\\\":{\\\"limit\\\":5,\\\"remaining\\\":4,\\\"reset_secs\\\":1}"),
            std::string_view::npos)
      << v;
  EXPECT_NE(v.find("\\\"quota\\\":{\\\"limit\\\":100,\\\"used\\\":7,\\\"remaining\\\":93,"
                   "\\\"reset_secs\\\":3600"),
            std::string_view::npos)
      << v;
}

TEST_F(tools_test, a_call_without_the_apps_tool_context_aborts) {
  // Verifies tool_context::of is checked: a call whose context is none, or another
  // application's, is a fatal wiring bug rather than a cast to the wrong type.
  const mcp::arguments a = args_of("get_usage", {});
  auto call_with = [&](mcp::tool_env* env) {
    json_out j(out, true);
    mcp::call_context ctx;
    ctx.env = env;
    (void)reg.find("get_usage")->impl->call(a, j, ctx);
  };
  EXPECT_DEATH(call_with(nullptr), "check failed");
  other_env other;
  EXPECT_DEATH(call_with(&other), "check failed");
}

}  // namespace
}  // namespace tollgate::app
