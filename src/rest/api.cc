#include "tollgate/rest/api.h"

#include <array>

#include "tollgate/common/percent.h"
#include "tollgate/http/response.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::rest {

void render_usage(json_out& out, const quota::key_record& k, const quota::figures& f) {
  std::array<char, quota::key_id_length> id;
  out.raw("{\"key_id\":");
  out.string(quota::key_id_text(k.key_id, id));
  out.raw(",\"account\":");
  out.string(k.account);
  out.raw(",\"plan\":");
  out.string(k.plan);
  out.raw(",\"status\":");
  out.string(k.suspended ? "suspended" : "active");
  out.raw(",\"rate\":{\"limit\":");
  out.number(f.rate_limit);
  out.raw(",\"remaining\":");
  out.number(f.rate_remaining);
  out.raw(",\"reset_secs\":");
  out.number(f.rate_reset_secs);
  out.raw("},\"quota\":{\"limit\":");
  out.number(f.quota_limit);
  out.raw(",\"used\":");
  out.number(f.quota_used);
  out.raw(",\"remaining\":");
  out.number(f.quota_remaining);
  out.raw(",\"reset_secs\":");
  out.number(f.quota_reset_secs);
  out.raw(",\"overage\":");
  out.string(k.overage == quota::overage_policy::bill ? "bill" : "stop");
  out.raw("}}");
}

api::api(const search::backend& backend, const envelope::cache& env)
    : backend_(backend), env_(env), scratch_(backend.make_scratch()) {
  headers_.reserve(1024);
  body_.reserve(4096);
}

api::~api() = default;

http::response_info api::finish_error(const http::request& req, int status,
                                      const envelope::tool_error& e, const quota::figures& fig,
                                      out_buffer& out) {
  headers_.clear();
  quota::write_rate_headers(headers_, fig);
  body_.clear();
  env_.tool_error_json(body_, e);
  auto head = http::head_for(req, status);
  head.content_type = "application/json";
  head.extra_headers = headers_.view();
  http::write_response(out, head, body_.view());
  return {status, head.close};
}

http::response_info api::invalid_argument(const http::request& req, const search::arg_error& e,
                                          const quota::figures& fig, out_buffer& out) {
  headers_.clear();
  quota::write_rate_headers(headers_, fig);
  body_.clear();
  json_out j(body_, false);
  j.raw("{\"code\":\"invalid_argument\",\"message\":");
  out_buffer& b = body_;
  // "argument `limit` must be between 1 and 50": a sentence naming the argument and the rule.
  j.raw("\"argument ");
  append_json_escaped(b, e.argument);
  j.raw(" ");
  append_json_escaped(b, e.rule);
  j.raw("\",\"argument\":");
  j.string(e.argument);
  j.raw(",\"rule\":");
  j.string(e.rule);
  j.raw("}");
  auto head = http::head_for(req, 400);
  head.content_type = "application/json";
  head.extra_headers = headers_.view();
  http::write_response(out, head, body_.view());
  return {400, head.close};
}

http::response_info api::rate_limited(const http::request& req, const quota::figures& fig,
                                      out_buffer& out) {
  envelope::tool_error e;
  e.code = envelope::tool_error_code::rate_limited;
  e.retry_after_secs = fig.retry_after_secs;
  return finish_error(req, 429, e, fig, out);
}

