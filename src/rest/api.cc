#include "tollgate/rest/api.h"

#include <array>

#include "tollgate/common/percent.h"
#include "tollgate/envelope/outcome_table.h"
#include "tollgate/http/response.h"
#include "tollgate/quota/key_store.h"

namespace tollgate::rest {

namespace {

// Appends `prefix` (punctuation and a member name) and a value: the usage body, one member a line.
void member(json_out& out, std::string_view prefix, int64_t v) {
  out.raw(prefix);
  out.number(v);
}

void member(json_out& out, std::string_view prefix, std::string_view v) {
  out.raw(prefix);
  out.string(v);
}

}  // namespace

void render_usage(json_out& out, const quota::key_record& k, const quota::figures& f) {
  std::array<char, quota::key_id_length> id;
  member(out, "{\"key_id\":", quota::key_id_text(k.key_id, id));
  member(out, ",\"account\":", k.account);
  member(out, ",\"plan\":", k.plan);
  member(out, ",\"status\":", k.suspended ? "suspended" : "active");
  member(out, ",\"rate\":{\"limit\":", f.rate_limit);
  member(out, ",\"remaining\":", f.rate_remaining);
  member(out, ",\"reset_secs\":", f.rate_reset_secs);
  member(out, "},\"quota\":{\"limit\":", f.quota_limit);
  member(out, ",\"used\":", f.quota_used);
  member(out, ",\"remaining\":", f.quota_remaining);
  member(out, ",\"reset_secs\":", f.quota_reset_secs);
  member(out, ",\"overage\":", k.overage == quota::overage_policy::bill ? "bill" : "stop");
  out.raw("}}");
}

envelope::tool_error tool_error_of(search::errc e) noexcept {
  if (e == search::errc::not_found) {
    return envelope::make_tool_error(envelope::tool_error_code::not_found);
  }
  if (e == search::errc::unreadable) {
    return envelope::make_tool_error(envelope::tool_error_code::story_unreadable);
  }
  return envelope::make_tool_error(envelope::tool_error_code::unavailable, 1);
}

api::api(const search::backend& backend, const envelope::cache& env)
    : backend_(backend), env_(env), scratch_(backend.make_scratch()) {
  headers_.reserve(1024);
  body_.reserve(4096);
}

api::~api() = default;

http::response_head api::json_head(const http::request& req, int status,
                                   const quota::figures& fig) {
  headers_.clear();
  quota::write_rate_headers(headers_, fig);
  auto head = http::head_for(req, status);
  head.content_type = "application/json";
  head.extra_headers = headers_.view();
  return head;
}

http::response_info api::send_body(const http::request& req, int status, const quota::figures& fig,
                                   out_buffer& out) {
  const http::response_head head = json_head(req, status, fig);
  http::write_response(out, head, body_.view());
  return {status, head.close};
}

http::response_info api::finish_error(const http::request& req, const envelope::tool_error& e,
                                      const quota::figures& fig, out_buffer& out) {
  body_.clear();
  env_.tool_error_json(body_, e);
  const envelope::outcome_row& row = envelope::row_of(e.code);
  result_ = row.result;
  return send_body(req, row.rest_status, fig, out);
}

http::response_info api::invalid_argument(const http::request& req, const search::arg_error& e,
                                          const quota::figures& fig, out_buffer& out) {
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
  result_ = outcome::invalid_argument;
  return send_body(req, envelope::row_of(outcome::invalid_argument).rest_status, fig, out);
}

http::response_info api::respond(const http::request& req, const envelope::gate_refusal& g,
                                 resource what, std::string_view id, caller* c, out_buffer& out) {
  result_ = outcome::ok;
  http::response_info info;
  if (g.row != nullptr) {
    result_ = g.row->result;
    const bool close = !req.keep_alive;
    const bool omit_body = req.method == "HEAD";
    if (g.row->result == outcome::rate_limited) {
      c->shard.fill_quota(c->key, c->now_ns, c->fig);
      info = finish_error(req,
                          envelope::make_tool_error(envelope::tool_error_code::rate_limited,
                                                    c->fig.retry_after_secs),
                          c->fig, out);
    } else if (g.row->result == outcome::invalid_key) {
      env_.unauthorized(out, close, g.key_presented, g.resource_metadata, omit_body);
      info = {g.row->rest_status, close};
    } else {  // keys not loaded yet: the one other whole refusal
      env_.keys_not_loaded(out, close, omit_body);
      info = {g.row->rest_status, close};
    }
  } else if (what == resource::search) {
    info = search(req, *c, out);
  } else if (what == resource::story) {
    info = story(req, id, *c, out);
  } else {
    info = usage(req, *c, out);
  }
  if (c != nullptr) {
    c->result = result_;
  }
  return info;
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
  const quota::admit_verdict v = c.shard.admit(c.key, c.now_ns, c.fig, t, c.may_wait_lease);
  if (v == quota::admit_verdict::lease_pending) {
    c.lease_pending = true;  // nothing written: the request is parked and delivered again
    return {0, false, true};
  }
  if (v != quota::admit_verdict::ok) {
    // Not run, not billed: the refusal's row says which figures it carries.
    return finish_error(
        req,
        envelope::make_tool_error(*envelope::row_of(v).code, c.fig.retry_after_secs,
                                  c.fig.quota_limit, c.fig.quota_used, c.fig.quota_remaining),
        c.fig, out);
  }
  // Admitted: write the body straight after the head; an error rolls back to `mark`.
  const size_t mark = out.size();
  const http::response_head head = json_head(req, 200, c.fig);
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
    const envelope::tool_error e = tool_error_of(r.error());
    quota::figures f = c.fig;
    if (e.retry_after_secs > 0) {
      f.retry_after_secs = e.retry_after_secs;  // 503 + Retry-After
    }
    return finish_error(req, e, f, out);
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
    return finish_error(req, tool_error_of(search::errc::not_found), c.fig, out);
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
    return invalid_argument(req, search::arg_error{"id", "must be 1 to 64 bytes long"}, c.fig, out);
  }
  return billed(req, c, out, id_buf_.view(), false);
}

http::response_info api::usage(const http::request& req, caller& c, out_buffer& out) {
  c.shard.fill_quota(c.key, c.now_ns, c.fig);
  const http::response_head head = json_head(req, 200, c.fig);
  http::pending_response p = http::begin_response(out, head);
  json_out j(out, false);
  render_usage(j, c.key, c.fig);
  http::end_response(out, p);
  return {200, head.close};
}

}  // namespace tollgate::rest
