#include "parking.h"

#include <utility>

#include "fleet_client.h"
#include "tollgate/cluster/agent.h"

namespace tollgate::app {

parking::parking(const cluster::agent* cluster, tool_context& tools)
    : cluster_(cluster), tools_(tools) {
  tools_.use_jobs(&light_jobs_);
}

parking::parked* parking::find_parked() {
  if (parked_.empty() || io_ == nullptr) {
    return nullptr;
  }
  const http::deferral_token t = io_->current();
  for (parked& p : parked_) {
    if (p.token.slot == t.slot && p.token.gen == t.gen) {
      return &p;
    }
  }
  return nullptr;
}

bool parking::begin() {
  resuming_ = find_parked();
  if (resuming_ == nullptr) {
    return true;
  }
  tools_.use_jobs(&resuming_->jobs);
  if (!tools_.advance_jobs(resuming_->used)) {
    resuming_->token = io_->defer();
    io_->resume(resuming_->token);
    resuming_ = nullptr;
    tools_.use_jobs(&light_jobs_);
    return false;
  }
  return true;
}

parking::carried parking::resuming() const noexcept {
  if (resuming_ == nullptr) {
    return {};
  }
  return {&resuming_->fig, resuming_->received_ns};
}

bool parking::may_wait_lease() const {
  if (cluster_ == nullptr || io_ == nullptr) {
    return false;
  }
  return resuming_ == nullptr || resuming_->lease_deadline == 0 ||
         io_->now_mono() < resuming_->lease_deadline;
}

void parking::keep_spare(tool_context::job_group&& jobs) {
  if (spare_.size() < max_spare_job_groups) {
    spare_.push_back(std::move(jobs));
  }  // else freed here: a burst of parked requests does not hold its memory for good
}

parking::parked& parking::hold(const quota::figures& fig, size_t used, int64_t received_ns,
                               fleet_client* fleet) {
  parked* p = resuming_;
  if (p == nullptr) {
    // First park: the request takes the light jobs (its searches' state) with it.
    parked_.emplace_back();
    p = &parked_.back();
    p->jobs.swap(light_jobs_);
    if (!spare_.empty()) {
      light_jobs_.swap(spare_.back());
      spare_.pop_back();
    }
    p->fig = fig;
    p->received_ns = received_ns;
  }
  p->used = used;
  p->token = io_->defer();
  if (fleet != nullptr) {
    fleet->deactivate();  // a gateway's remote answers wait with it for its next delivery
  }
  return *p;
}

void parking::drop(size_t i) {
  keep_spare(std::move(parked_[i].jobs));
  parked_[i] = std::move(parked_.back());
  parked_.pop_back();
}

http::response_info parking::park(const quota::figures& fig, bool for_lease, size_t used,
                                  int64_t received_ns, fleet_client* fleet) {
  parked& p = hold(fig, used, received_ns, fleet);
  p.lease_wait = for_lease;
  if (for_lease) {
    // Delivered again when the agent wakes this core, or at the bound (set once: the whole
    // wait of a request is bounded, however often other cores take the units it was after).
    if (p.lease_deadline == 0) {
      p.lease_deadline = io_->now_mono() + cluster_->options().lease_wait_ms * 1000000;
    }
    io_->wake_at(p.lease_deadline);
  } else {
    io_->resume(p.token);  // delivered again next pass: one slice each pass
  }
  return {0, false, true};
}

void parking::read_wait::start(http::engine_io& io, http::deferral_token token,
                               const search::pending_read& r, uint32_t& last_tag) {
  ++rounds;
  if (++last_tag == 0) {
    last_tag = 1;  // 0 means none
  }
  tag = last_tag;
  if (!io.read_ahead(r.fd, r.at, static_cast<size_t>(r.len), tag)) {
    tag = 0;  // no reads on this engine: delivered again next pass, read on the core then
    rounds = max_read_rounds;
    io.resume(token);
  }
}

void parking::read_wait::ended(int64_t res) noexcept {
  tag = 0;
  if (res < 0) {
    rounds = max_read_rounds;
  }
}

bool parking::may_wait_read() const noexcept {
  return io_ != nullptr && (resuming_ == nullptr || resuming_->read.may_park());
}

http::response_info parking::park_read(const quota::figures& fig, size_t used, int64_t received_ns,
                                       fleet_client* fleet, const search::pending_read& r) {
  parked& p = hold(fig, used, received_ns, fleet);
  p.lease_wait = false;
  p.read.start(*io_, p.token, r, last_read_tag_);
  return {0, false, true};
}

void parking::on_read_ahead(uint32_t tag, int64_t res) {
  for (size_t i = 0; i < parked_.size(); ++i) {
    parked& p = parked_[i];
    if (p.read.tag != tag) {
      continue;
    }
    p.read.ended(res);
    if (!io_->resume(p.token)) {  // its connection closed meanwhile
      drop(i);
    }
    return;
  }
}

http::response_info parking::park_offcore(int64_t bound_ns) {
  offcore_waits_.push_back(io_->defer());
  io_->wake_at(bound_ns);
  return {0, false, true};
}

void parking::end(bool deferred) {
  if (resuming_ != nullptr) {
    if (!deferred) {
      // answered: its job group is free again (index-stable erase: swap with the last)
      keep_spare(std::move(resuming_->jobs));
      *resuming_ = std::move(parked_.back());
      parked_.pop_back();
    }
    resuming_ = nullptr;
  }
  tools_.use_jobs(&light_jobs_);
}

void parking::on_wake() {
  // A metadata document's fetch or an off-core job ended (or a bound came): every request
  // parked for one is delivered again; one whose document or job is still on its way parks
  // again, at no cost but a look-up.
  for (const http::deferral_token& t : offcore_waits_) {
    (void)io_->resume(t);  // false: its connection closed meanwhile
  }
  offcore_waits_.clear();
  // The agent ended a lease attempt (units, a spent budget, an outage) or a bound came: every
  // request waiting for units is admitted again (one that still may wait parks again).
  for (size_t i = 0; i < parked_.size();) {
    parked& p = parked_[i];
    if (!p.lease_wait) {
      ++i;
      continue;
    }
    p.lease_wait = false;
    if (!io_->resume(p.token)) {  // its connection closed meanwhile
      drop(i);
      continue;
    }
    ++i;
  }
}

void parking::on_tick() {
  // (A live parked request is always queued for delivery, so resume() changes nothing for it.)
  // One waiting for a read-ahead is left to its completion, which frees it if it is gone: the
  // read's buffer is the engine's, and a delivery now would only ask for the bytes again.
  for (size_t i = 0; i < parked_.size();) {
    if (io_ != nullptr && parked_[i].read.tag == 0 && !io_->resume(parked_[i].token)) {
      drop(i);
    } else {
      ++i;
    }
  }
}

}  // namespace tollgate::app