http::response_info api::billed(const http::request& req, caller& c, out_buffer& out,
                                std::string_view story_id, bool is_search) {
  search::query_args args;
  if (is_search) {
    if (auto p = qs_.parse(req.query, args); !p) {
      c.shard.fill_quota(c.key, c.now_ns, c.fig);
      return invalid_argument(req, p.error(), c.fig, out);
    }
    if (auto v = search::validate(args); !v) {
      c.shard.fill_quota(c.key, c.now_ns, c.fig);
      return invalid_argument(req, v.error(), c.fig, out);
    }
  }
  quota::ticket t;
  switch (c.shard.admit(c.key, c.now_ns, c.fig, t)) {
    case quota::admit_verdict::ok:
      break;
    case quota::admit_verdict::suspended: {
      envelope::tool_error e;
      e.code = envelope::tool_error_code::suspended;
      return finish_error(req, 403, e, c.fig, out);
    }
    case quota::admit_verdict::quota_exceeded: {
      envelope::tool_error e;
      e.code = envelope::tool_error_code::quota_exceeded;
      e.retry_after_secs = c.fig.retry_after_secs;
      e.quota_limit = c.fig.quota_limit;
      e.quota_used = c.fig.quota_used;
      e.quota_remaining = c.fig.quota_remaining;
      return finish_error(req, 429, e, c.fig, out);
    }
    case quota::admit_verdict::unavailable: {
      // Usage cannot be recorded: not run, not billed; 503 + Retry-After (admit set it to 1).
      envelope::tool_error e;
      e.code = envelope::tool_error_code::usage_unavailable;
      e.retry_after_secs = c.fig.retry_after_secs;
      return finish_error(req, 503, e, c.fig, out);
    }
    case quota::admit_verdict::quota_unreachable: {
      envelope::tool_error e;
      e.code = envelope::tool_error_code::quota_unreachable;
      e.retry_after_secs = c.fig.retry_after_secs;
      return finish_error(req, 503, e, c.fig, out);
    }
  }
  // Admitted: write the body straight after the head; an error rolls back to `mark`.
  const size_t mark = out.size();
  headers_.clear();
  quota::write_rate_headers(headers_, c.fig);
  auto head = http::head_for(req, 200);
  head.content_type = "application/json";
  head.extra_headers = headers_.view();
  http::pending_response p = http::begin_response(out, head);
  result<void, search::errc> r;
  if (is_search) {
    r = backend_.search_stories(args, *scratch_, out, /*nested=*/false, c.remote);
  } else {
    r = backend_.get_story(story_id, out, /*nested=*/false, c.remote);
  }
  if (!r) {
    c.shard.settle(t, false);
    c.shard.fill_quota(c.key, c.now_ns, c.fig);  // not billed: admit counted it, undo that
    out.resize(mark);
    envelope::tool_error e;
    if (r.error() == search::errc::not_found) {
      e.code = envelope::tool_error_code::not_found;
      return finish_error(req, 404, e, c.fig, out);
    }
    e.code = envelope::tool_error_code::unavailable;
    e.retry_after_secs = 1;
    quota::figures f = c.fig;
    f.retry_after_secs = 1;  // 503 + Retry-After
    return finish_error(req, 503, e, f, out);
  }
  http::end_response(out, p);
  c.shard.settle(t, true);
  return {200, head.close};
}

http::response_info api::search(const http::request& req, caller& c, out_buffer& out) {
  return billed(req, c, out, {}, true);
}

http::response_info api::story(const http::request& req, std::string_view id, caller& c,
                               out_buffer& out) {
  if (id.empty() || id.find('/') != std::string_view::npos) {
    // No id, or a path below one: no such story (a '/' inside an id is written %2F).
    c.shard.fill_quota(c.key, c.now_ns, c.fig);
    envelope::tool_error e;
    e.code = envelope::tool_error_code::not_found;
    return finish_error(req, 404, e, c.fig, out);
  }
  // The path segment is percent-encoded (RFC 3986 §2.1): ids holding a space, '/', '?' or '%'
  // are reachable only through their escapes.
  id_buf_.clear();
  if (!percent_decode(id, id_buf_, /*plus_is_space=*/false)) {
    c.shard.fill_quota(c.key, c.now_ns, c.fig);
    return invalid_argument(req, search::arg_error{"id", search::rules::encoding}, c.fig, out);
  }
  if (id_buf_.size() > 64) {
    // get_story's own bound (1 to 64 bytes), answered as MCP answers it: a bad argument.
    c.shard.fill_quota(c.key, c.now_ns, c.fig);
    return invalid_argument(req, search::arg_error{"id", "must be 1 to 64 bytes long"}, c.fig,
                            out);
  }
  return billed(req, c, out, id_buf_.view(), false);
}

http::response_info api::usage(const http::request& req, caller& c, out_buffer& out) {
  c.shard.fill_quota(c.key, c.now_ns, c.fig);
  headers_.clear();
  quota::write_rate_headers(headers_, c.fig);
  auto head = http::head_for(req, 200);
  head.content_type = "application/json";
  head.extra_headers = headers_.view();
  http::pending_response p = http::begin_response(out, head);
  json_out j(out, false);
  render_usage(j, c.key, c.fig);
  http::end_response(out, p);
  return {200, head.close};
}

}  // namespace tollgate::rest
