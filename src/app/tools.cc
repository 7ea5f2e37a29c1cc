#include "tools.h"

#include <memory>

#include "fleet_client.h"
#include "search_cache.h"
#include "tollgate/common/assert.h"
#include "tollgate/envelope/outcome_table.h"
#include "tollgate/rest/api.h"
#include "tollgate/search/query.h"

namespace tollgate::app {
namespace {

// The retry_after_secs of `corpus_loading`.
constexpr int64_t kCorpusRetrySecs = 5;

// Argument indexes of search_stories, in registration order.
enum search_arg : size_t { a_query, a_limit, a_offset, a_since, a_until, a_sort, a_tags };

// since/until: unix seconds as a JSON integer or a string the search parser reads (unix seconds,
// RFC 3339 or a date). Absent leaves `out` unchanged. False: not a time.
bool time_arg(const mcp::arg_value& v, int64_t& out) {
  if (!v.present) {
    return true;
  }
  if (v.is_number) {
    // The range REST's parser (parse_time) allows: 1970 to the end of year 9999.
    if (v.num < 0 || v.num > search::max_unix_time) {
      return false;
    }
    out = v.num;
    return true;
  }
  auto t = search::parse_time(v.str);
  if (!t) {
    return false;
  }
  out = *t;
  return true;
}

// The search that search_stories' arguments ask for; not ok when a rule the schema cannot
// express is broken.
mcp::tool_result query_of(const mcp::arguments& args, search::query_args& q) {
  q.query = args[a_query].str;
  q.limit = static_cast<uint32_t>(args[a_limit].num);
  q.offset = static_cast<uint32_t>(args[a_offset].num);
  if (!time_arg(args[a_since], q.since)) {
    return mcp::tool_result::invalid_argument("since",
                                              "must be unix seconds or an RFC 3339 date-time");
  }
  if (!time_arg(args[a_until], q.until)) {
    return mcp::tool_result::invalid_argument("until",
                                              "must be unix seconds or an RFC 3339 date-time");
  }
  q.sort = args[a_sort].str == "date" ? search::sort_order::date : search::sort_order::relevance;
  for (uint8_t i = 0; i < args[a_tags].num_items; ++i) {
    q.add_tag(args[a_tags].items[i]);
  }
  if (auto v = search::validate(q); !v) {
    return mcp::tool_result::invalid_argument(v.error().argument, v.error().rule);
  }
  return mcp::tool_result::success();
}

// A tool that needs the corpus, called while it is still loading past the gate's bound.
mcp::tool_result corpus_loading() {
  return mcp::tool_result::failure(
      envelope::make_tool_error(envelope::tool_error_code::corpus_loading, kCorpusRetrySecs));
}

class search_stories_tool final : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments& args, json_out& out,
                        mcp::call_context& ctx) override {
    tool_context& t = tool_context::of(ctx);
    search::query_args q;
    if (mcp::tool_result invalid = query_of(args, q); !invalid.ok) {
      return invalid;
    }
    if (t.corpus() == nullptr) {
      return corpus_loading();
    }
    const search::remote_query* remote = nullptr;
    if (fleet_client* f = t.fleet()) {
      remote = f->for_search(q);
    }
    // A whole in-process answer depends only on the arguments (the corpus does not change
    // while serving): a repeated one is copied from the core's cache. Admission and billing
    // already happened around this call and still do, per request.
    search_cache* cache = remote == nullptr ? t.answer_cache() : nullptr;
    if (cache != nullptr && cache->make_key(q, out.nested())) {
      if (const std::string_view* hit = cache->find()) {
        out.buffer().append(*hit);
        return mcp::tool_result::success();
      }
    } else {
      cache = nullptr;
    }
    result<search::search_result, search::errc> r = unexpected(search::errc::unavailable);
    if (remote == nullptr && t.search_slice() > 0 && t.caller().billed_earlier()) {
      // A call billed earlier in this delivery: yielding would discard its answer and bill it
      // again when delivered anew, so this search runs whole (a batch mixing a billed call
      // with a heavy search after it holds its core for that search).
      search::search_job& job = t.next_job();
      if (!job.matches(q)) {
        t.backend().start(q, job);
      }
      if (!job.done()) {
        (void)t.backend().run(job, UINT64_MAX);
      }
      r = job.outcome();
    } else if (remote == nullptr && t.search_slice() > 0) {
      // In slices (core_handler::handle): a search that outlasts its slice defers the request,
      // and its job goes on between the core's other requests until the answer is complete.
      search::search_job& job = t.next_job();
      if (!job.matches(q)) {
        t.backend().start(q, job);
      }
      if (t.yielded()) {
        // An earlier call of this delivery yielded: this one's job is started, not run, so
        // that the request's jobs all advance between its deliveries and the endpoint runs
        // once more when they are done, not once per search of a batch.
        return mcp::tool_result::failure(rest::tool_error_of(search::errc::unavailable));
      }
      if (!job.done() && !t.backend().run(job, t.search_slice())) {
        t.yield();  // this delivery's answer is discarded; nothing is billed
        return mcp::tool_result::failure(rest::tool_error_of(search::errc::unavailable));
      }
      r = job.outcome();
    } else {
      r = t.backend().search(q, t.scratch(), remote);
    }
    if (!r) {
      return mcp::tool_result::failure(rest::tool_error_of(r.error()));
    }
    if (r->partial()) {
      t.caller().note_partial(static_cast<uint32_t>(r->answered), static_cast<uint32_t>(r->shards));
    }
    const size_t mark = out.buffer().size();
    t.backend().render(*r, out);
    if (cache != nullptr && !r->partial()) {
      cache->insert(out.buffer().view().substr(mark));
    }
    return mcp::tool_result::success();
  }
};

