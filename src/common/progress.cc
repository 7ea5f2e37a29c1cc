#include "tollgate/common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace tollgate {
namespace {

constexpr auto tty_interval = std::chrono::milliseconds(200);
// Off a terminal: lines at least this far apart, a line per tenth of the share, else one this
// often while the count advances (share known / unknown).
constexpr auto log_spacing = std::chrono::seconds(1);
constexpr auto log_heartbeat = std::chrono::seconds(30);
constexpr auto log_interval = std::chrono::seconds(5);
// Nothing is shown for work that ends sooner than this.
constexpr auto quiet_for = std::chrono::seconds(1);

std::string amount(double v) {
  if (v >= 1e9) {
    return fmt::format("{:.2f}G", v / 1e9);
  }
  if (v >= 1e6) {
    return fmt::format("{:.2f}M", v / 1e6);
  }
  if (v >= 1e4) {
    return fmt::format("{:.1f}k", v / 1e3);
  }
  return fmt::format("{:.0f}", v);
}

std::string duration(double secs) {
  if (secs < 60) {
    return fmt::format("{:.0f} s", secs);
  }
  if (secs < 3600) {
    const auto whole = static_cast<int64_t>(secs);
    return fmt::format("{} min {} s", whole / 60, whole % 60);
  }
  return fmt::format("{:.1f} h", secs / 3600);
}

// The tenths of the share done (0-10), or -1 when it is unknown.
int tenth_of(double fraction) {
  return fraction < 0 ? -1 : static_cast<int>(std::min(1.0, fraction) * 10);
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

progress_meter::progress_meter(std::string what, std::string unit, std::FILE* out, int tty,
                               now_fn now)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      out_(out),
      tty_(tty >= 0 ? tty != 0 : isatty(fileno(out)) != 0),
      now_(now),
      start_(now_()),
      next_(start_ + quiet_for),
      changed_(start_) {}

progress_meter::~progress_meter() {
  if (shown_) {
    print(true);
  }
}

std::string progress_meter::line(const std::string& what, const std::string& unit, uint64_t done,
                                 double fraction, double secs, double elapsed) {
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  std::string s =
      fmt::format("{}: {} {}, {}/s", what, amount(static_cast<double>(done)), unit, amount(rate));
  if (fraction >= 0) {
    const double share = std::min(1.0, fraction);
    s += fmt::format(", {:.0f}%", share * 100);
    if (share > 0 && share < 1) {
      const double t = elapsed >= 0 ? elapsed : secs;
      s += fmt::format(", ~{} left", duration(t * (1 - share) / share));
    }
  }
  return s;
}

void progress_meter::update(uint64_t done, double fraction) {
  const auto now = now_();
  if (done != last_) {
    last_ = done;
    changed_ = now;
  }
  fraction_ = fraction;
  if (now < next_) {
    return;
  }
  if (tty_) {
    next_ = now + tty_interval;
    print(false);
    return;
  }
  const int tenth = tenth_of(fraction);
  const bool due =
      !shown_ || tenth > shown_tenth_ ||
      (last_ != shown_done_ && now - shown_at_ >= (tenth < 0 ? clock::duration(log_interval)
                                                             : clock::duration(log_heartbeat)));
  if (due) {
    next_ = now + log_spacing;
    print(false);
  }
}

void progress_meter::print(bool final) {
  const auto now = now_();
  std::string s = line(what_, unit_, last_, final ? -1 : fraction_, seconds(changed_ - start_),
                       seconds(now - start_));
  if (final) {
    s += fmt::format(", done in {}", duration(seconds(now - start_)));
  } else if (shown_ && s == shown_text_) {
    return;  // nothing moved since the last line
  }
  if (tty_) {
    fmt::print(out_, "\r{}\x1b[K{}", s, final ? "\n" : "");
  } else {
    fmt::print(out_, "tollgate: {}\n", s);
  }
  std::fflush(out_);
  shown_ = true;
  shown_text_ = std::move(s);
  shown_at_ = now;
  shown_done_ = last_;
  shown_tenth_ = tenth_of(fraction_);
}

progress_watch::progress_watch(std::string what, std::string unit,
                               const std::atomic<uint64_t>& done, std::function<double()> share,
                               std::FILE* out)
    : meter_(std::move(what), std::move(unit), out), done_(done), share_(std::move(share)) {
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      tick();
    }
  });
}

void progress_watch::tick() { meter_.update(done_.load(std::memory_order_relaxed), share_()); }

progress_watch::~progress_watch() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
  tick();  // the last figures for the final line
}

}  // namespace tollgate
