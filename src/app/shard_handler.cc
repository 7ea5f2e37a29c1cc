// The shard node's handler (--role shard): the fleet routes behind the shared secret, and the
// ops routes. A shard node has no keys, quotas or MCP: its callers are gateways, which bill. A
// story whose text is not in the page cache parks its request while the core's ring reads it.
#include <openssl/crypto.h>

#include "handler.h"
#include "ops.h"
#include "tollgate/common/percent.h"
#include "tollgate/search/shard_node.h"

namespace tollgate::app {
namespace {

http::response_info json_reply(const http::request& req, int status, std::string_view body,
                               out_buffer& out) {
  auto head = http::head_for(req, status);
  head.content_type = "application/json";
  http::write_response(out, head, body);
  return {status, head.close};
}

// Constant time in the presented secret's content (not its length).
bool secret_ok(std::string_view presented, std::string_view secret) noexcept {
  return !secret.empty() && presented.size() == secret.size() &&
         CRYPTO_memcmp(presented.data(), secret.data(), secret.size()) == 0;
}

}  // namespace

void register_shard_routes(shared_state& s) {
  auto& r = s.router;
  r.add("GET", "/healthz", static_cast<http::route_id>(route::healthz));
  r.add("GET", "/readyz", static_cast<http::route_id>(route::readyz));
  r.add("GET", "/metrics", static_cast<http::route_id>(route::metrics));
  r.add("POST", search::fleet_wire::df_path, static_cast<http::route_id>(route::shard));
  r.add("POST", search::fleet_wire::search_path, static_cast<http::route_id>(route::shard));
  r.add_prefix("GET", search::fleet_wire::story_prefix, static_cast<http::route_id>(route::shard));
}

shard_handler::shard_handler(const shared_state& s, int core)
    : s_(s), core_(core), search_(s.backend->make_scratch()) {
  scratch_.reserve(16384);
  body_.reserve(65536);
  path_.reserve(256);
}

http::response_info shard_handler::handle(const http::request& req, out_buffer& out,
                                          int64_t /*now_ns*/) {
  route counted = route::not_found;
  http::response_info info = answer_shard(req, out, counted);
  if (!info.deferred) {
    s_.counters->count(core_, counted, info.status);  // (a parked one when it is answered)
  }
  return info;
}

shard_handler::story_wait* shard_handler::find_wait() {
  if (io_ == nullptr || waits_.empty()) {
    return nullptr;
  }
  const http::deferral_token t = io_->current();
  for (story_wait& w : waits_) {
    if (w.token.slot == t.slot && w.token.gen == t.gen) {
      return &w;
    }
  }
  return nullptr;
}

void shard_handler::on_tick(int64_t /*now_ns*/) {
  // A request delivered again after its read but whose connection closed before that delivery
  // is never answered: its wait goes (a live one is queued already: resume() changes nothing).
  for (size_t i = 0; i < waits_.size();) {
    if (waits_[i].read.tag == 0 && !io_->resume(waits_[i].token)) {
      waits_[i] = waits_.back();
      waits_.pop_back();
    } else {
      ++i;
    }
  }
}

void shard_handler::on_read_ahead(uint32_t tag, int64_t res) {
  s_.counters->count_read_ahead(core_, res);
  for (size_t i = 0; i < waits_.size(); ++i) {
    story_wait& w = waits_[i];
    if (w.read.tag != tag) {
      continue;
    }
    w.read.ended(res);
    if (!io_->resume(w.token)) {  // its connection closed meanwhile
      w = waits_.back();
      waits_.pop_back();
    }
    return;
  }
}

http::response_info shard_handler::answer_shard(const http::request& req, out_buffer& out,
                                                route& counted) {
  http::route_match m = s_.router.match(req.method, req.path);
  if (m.status != 200) {
    return json_reply(req, m.status == 405 ? 405 : 404,
                      m.status == 405 ? kMethodNotAllowed : kNoSuchRoute, out);
  }
  const auto r = static_cast<route>(m.id);
  counted = r;
  if (r != route::shard) {
    return handle_ops(s_, r, req, scratch_, out);
  }
  if (!secret_ok(req.header_value(search::fleet_wire::secret_header), s_.settings->shard_secret)) {
    return json_reply(
        req, 401,
        R"({"code":"unauthorized","message":"Fleet requests need the fleet secret in X-Tollgate-Fleet-Secret."})",
        out);
  }
  std::string_view path = req.path;
  if (req.method == "GET") {
    path_.clear();
    path_.append(search::fleet_wire::story_prefix);
    if (!percent_decode(m.rest, path_, /*plus_is_space=*/false)) {
      return json_reply(
          req, 400,
          R"({"code":"invalid_request","message":"Malformed percent-escape in the story id."})",
          out);
    }
    path = path_.view();
  }
  body_.clear();
  story_wait* w = find_wait();
  search::pending_read wanted;
  const bool may_park = io_ != nullptr && (w == nullptr || w->read.may_park());
  const int status = search::serve_fleet_request(*s_.backend, *search_, req.method, path, req.body,
                                                 body_, may_park ? &wanted : nullptr);
  if (status == 0) {  // its story's text is not in the page cache: parked while it is read
    if (w == nullptr) {
      w = &waits_.emplace_back();
    }
    w->token = io_->defer();
    w->read.start(*io_, w->token, wanted, last_tag_);
    return {0, false, true};
  }
  if (w != nullptr) {  // answered: its wait is over
    *w = waits_.back();
    waits_.pop_back();
  }
  return json_reply(req, status, body_.view(), out);
}

}  // namespace tollgate::app
