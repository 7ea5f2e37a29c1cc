#include "tollgate/common/progress.h"

#include <fmt/format.h>
#include <unistd.h>

namespace tollgate {
namespace {

constexpr auto tty_interval = std::chrono::milliseconds(200);
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

}  // namespace

progress_meter::progress_meter(std::string what, std::string unit, std::FILE* out, int tty)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      out_(out),
      tty_(tty >= 0 ? tty != 0 : isatty(fileno(out)) != 0),
      start_(std::chrono::steady_clock::now()),
      next_(start_ + quiet_for) {}

progress_meter::~progress_meter() {
  if (shown_) {
    print(true);
  }
}

std::string progress_meter::line(const std::string& what, const std::string& unit, uint64_t done,
                                 double fraction, double secs) {
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  std::string s =
      fmt::format("{}: {} {}, {}/s", what, amount(static_cast<double>(done)), unit, amount(rate));
  if (fraction >= 0) {
    const double share = std::min(1.0, fraction);
    s += fmt::format(", {:.0f}%", share * 100);
    if (share > 0 && share < 1) {
      s += fmt::format(", ~{} left", duration(secs * (1 - share) / share));
    }
  }
  return s;
}

void progress_meter::update(uint64_t done, double fraction) {
  last_ = done;
  fraction_ = fraction;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_) {
    return;
  }
  next_ = now + (tty_ ? tty_interval : log_interval);
  print(false);
}

void progress_meter::print(bool final) {
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string s = line(what_, unit_, last_, final ? -1 : fraction_, secs);
  if (final) {
    s += fmt::format(", done in {}", duration(secs));
  }
  if (tty_) {
    fmt::print(out_, "\r{}\x1b[K{}", s, final ? "\n" : "");
  } else {
    fmt::print(out_, "tollgate: {}\n", s);
  }
  std::fflush(out_);
  shown_ = true;
}

progress_watch::progress_watch(std::string what, std::string unit,
                               const std::atomic<uint64_t>& done, const std::atomic<uint64_t>& part,
                               uint64_t whole, std::FILE* out)
    : meter_(std::move(what), std::move(unit), out), done_(done), part_(part), whole_(whole) {
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      tick();
    }
  });
}

void progress_watch::tick() {
  const double f = whole_ == 0 ? -1
                               : static_cast<double>(part_.load(std::memory_order_relaxed)) /
                                     static_cast<double>(whole_);
  meter_.update(done_.load(std::memory_order_relaxed), f);
}

progress_watch::~progress_watch() {
  stop_.store(true, std::memory_order_relaxed);
  thread_.join();
  tick();  // the last figures for the final line
}

}  // namespace tollgate
