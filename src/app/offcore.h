// Work a core must not wait for (an fdatasync, a Redis round trip, a lock another thread holds
// across I/O), done on a thread of its own while the request that needs it is parked: the OAuth
// store's changes (oauth.h) and a public core's Stripe webhook (admin_api.h).
//
// The core checks what it can without waiting, submit()s the rest under the request's ticket
// and parks the request (engine_io::defer). The worker runs the job, keeps its answer under the
// ticket and calls the core's waker; the core delivers the request again (same ticket), take()s
// the answer and writes it. A delivery before the job ended finds it running and parks again.
// An answer whose request went away (its connection closed) is dropped after two minutes.
//
// Threads: submit() and take() from any core (the queue's mutex is held only to add or take,
// never across a job); one worker thread runs the jobs in order, and `tick` between them
// (every `tick_ms`). The worker waits on a condition variable; a core never does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

namespace tollgate::app {

/// Which request an answer made off the core belongs to: the core and the engine's deferral
/// token of the request (the same at each delivery). core < 0: no engine to park in.
struct offcore_ticket {
  int core = -1;
  uint32_t slot = 0;
  uint32_t gen = 0;
  bool parkable() const noexcept { return core >= 0; }
  bool operator==(const offcore_ticket&) const = default;
};

template <class Answer>
class offcore {
 public:
  enum class state { none, running, done };

  /// `tick(now_unix)` runs on the worker every `tick_ms` (empty: none).
  explicit offcore(std::function<void(int64_t)> tick = {}, int tick_ms = 250)
      : tick_(std::move(tick)), tick_ms_(tick_ms) {}
  ~offcore() { stop(); }
  offcore(const offcore&) = delete;
  offcore& operator=(const offcore&) = delete;

  void start() {
    worker_ = std::thread([this] { loop(); });
  }
  /// Ends the worker after the job it runs (queued jobs are dropped: their requests are closed
  /// with their connections by the engine's stop).
  void stop() {
    {
      std::lock_guard g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) {
      worker_.join();
    }
  }

  /// The state of the job of ticket `t`; when done, its answer is moved into `out` (once).
  state take(const offcore_ticket& t, Answer& out) {
    std::lock_guard g(mu_);
    if (auto it = done_.find(t); it != done_.end()) {
      out = std::move(it->second.second);
      done_.erase(it);
      return state::done;
    }
    return running_.count(t) != 0 ? state::running : state::none;
  }
  /// Queues `work` for ticket `t`; `wake` (the core's waker) is called when it is done.
  void submit(const offcore_ticket& t, std::function<Answer()> work, std::function<void()> wake) {
    {
      std::lock_guard g(mu_);
      running_[t] = now_unix();
      jobs_.push_back(job{t, std::move(work), std::move(wake)});
    }
    cv_.notify_one();
  }

 private:
  struct job {
    offcore_ticket ticket;
    std::function<Answer()> work;
    std::function<void()> wake;
  };
  struct ticket_hash {
    size_t operator()(const offcore_ticket& t) const noexcept {
      const uint64_t h = (static_cast<uint64_t>(t.slot) << 32 | t.gen) * 0x9E3779B97F4A7C15ull;
      return static_cast<size_t>(h ^ static_cast<uint64_t>(t.core));
    }
  };
  static int64_t now_unix() {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  void loop() {
    using clock = std::chrono::steady_clock;
    auto next_tick = clock::now();
    int64_t last_sweep = now_unix();
    for (;;) {
      job j;
      {
        std::unique_lock g(mu_);
        cv_.wait_until(g, next_tick, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) {
          return;
        }
        if (!jobs_.empty()) {
          j = std::move(jobs_.front());
          jobs_.pop_front();
        }
      }
      if (j.work) {
        Answer a = j.work();
        {
          std::lock_guard g(mu_);
          running_.erase(j.ticket);
          done_[j.ticket] = {now_unix(), std::move(a)};
        }
        j.wake();
      }
      if (clock::now() < next_tick) {
        continue;
      }
      next_tick = clock::now() + std::chrono::milliseconds(tick_ms_);
      const int64_t now = now_unix();
      if (tick_) {
        tick_(now);
      }
      if (now - last_sweep >= 60) {
        last_sweep = now;
        std::lock_guard g(mu_);
        std::erase_if(done_, [&](const auto& e) { return now - e.second.first >= 120; });
      }
    }
  }

  std::function<void(int64_t)> tick_;
  int tick_ms_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<job> jobs_;
  std::unordered_map<offcore_ticket, int64_t, ticket_hash> running_;  // ticket → since
  // ticket → (when, answer)
  std::unordered_map<offcore_ticket, std::pair<int64_t, Answer>, ticket_hash> done_;
  std::thread worker_;
};

}  // namespace tollgate::app
