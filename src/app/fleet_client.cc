#include "fleet_client.h"

#include <charconv>

#include "tollgate/common/assert.h"
#include "tollgate/mcp/endpoint.h"
#include "tools.h"

namespace tollgate::app {

/// One search or story look-up of a deferred request.
struct fleet_client::query_state {
  explicit query_state(uint32_t remotes) : rq(remotes) {}
  search::remote_query rq;
  uint8_t phase = 0;         // 1: document frequencies, 2: search (stories: 2 only)
  uint32_t outstanding = 0;  // fetches in flight
  bool used = false;         // taken by the re-delivered request
};

/// A deferred request and its queries.
struct fleet_client::pending {
  http::deferral_token token;
  uint16_t gen = 0;
  bool launching = false;  // inside launch(): completions must not resume yet
  bool done = false;
  int64_t done_at = 0;  // monotonic ns when the last query finished
  uint32_t used = 0;    // queries in qs that belong to this request
  uint32_t left = 0;    // queries not done yet
  int64_t phase1_deadline = 0;
  int64_t deadline = 0;
  quota::figures fig;                            // the rate figures of the first delivery
  int64_t received_ns = 0;                       // and the time it was read
  std::vector<std::unique_ptr<query_state>> qs;  // capacity kept across requests
};

namespace {

// Queries per request: a JSON-RPC batch is capped well below this by the endpoint.
constexpr uint32_t kMaxQueries = 255;

void append_number(out_buffer& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

}  // namespace

fleet_client::fleet_client(const search::backend& backend, fleet_shared& shared)
    : backend_(backend), shared_(shared) {
  body_.reserve(4096);
  request_.reserve(4096);
  path_.reserve(256);
}

fleet_client::~fleet_client() = default;

void fleet_client::attach(http::engine_io& io) {
  io_ = &io;
  upstream_.clear();
  host_header_.clear();
  for (const config::host_port& e : shared_.remotes) {
    // parse_host_port() accepts "localhost"; the engine takes numeric addresses only.
    std::string host = e.host == "localhost" ? std::string("127.0.0.1") : e.host;
    upstream_.push_back(io.add_upstream(host, e.port));
    host_header_.push_back(host + ":" + std::to_string(e.port));
  }
}

uint32_t fleet_client::alloc() {
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(std::make_unique<pending>());
  }
  pending& p = *slots_[slot];
  p.token = {};
  p.launching = false;
  p.done = false;
  p.used = 0;
  p.left = 0;
  ++live_;
  return slot;
}

void fleet_client::release(uint32_t slot) {
  pending& p = *slots_[slot];
  if (p.token.slot < by_conn_.size() && by_conn_[p.token.slot] == static_cast<int32_t>(slot)) {
    by_conn_[p.token.slot] = -1;
  }
  ++p.gen;
  p.done = false;
  p.used = 0;
  free_.push_back(slot);
  --live_;
}

fleet_client::query_state& fleet_client::add_query() {
  if (building_ < 0) {
    building_ = static_cast<int32_t>(alloc());
  }
  pending& p = *slots_[static_cast<uint32_t>(building_)];
  if (p.used == p.qs.size()) {
    p.qs.push_back(std::make_unique<query_state>(static_cast<uint32_t>(shared_.remotes.size())));
  }
  query_state& q = *p.qs[p.used++];
  q.phase = 0;
  q.outstanding = 0;
  q.used = false;
  return q;
}

void fleet_client::begin_collect() noexcept { building_ = -1; }

void fleet_client::collect_search(const search::query_args& args) {
  if (building_ >= 0 && slots_[static_cast<uint32_t>(building_)]->used >= kMaxQueries) {
    return;  // the rest answer from the local shards only (partial)
  }
  add_query().rq.start_search(backend_, args);
}

void fleet_client::collect_story(std::string_view id) {
  if (backend_.find_story(id)) {
    return;  // a local story: no remote is asked
  }
  if (building_ >= 0 && slots_[static_cast<uint32_t>(building_)]->used >= kMaxQueries) {
    return;
  }
  add_query().rq.start_story(id);
}

bool fleet_client::end_collect() { return building_ >= 0; }

uint64_t fleet_client::tag_of(uint32_t slot, const pending& p, uint32_t q,
                              uint32_t remote) const noexcept {
  return (uint64_t{slot} << 40) | (uint64_t{p.gen} << 24) | (uint64_t{q} << 16) | remote;
}

void fleet_client::launch(const quota::figures& fig, int64_t received_ns) {
  TOLLGATE_ASSERT(building_ >= 0);
  const uint32_t slot = static_cast<uint32_t>(building_);
  building_ = -1;
  pending& p = *slots_[slot];
  p.fig = fig;
  p.received_ns = received_ns;
  const int64_t now = io_->now_mono();
  p.deadline = now + shared_.deadline_ns;
  p.phase1_deadline = now + shared_.deadline_ns / 2;
  p.left = p.used;
  p.launching = true;
  for (uint32_t q = 0; q < p.used; ++q) {
    start_query(p, slot, q);
  }
  p.launching = false;
  if (p.left == 0) {
    // Nothing to wait for (every remote is down): answer now with what is there.
    p.done = true;
    active_ = static_cast<int32_t>(slot);
    return;
  }
  p.token = io_->defer();
  if (p.token.slot >= by_conn_.size()) {
    by_conn_.resize(size_t{p.token.slot} + 1, -1);
  }
  if (int32_t old = by_conn_[p.token.slot]; old >= 0 && slots_[static_cast<uint32_t>(old)]->done) {
    // The connection's previous deferred request was never delivered again (dropped by a
    // failed send or the drain): its answers are of no use now.
    release(static_cast<uint32_t>(old));
  }
  by_conn_[p.token.slot] = static_cast<int32_t>(slot);
}

uint32_t fleet_client::ask(pending& p, uint32_t slot, uint32_t q, std::string_view method,
                           std::string_view path, int64_t deadline, bool only_df_ok) {
  query_state& qs = *p.qs[q];
  const int64_t now = io_->now_mono();
  const uint32_t n = static_cast<uint32_t>(shared_.remotes.size());
  for (uint32_t r = 0; r < n; ++r) {
    if (only_df_ok ? qs.rq.df_ok(r) : shared_.health->should_ask(r, now)) {
      ++qs.outstanding;
      send(r, method, path, body_.view(), tag_of(slot, p, q, r), deadline);
    }
  }
  return qs.outstanding;
}

void fleet_client::start_query(pending& p, uint32_t slot, uint32_t q) {
  query_state& qs = *p.qs[q];
  if (qs.rq.is_story()) {
    qs.phase = 2;
    path_.clear();
    search::fleet_wire::write_story_path(qs.rq.story_id(), path_);
    body_.clear();
    if (ask(p, slot, q, "GET", path_.view(), p.deadline, false) == 0) {
      query_done(p, slot);
    }
    return;
  }
  if (!qs.rq.needs_df()) {
    // sort=date or one term: idf cannot change the order, so one round trip does.
    qs.rq.skip_df();
    qs.phase = 2;
    body_.clear();
    qs.rq.write_search_body(body_);
    if (ask(p, slot, q, "POST", search::fleet_wire::search_path, p.deadline, false) == 0) {
      query_done(p, slot);
    }
    return;
  }
  qs.phase = 1;
  body_.clear();
  qs.rq.write_df_body(body_);
  if (ask(p, slot, q, "POST", search::fleet_wire::df_path, p.phase1_deadline, false) == 0) {
    start_phase2(p, slot, q);
  }
}

void fleet_client::start_phase2(pending& p, uint32_t slot, uint32_t q) {
  query_state& qs = *p.qs[q];
  qs.phase = 2;
  qs.rq.finish_df();
  body_.clear();
  qs.rq.write_search_body(body_);
  // only the remotes that answered phase 1 know the plan's frequencies were counted
  if (ask(p, slot, q, "POST", search::fleet_wire::search_path, p.deadline, true) == 0) {
    query_done(p, slot);
  }
}

void fleet_client::query_done(pending& p, uint32_t slot) {
  TOLLGATE_ASSERT(p.left > 0);
  if (--p.left > 0 || p.launching) {
    return;
  }
  p.done = true;
  p.done_at = io_->now_mono();
  if (!io_->resume(p.token)) {
    release(slot);  // the client went away: nobody will ask for these answers
  }
}

void fleet_client::send(uint32_t remote, std::string_view method, std::string_view path,
                        std::string_view body, uint64_t tag, int64_t deadline) {
  request_.clear();
  request_.append(method);
  request_.append(" ");
  request_.append(path);
  request_.append(" HTTP/1.1\r\nHost: ");
  request_.append(host_header_[remote]);
  request_.append("\r\nX-Tollgate-Fleet-Secret: ");
  request_.append(shared_.secret);
  if (method == "POST") {
    request_.append("\r\nContent-Type: application/json\r\nContent-Length: ");
    append_number(request_, body.size());
  }
  request_.append("\r\n\r\n");
  request_.append(body);
  io_->fetch(upstream_[remote], request_.view(), tag, deadline);
}

void fleet_client::on_upstream(uint64_t tag, const http::upstream_reply& reply) {
  const uint32_t slot = static_cast<uint32_t>(tag >> 40);
  const uint16_t gen = static_cast<uint16_t>(tag >> 24);
  const uint32_t q = static_cast<uint32_t>((tag >> 16) & 0xff);
  const uint32_t r = static_cast<uint32_t>(tag & 0xffff);
  if (slot >= slots_.size() || slots_[slot]->gen != gen || q >= slots_[slot]->used) {
    return;  // cannot happen: a slot is recycled only once all its fetches completed
  }
  pending& p = *slots_[slot];
  query_state& qs = *p.qs[q];
  const int status = reply.error == 0 ? reply.status : 0;
  bool ok;
  if (qs.rq.is_story()) {
    ok = qs.rq.on_story(r, status, reply.body);
  } else if (qs.phase == 1) {
    ok = qs.rq.on_df(r, status, reply.body);
  } else {
    ok = qs.rq.on_search(r, status, reply.body);
  }
  if (ok) {
    shared_.health->success(r);
  } else {
    shared_.health->failure(r, io_->now_mono());
  }
  TOLLGATE_ASSERT(qs.outstanding > 0);
  if (--qs.outstanding > 0) {
    return;
  }
  if (qs.phase == 1) {
    start_phase2(p, slot, q);
  } else {
    query_done(p, slot);
  }
}

int32_t fleet_client::lookup(const http::deferral_token& t) const noexcept {
  if (t.slot >= by_conn_.size() || by_conn_[t.slot] < 0) {
    return -1;
  }
  const pending& p = *slots_[static_cast<uint32_t>(by_conn_[t.slot])];
  return p.done && p.token.gen == t.gen ? by_conn_[t.slot] : -1;
}

bool fleet_client::activate() {
  if (active_ < 0) {
    active_ = lookup(io_->current());
  }
  return active_ >= 0;
}

const search::remote_query* fleet_client::for_search(const search::query_args& args) {
  if (active_ < 0) {
    return nullptr;
  }
  pending& p = *slots_[static_cast<uint32_t>(active_)];
  for (uint32_t q = 0; q < p.used; ++q) {
    query_state& qs = *p.qs[q];
    if (!qs.used && !qs.rq.is_story() && qs.rq.matches(args)) {
      qs.used = true;
      return &qs.rq;
    }
  }
  return nullptr;
}

const search::remote_query* fleet_client::for_story(std::string_view id) {
  if (active_ < 0) {
    return nullptr;
  }
  pending& p = *slots_[static_cast<uint32_t>(active_)];
  for (uint32_t q = 0; q < p.used; ++q) {
    query_state& qs = *p.qs[q];
    if (!qs.used && qs.rq.is_story() && qs.rq.matches_story(id)) {
      qs.used = true;
      return &qs.rq;
    }
  }
  return nullptr;
}

const quota::figures& fleet_client::figures() const noexcept {
  TOLLGATE_ASSERT(active_ >= 0);
  return slots_[static_cast<uint32_t>(active_)]->fig;
}

int64_t fleet_client::received_ns() const noexcept {
  TOLLGATE_ASSERT(active_ >= 0);
  return slots_[static_cast<uint32_t>(active_)]->received_ns;
}

const search::remote_query* fleet_client::single() {
  if (active_ < 0) {
    return nullptr;
  }
  pending& p = *slots_[static_cast<uint32_t>(active_)];
  if (p.used == 0 || p.qs[0]->used) {
    return nullptr;
  }
  p.qs[0]->used = true;
  return &p.qs[0]->rq;
}

void fleet_client::on_tick() {
  if (live_ == 0 || io_ == nullptr) {
    return;
  }
  // A resumed request the engine could not deliver again (its client's connection failed or
  // the drain ended first) leaves a done slot nobody will ask for: recycle it after a while.
  constexpr int64_t kStaleNs = 10'000'000'000;
  const int64_t now = io_->now_mono();
  for (uint32_t s = 0; s < slots_.size(); ++s) {
    pending& p = *slots_[s];
    if (p.done && p.used > 0 && static_cast<int32_t>(s) != active_ && now - p.done_at > kStaleNs) {
      release(s);
    }
  }
}

void fleet_client::finish() {
  if (active_ < 0 && live_ > 0) {
    active_ = lookup(io_->current());
  }
  if (active_ >= 0) {
    release(static_cast<uint32_t>(active_));
    active_ = -1;
  }
}

bool fleet_client::look_ahead(const http::request& req, const rest::arguments* rest,
                              mcp::endpoint& ep, int64_t now_ns, const quota::figures& fig) {
  begin_collect();
  if (rest == nullptr) {
    fleet_calls calls(*this);
    ep.decide_calls(req, calls, now_ns);
  } else if (rest->ok() && !rest->story_id.empty()) {
    collect_story(rest->story_id);
  } else if (rest->ok()) {
    collect_search(rest->search);
  }
  if (!end_collect()) {
    return false;
  }
  launch(fig, now_ns);
  // launch() may find nothing to wait for (every remote down): then this same call answers.
  return !activate();
}

}  // namespace tollgate::app
