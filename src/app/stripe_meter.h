// Billed overage pushed to Stripe as meter events (README "Accounts, keys and billing"): once a
// month has closed, each account's overage in it (billed calls past the quota of its `bill`
// keys, exactly as the usage export reads them) becomes one POST /v1/billing/meter_events, so
// Stripe's usage-based price invoices it.
//
// Off the request path: one background thread of its own (a core never sees it) makes a pass at
// start and then every [stripe] meter_retry_secs. A pass looks at the two months before the
// current one, each once it has been closed for kGraceSecs (the cores' last records and, in
// cluster mode, every node's last push are in by then), reads it as the export does
// (read_month_billing) and posts every account's event not yet sent.
//
// Exactly once, as far as both ends allow: each event carries an `identifier` and an
// Idempotency-Key made of the account and the month, so a retry (a lost answer, a restart, a
// second node pushing the same month) is deduplicated by Stripe; what Stripe acknowledged or
// refused is appended to stripe-meter.txt in the data dir (fdatasync) before the next event and
// never sent again. A network failure, 409, 429 or 5xx is retried at the next pass; any other
// 4xx (a customer Stripe does not know, a month older than Stripe accepts) is logged and kept
// as refused, since sending it again cannot help.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "billing.h"
#include "tollgate/config/config.h"

namespace tollgate::app {

/// One account's billed overage in one closed month: what one meter event reports.
struct meter_event {
  std::string account;
  std::string customer;  ///< the account's stripe_customer
  uint32_t month = 0;
  int64_t overage = 0;
};

/// The events of month `month`'s billing: per account with overage, the sum over its keys.
/// Accounts with overage but no Stripe customer go to `no_customer` (nothing to bill them in).
std::vector<meter_event> meter_events(const month_billing& b, uint32_t month,
                                      std::vector<std::string>& no_customer);

/// The form body of POST /v1/billing/meter_events for `e` (event_name, payload[stripe_customer_id],
/// payload[value], identifier, timestamp: the month's last second).
std::string meter_event_form(const meter_event& e, std::string_view event_name);

class meter_pusher {
 public:
  /// A month is pushed once it has been closed this long.
  static constexpr int64_t kGraceSecs = 900;

  /// Reads what stripe-meter.txt says was sent, and starts the thread. `s.stripe_meter_event`
  /// must be set and the API key's variable present (check_admin_config says so at start).
  explicit meter_pusher(const config::settings& s);
  ~meter_pusher();
  meter_pusher(const meter_pusher&) = delete;
  meter_pusher& operator=(const meter_pusher&) = delete;

 private:
  enum class outcome { sent, refused, retry };
  void run();
  /// One pass at `now` (unix seconds).
  void pass(int64_t now);
  outcome post(const meter_event& e, std::string& why);

  config::settings s_;
  std::string api_key_;
  std::unordered_map<std::string, std::string> done_;  // "YYYY-MM account" -> sent | refused
  std::mutex mu_;                                      // stop_, with cv_
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tollgate::app