class get_story_tool final : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments& args, json_out& out,
                        mcp::call_context& ctx) override {
    tool_context& t = tool_context::of(ctx);
    if (t.yielded()) {
      // An earlier call of this delivery yielded: its answer is discarded and the request
      // delivered again, so this call must not be billed now (it will be then).
      return mcp::tool_result::failure(rest::tool_error_of(search::errc::unavailable));
    }
    if (t.corpus() == nullptr) {
      return corpus_loading();
    }
    const search::remote_query* remote = nullptr;
    if (fleet_client* f = t.fleet()) {
      remote = f->for_story(args[0].str);
    }
    auto ref = t.backend().find_story(args[0].str, remote);
    if (!ref) {
      return mcp::tool_result::failure(rest::tool_error_of(ref.error()));
    }
    // Its text's reads do not wait for the disk (on a core): bytes not in the page cache park
    // the request until the core's ring has read them, and this call runs again then.
    if (auto r = t.backend().render_story(*ref, out, remote, t.read_slot()); !r) {
      if (r.error() == search::errc::would_block) {
        t.yield();  // this delivery's answer is discarded; nothing is billed
      }
      return mcp::tool_result::failure(rest::tool_error_of(r.error()));
    }
    return mcp::tool_result::success();
  }
};

class get_usage_tool final : public mcp::tool {
 public:
  mcp::tool_result call(const mcp::arguments&, json_out& out, mcp::call_context& ctx) override {
    tool_caller& c = tool_context::of(ctx).caller();
    rest::render_usage(out, c.key(), c.figures_now());
    return mcp::tool_result::success();
  }
};

mcp::arg_spec arg(std::string name, mcp::arg_type type, std::string description) {
  mcp::arg_spec a;
  a.name = std::move(name);
  a.type = type;
  a.description = std::move(description);
  return a;
}

// Bounds of an integer argument, or of a string's length, or of an array's item count.
mcp::arg_spec bounded(mcp::arg_spec a, int64_t min, int64_t max) {
  a.has_min = a.has_max = true;
  a.min = min;
  a.max = max;
  return a;
}

mcp::tool_def tool(std::string name, std::string title, std::string description, bool billable,
                   std::shared_ptr<mcp::tool> impl) {
  mcp::tool_def d;
  d.name = std::move(name);
  d.title = std::move(title);
  d.description = std::move(description);
  d.billable = billable;
  d.impl = std::move(impl);
  return d;
}

