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

decoder::decoder() { id_buf_.reserve(256); }

const arguments& decoder::decode(resource what, std::string_view query, std::string_view id) {
  args_.search = {};
  args_.story_id = {};
  args_.no_such_story = false;
  args_.error.reset();
  if (what == resource::search) {
    if (auto p = qs_.parse(query, args_.search); !p) {
      args_.error = p.error();
    } else if (auto v = search::validate(args_.search); !v) {
      args_.error = v.error();
    }
  } else if (what == resource::story) {
    if (id.empty() || id.find('/') != std::string_view::npos) {
      // No id, or a path below one: no such story (a '/' inside an id is written %2F).
      args_.no_such_story = true;
      return args_;
    }
    // The path segment is percent-encoded (RFC 3986 §2.1): ids holding a space, '/', '?' or '%'
    // are reachable only through their escapes.
    id_buf_.clear();
    if (!percent_decode(id, id_buf_, /*plus_is_space=*/false)) {
      args_.error = search::arg_error{"id", search::rules::encoding};
    } else if (id_buf_.size() > 64) {
      // get_story's own bound (1 to 64 bytes), answered as MCP answers it: a bad argument.
      args_.error = search::arg_error{"id", "must be 1 to 64 bytes long"};
    } else {
      args_.story_id = id_buf_.view();
    }
  }
  return args_;
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

api::body_kind api::error(const envelope::tool_error& e) {
  body_.clear();
  env_.tool_error_json(body_, e);
  const envelope::outcome_row& row = envelope::row_of(e.code);
  result_ = row.result;
  status_ = row.rest_status;
  return body_kind::ready;
}

api::body_kind api::invalid_argument(const search::arg_error& e) {
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
  status_ = envelope::row_of(outcome::invalid_argument).rest_status;
  return body_kind::ready;
}

// Decides, writing nothing to `out`; then write() writes the answer, once.
http::response_info api::respond(const http::request& req, const envelope::gate_refusal& g,
                                 resource what, const arguments& a, caller* c, out_buffer& out) {
  result_ = outcome::ok;
  status_ = 200;
  if (g.row != nullptr && g.row->result != outcome::rate_limited) {
    // A whole refusal without a key (401, or keys not loaded yet: 503): the envelope's.
    result_ = g.row->result;
    const bool close = !req.keep_alive;
    const bool omit_body = req.method == "HEAD";
    if (g.row->result == outcome::invalid_key) {
      env_.unauthorized(out, close, g.key_presented, g.resource_metadata, omit_body);
    } else {
      env_.keys_not_loaded(out, close, omit_body);
    }
    if (c != nullptr) {
      c->result = result_;
    }
    return {g.row->rest_status, close};
  }
  quota::ticket t;
  body_kind k;
  if (g.row != nullptr) {  // 429: the caller's figures, quota part included
    c->shard.fill_quota(c->key, c->now_ns, c->fig);
    k = error(envelope::make_tool_error(envelope::tool_error_code::rate_limited,
                                        c->fig.retry_after_secs));
  } else if (what == resource::usage) {
    c->shard.fill_quota(c->key, c->now_ns, c->fig);
    k = body_kind::usage;
  } else {
    k = checked(a, *c, t, what == resource::search ? body_kind::search : body_kind::story);
  }
  const http::response_info info = write(req, k, *c, a, t, out);
  c->result = result_;
  return info;
}

// A search or a story: its arguments as decoded, then its admission.
api::body_kind api::checked(const arguments& a, caller& c, quota::ticket& t, body_kind billed) {
  if (a.ok()) {
    return admit(c, t, billed);
  }
  c.shard.fill_quota(c.key, c.now_ns, c.fig);
  return a.error ? invalid_argument(*a.error) : error(tool_error_of(search::errc::not_found));
}

api::body_kind api::admit(caller& c, quota::ticket& t, body_kind billed) {
  const quota::admit_verdict v = c.shard.admit(c.key, c.now_ns, c.fig, t, c.may_wait_lease);
  if (v == quota::admit_verdict::lease_pending) {
    c.lease_pending = true;  // nothing written: the request is parked and delivered again
    return body_kind::none;
  }
  if (v != quota::admit_verdict::ok) {
    // Not run, not billed: the refusal's row says which figures it carries.
    return error(envelope::make_tool_error(*envelope::row_of(v).code, c.fig.retry_after_secs,
                                           c.fig.quota_limit, c.fig.quota_used,
                                           c.fig.quota_remaining));
  }
  return billed;
}

// The one place the REST surface writes an answer: a JSON head with the rate headers, then the
// body: body_ as decided, or streamed straight after the head (a billed payload, the usage).
// A billed payload that fails is rolled back to `mark` and written as its error instead.
http::response_info api::write(const http::request& req, body_kind k, caller& c, const arguments& a,
                               quota::ticket& t, out_buffer& out) {
  if (k == body_kind::none) {
    return {0, false, true};
  }
  http::response_head head = json_head(req, status_, c.fig);
  if (k == body_kind::ready) {
    http::write_response(out, head, body_.view());
    return {status_, head.close};
  }
  const size_t mark = out.size();
  http::pending_response p = http::begin_response(out, head);
  if (k == body_kind::usage) {  // never billed
    json_out j(out, false);
    render_usage(j, c.key, c.fig);
    http::end_response(out, p);
    return {200, head.close};
  }
  const result<void, search::errc> r =
      k == body_kind::search
          ? backend_.search_stories(a.search, *scratch_, out, /*nested=*/false, c.remote)
          : backend_.get_story(a.story_id, out, /*nested=*/false, c.remote,
                               c.may_wait_read ? &c.read : nullptr);
  if (r) {
    http::end_response(out, p);
    c.shard.settle(t, true);
    return {200, head.close};
  }
  c.shard.settle(t, false);
  c.shard.fill_quota(c.key, c.now_ns, c.fig);  // not billed: admit counted it, undo that
  out.resize(mark);
  if (r.error() == search::errc::would_block) {
    return {0, false, true};  // parked until c.read's bytes are in; answered then
  }
  const envelope::tool_error e = tool_error_of(r.error());
  quota::figures f = c.fig;
  if (e.retry_after_secs > 0) {
    f.retry_after_secs = e.retry_after_secs;  // 503 + Retry-After
  }
  (void)error(e);
  headers_.clear();
  quota::write_rate_headers(headers_, f);
  head.status = status_;
  head.extra_headers = headers_.view();
  http::write_response(out, head, body_.view());
  return {status_, head.close};
}

}  // namespace tollgate::rest
