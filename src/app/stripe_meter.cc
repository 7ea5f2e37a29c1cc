#include "stripe_meter.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

#include "tollgate/common/log.h"
#include "tollgate/common/percent.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app {

namespace {

// The identifier Stripe deduplicates on, and the Idempotency-Key: one per account and month.
std::string identifier(const meter_event& e) {
  return fmt::format("tollgate-{}-{}", e.account, quota::month_label(e.month));
}

size_t collect(char* p, size_t size, size_t n, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (s->size() < 4096) {  // the answer is only quoted in a log line
    s->append(p, std::min<size_t>(size * n, 4096 - s->size()));
  }
  return size * n;
}

}  // namespace

std::vector<meter_event> meter_events(const month_billing& b, uint32_t month,
                                      std::vector<std::string>& no_customer) {
  std::map<uint64_t, const quota::key_entry*> keys;
  for (const quota::key_entry& k : b.contents.keys) {
    keys[k.id] = &k;
  }
  std::map<std::string, int64_t> by_account;
  for (const auto& [id, u] : b.usage) {
    auto k = keys.find(id);
    if (u.overage > 0 && k != keys.end()) {
      by_account[k->second->account] += u.overage;
    }
  }
  std::vector<meter_event> out;
  for (const auto& [account, overage] : by_account) {
    std::string customer;
    for (const quota::account_entry& a : b.contents.accounts) {
      if (a.name == account) {
        customer = a.customer;
      }
    }
    if (customer.empty()) {
      no_customer.push_back(account);
      continue;
    }
    out.push_back({account, customer, month, overage});
  }
  return out;
}

std::string meter_event_form(const meter_event& e, std::string_view event_name) {
  return fmt::format(
      "event_name={}&payload%5Bstripe_customer_id%5D={}&payload%5Bvalue%5D={}&identifier={}&"
      "timestamp={}",
      percent_encode(event_name), percent_encode(e.customer), e.overage,
      percent_encode(identifier(e)), quota::month_end_secs(e.month) - 1);
}

meter_pusher::meter_pusher(const config::settings& s) : s_(s) {
  const char* key = std::getenv(s_.stripe_api_key_env.c_str());
  api_key_ = key != nullptr ? key : "";
  bool missing = false;
  if (auto f = quota::fs::read_file(s_.data_dir + "/stripe-meter.txt", &missing); f) {
    size_t pos = 0;
    while (pos < f->size()) {
      const size_t nl = f->find('\n', pos);
      if (nl == std::string::npos) {
        break;  // a torn last line: that event is sent again, and Stripe deduplicates it
      }
      char month[16], account[128], what[16];
      long long at = 0, overage = 0;
      if (std::sscanf(f->c_str() + pos, "meter %lld %15s %127s %lld %15s", &at, month, account,
                      &overage, what) == 5) {
        done_[fmt::format("{} {}", month, account)] = what;
      }
      pos = nl + 1;
    }
  } else {
    log_error("stripe meter: {}; months already pushed are pushed again (Stripe deduplicates)",
              f.error());
  }
  curl_global_init(CURL_GLOBAL_DEFAULT);  // thread-safe in the libcurl Debian 12 ships (7.88)
  thread_ = std::thread([this] { run(); });
}

meter_pusher::~meter_pusher() {
  {
    std::lock_guard g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void meter_pusher::run() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    lk.unlock();
    pass(static_cast<int64_t>(std::time(nullptr)));
    lk.lock();
    cv_.wait_for(lk, std::chrono::seconds(s_.stripe_meter_retry_secs), [this] { return stop_; });
  }
}

void meter_pusher::pass(int64_t now) {
  const uint32_t current = quota::month_index_of_secs(now);
  for (const uint32_t month : {current - 2, current - 1}) {
    if (now < quota::month_end_secs(month) + kGraceSecs) {
      continue;  // the month's last records (and, in cluster mode, pushes) may still come
    }
    auto b = read_month_billing(s_, month);
    if (!b) {
      log_error("stripe meter: {} not read ({}); retried in {} s", quota::month_label(month),
                b.error(), s_.stripe_meter_retry_secs);
      continue;
    }
    std::vector<std::string> no_customer;
    for (const meter_event& e : meter_events(*b, month, no_customer)) {
      const std::string id = fmt::format("{} {}", quota::month_label(month), e.account);
      if (done_.count(id) != 0) {
        continue;
      }
      {
        std::lock_guard g(mu_);
        if (stop_) {
          return;
        }
      }
      std::string why;
      const outcome o = post(e, why);
      if (o == outcome::retry) {
        log_error("stripe meter: {} overage of {} for {} not sent ({}); retried in {} s", e.overage,
                  e.account, quota::month_label(month), why, s_.stripe_meter_retry_secs);
        continue;
      }
      const char* what = o == outcome::sent ? "sent" : "refused";
      if (o == outcome::refused) {
        log_error("stripe meter: Stripe refused {} overage of {} for {}: {}; not sent again",
                  e.overage, e.account, quota::month_label(month), why);
      } else {
        log_info("stripe meter: {} overage of {} for {} sent", e.overage, e.account,
                 quota::month_label(month));
      }
      if (auto r = quota::fs::append_durable(
              s_.data_dir + "/stripe-meter.txt",
              fmt::format("meter {} {} {} {} {}\n", now, quota::month_label(month), e.account,
                          e.overage, what));
          !r) {
        log_error("stripe meter: {} (the event is sent again next time; Stripe deduplicates it)",
                  r.error());
        continue;
      }
      done_[id] = what;
    }
    for (const std::string& a : no_customer) {
      const std::string id = fmt::format("{} {}", quota::month_label(month), a);
      if (done_.emplace(id, "no_customer").second) {  // said once per process
        log_error("stripe meter: account {} has overage in {} but no stripe_customer; not sent", a,
                  quota::month_label(month));
      }
    }
  }
}

meter_pusher::outcome meter_pusher::post(const meter_event& e, std::string& why) {
  CURL* c = curl_easy_init();
  if (c == nullptr) {
    why = "libcurl could not make a handle";
    return outcome::retry;
  }
  const std::string body = meter_event_form(e, s_.stripe_meter_event);
  std::string answer;
  curl_slist* h = nullptr;
  h = curl_slist_append(h, ("Authorization: Bearer " + api_key_).c_str());
  h = curl_slist_append(h, ("Idempotency-Key: " + identifier(e)).c_str());
  h = curl_slist_append(h, "Content-Type: application/x-www-form-urlencoded");
  curl_easy_setopt(c, CURLOPT_URL, s_.stripe_meter_url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  const CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  if (rc != CURLE_OK) {
    why = curl_easy_strerror(rc);
    return outcome::retry;
  }
  if (status >= 200 && status < 300) {
    return outcome::sent;
  }
  why = fmt::format("HTTP {}: {}", status, answer.substr(0, 300));
  // 409: the same Idempotency-Key is still being processed; 429 and 5xx pass.
  if (status == 409 || status == 429 || status >= 500 || status < 200) {
    return outcome::retry;
  }
  return outcome::refused;
}

}  // namespace tollgate::app