mcp::tool_def search_stories_def() {
  mcp::tool_def d = tool(
      "search_stories", "Search stories",
      "Full-text search over the story corpus (titles and texts). All words of `query` must "
      "appear in a story; put words in double quotes to match them as an exact phrase. Results "
      "are ranked by relevance (BM25, title matches weigh more) or newest first with "
      "sort=\"date\". Returns JSON {\"total\": exact number of matches, \"stories\": [{id, "
      "title, url, by, time (unix seconds), score, comments, tags}]} without story texts: call "
      "get_story with an id for the full text. Page with offset and limit. Each successful call "
      "counts toward the monthly quota.",
      true, std::make_shared<search_stories_tool>());
  // query: characters (code points), as JSON Schema's maxLength counts them
  auto q = bounded(arg("query", mcp::arg_type::string,
                       "Words to search for (1-500 characters). All must match; \"quoted words\" "
                       "must appear together in that order (at most 8 quoted phrases)."),
                   1, 500);
  q.required = true;
  auto limit =
      bounded(arg("limit", mcp::arg_type::integer, "How many stories to return (1-50)."), 1, 50);
  limit.has_default = true;
  limit.default_int = 10;
  auto offset = bounded(
      arg("offset", mcp::arg_type::integer, "How many ranked stories to skip (0-1000)."), 0, 1000);
  offset.has_default = true;
  offset.default_int = 0;
  // since/until: declared and described as unix seconds (an integer); the server also takes
  // an RFC 3339 date-time or a date as a string (REST's formats), undeclared.
  auto since = bounded(arg("since", mcp::arg_type::timestamp,
                           "Only stories posted at or after this time, in unix seconds (for "
                           "example 1700000000, which is 2023-11-14T22:13:20Z)."),
                       0, search::max_unix_time);
  auto until = bounded(arg("until", mcp::arg_type::timestamp,
                           "Only stories posted at or before this time, in unix seconds."),
                       0, search::max_unix_time);
  auto sort = arg("sort", mcp::arg_type::enumeration,
                  "\"relevance\" (best match first, default) or \"date\" (newest first).");
  sort.choices = {"relevance", "date"};
  sort.has_default = true;
  sort.default_string = "relevance";
  auto tags = bounded(arg("tags", mcp::arg_type::string_array,
                          "Only stories carrying every one of these tags (up to 16)."),
                      0, 16);
  d.args = {q, limit, offset, since, until, sort, tags};
  return d;
}

mcp::tool_def get_story_def() {
  mcp::tool_def d =
      tool("get_story", "Get a story",
           "Fetches one story by its id (as returned by search_stories), with its full text. "
           "Returns JSON {id, title, url, by, time, score, comments, tags, text}. An unknown id "
           "is reported as a not_found error. Each successful call counts toward the monthly "
           "quota.",
           true, std::make_shared<get_story_tool>());
  auto id = bounded(arg("id", mcp::arg_type::string, "The story id, e.g. \"8863\"."), 1, 64);
  id.required = true;
  d.args = {id};
  return d;
}

mcp::tool_def get_usage_def() {
  return tool("get_usage", "Get my usage",
              "Shows the calling key's rate limit and monthly quota: limits, what is used and "
              "remaining, and seconds until each resets. Free: never counts toward the quota.",
              false, std::make_shared<get_usage_tool>());
}

}  // namespace

tool_context::tool_context(const search::backend& backend, tool_caller& caller)
    : mcp::tool_env(&kind_tag_),
      backend_(&backend),
      caller_(caller),
      scratch_(backend.make_scratch()) {}

tool_context::tool_context(tool_caller& caller) : mcp::tool_env(&kind_tag_), caller_(caller) {}

void tool_context::set_backend(const search::backend& backend) {
  backend_ = &backend;
  scratch_ = backend.make_scratch();
}

const search::backend* tool_context::corpus() {
  if (backend_ == nullptr && gate_ != nullptr) {
    if (const search::backend* b = gate_->wait(); b != nullptr) {
      set_backend(*b);
    }
  }
  return backend_;
}

tool_context::~tool_context() = default;

tool_context& tool_context::of(mcp::call_context& ctx) {
  TOLLGATE_CHECK(ctx.env != nullptr && ctx.env->kind() == &kind_tag_);
  return static_cast<tool_context&>(*ctx.env);
}

search::search_job& tool_context::next_job() {
  TOLLGATE_CHECK(jobs_ != nullptr);
  while (jobs_->size() <= job_next_) {
    jobs_->push_back(std::make_unique<search::search_job>(*backend_));  // warm-up only
  }
  return *(*jobs_)[job_next_++];
}

bool tool_context::advance_jobs(size_t used) {
  TOLLGATE_CHECK(jobs_ != nullptr && used <= jobs_->size());
  bool ran = false;  // one slice per pass: the other connections of the core go between
  for (size_t i = 0; i < used; ++i) {
    search::search_job& j = *(*jobs_)[i];
    if (j.started() && !j.done()) {
      if (ran || !backend_->run(j, slice_)) {
        return false;
      }
      ran = true;
    }
  }
  return true;
}

void fleet_calls::on_call(const mcp::decided_call& call) {
  if (call.tool.name == "search_stories") {
    search::query_args q;
    if (query_of(call.args, q).ok) {
      fleet_.collect_search(q);
    }
  } else if (call.tool.name == "get_story") {
    fleet_.collect_story(call.args[0].str);
  }
}

void register_tools(mcp::registry& reg) {
  reg.add(search_stories_def());
  reg.add(get_story_def());
  reg.add(get_usage_def());
  reg.finish();
}

}  // namespace tollgate::app
