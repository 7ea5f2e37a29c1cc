// The Stripe webhook (admin_api.h): the Stripe-Signature check, the events that suspend and
// resume an account, and the event ids kept a day so a redelivery changes nothing.
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <simdjson.h>
#include <strings.h>

#include <algorithm>
#include <charconv>

#include "admin_api.h"
#include "admin_util.h"
#include "handler.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app {

using namespace admin;  // NOLINT: the admin API's own helpers (admin_util.h)

admin_api::admin_reply admin_api::webhook(const http::request& req, int64_t now, bool may_wait,
                                          const std::function<admin_reply(event)>& act) {
  auto refuse = [&](int status, std::string_view code, std::string_view msg) {
    events_refused_.fetch_add(1, std::memory_order_relaxed);
    return admin_reply{status, error_body(code, msg)};
  };
  if (req.method != "POST") {
    return {405, error_body("method_not_allowed", "Stripe delivers events with POST."),
            "Allow: POST\r\n"};
  }
  if (stripe_secret_.empty()) {
    return refuse(403, "webhook_disabled", stripe_why_);
  }
  // 1. The signature: "t=TIMESTAMP,v1=HEX[,v1=HEX…][,v0=…]"; HMAC-SHA256 of "t.body".
  const std::string_view sig = req.header_value("Stripe-Signature");
  if (sig.empty()) {
    return refuse(400, "missing_signature", "The Stripe-Signature header is missing.");
  }
  std::string_view t;
  std::vector<quota::digest> v1;
  size_t pos = 0;
  while (pos <= sig.size()) {
    size_t comma = sig.find(',', pos);
    if (comma == std::string_view::npos) {
      comma = sig.size();
    }
    std::string_view item = sig.substr(pos, comma - pos);
    pos = comma + 1;
    while (!item.empty() && item.front() == ' ') {
      item.remove_prefix(1);
    }
    if (item.substr(0, 2) == "t=") {
      t = item.substr(2);
    } else if (item.substr(0, 3) == "v1=" && v1.size() < 8) {
      quota::digest d{};
      if (item.size() == 3 + 64 && quota::fs::from_hex(item.substr(3), d.data(), d.size())) {
        v1.push_back(d);
      }
    }
  }
  int64_t ts = 0;
  {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), ts);
    if (t.empty() || ec != std::errc() || p != t.data() + t.size() || v1.empty()) {
      return refuse(400, "bad_signature_header",
                    "Stripe-Signature must carry t=TIMESTAMP and at least one v1 signature.");
    }
  }
  const quota::digest want = hmac_sha256(stripe_secret_, fmt::format("{}.{}", t, req.body));
  bool match = false;
  for (const auto& d : v1) {
    match |= CRYPTO_memcmp(d.data(), want.data(), d.size()) == 0;  // every one compared
  }
  if (!match) {
    return refuse(400, "bad_signature",
                  "No v1 signature matches this endpoint's signing secret (check [stripe] "
                  "webhook_secret_env holds this endpoint's whsec_ secret).");
  }
  if (ts < now - tolerance_secs_ || ts > now + tolerance_secs_) {
    return refuse(400, "timestamp_outside_tolerance",
                  fmt::format("The signature's timestamp is more than {} s from the server's "
                              "clock: a replay, or a clock to fix.",
                              tolerance_secs_));
  }
  // 2. The event.
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  std::string_view id, type, customer, status;
  if (parser.parse(req.body.data(), req.body.size(), true).get(doc) != simdjson::SUCCESS ||
      doc["id"].get_string().get(id) != simdjson::SUCCESS ||
      doc["type"].get_string().get(type) != simdjson::SUCCESS || id.empty() || id.size() > 255 ||
      id.find_first_of(" \t\r\n") != std::string_view::npos) {
    return refuse(400, "malformed_event",
                  "The body is not a Stripe event (a JSON object with string \"id\" and "
                  "\"type\").");
  }
  simdjson::dom::element obj;
  const bool has_obj = doc["data"]["object"].get(obj) == simdjson::SUCCESS && obj.is_object();
  if (has_obj) {
    simdjson::dom::element c;
    if (obj["customer"].get(c) == simdjson::SUCCESS) {
      if (!c.is_string() || c.get_string().get(customer) != simdjson::SUCCESS) {
        if (c["id"].get_string().get(customer) != simdjson::SUCCESS) {  // an expanded customer
          customer = {};
        }
      }
    }
    if (obj["status"].get_string().get(status) != simdjson::SUCCESS) {
      status = {};
    }
  }
  // 3. What it means: suspend, resume, or nothing.
  event e;
  e.id = id;
  e.type = type;
  e.customer = customer;
  e.has_obj = has_obj;
  if (type == "customer.subscription.deleted" || type == "invoice.payment_failed") {
    e.what = event_action::suspend;
  } else if (type == "invoice.paid" || type == "invoice.payment_succeeded") {
    e.what = event_action::resume;
  } else if (type == "customer.subscription.updated" || type == "customer.subscription.created" ||
             type == "customer.subscription.resumed" || type == "customer.subscription.paused") {
    if (std::find(suspend_on_.begin(), suspend_on_.end(), status) != suspend_on_.end()) {
      e.what = event_action::suspend;
    } else if (status == "active" || status == "trialing") {
      e.what = event_action::resume;
    }
  }
  if (act) {
    return act(std::move(e));  // off the core
  }
  return event_act(e, now, may_wait);
}

// 4. Acted on, once: by the admin listener's worker, or the public cores' (`may_wait`: both
// may wait for the mutex and for the change to be in force on every core).
admin_api::admin_reply admin_api::event_act(const event& e, int64_t now, bool may_wait) {
  auto refuse = [&](int status, std::string_view code, std::string_view msg) {
    events_refused_.fetch_add(1, std::memory_order_relaxed);
    return admin_reply{status, error_body(code, msg)};
  };
  const std::string& id = e.id;
  const std::string& type = e.type;
  const std::string& customer = e.customer;
  const bool has_obj = e.has_obj;
  using act = event_action;
  const act what = e.what;
  std::unique_lock g(mu_, std::defer_lock);
  if (may_wait) {
    g.lock();
  } else if (!g.try_lock()) {
    return {503, error_body("busy", "Another change is being made; deliver the event again."),
            "Retry-After: 1\r\n"};
  }
  if (store_.seen_event(id, now)) {
    events_duplicate_.fetch_add(1, std::memory_order_relaxed);
    return {409, error_body("duplicate_event",
                            fmt::format("Event {} was received already; nothing changed.", id))};
  }
  std::string account;
  if (what != act::none) {
    if (!has_obj || customer.empty()) {
      return refuse(
          400, "malformed_event",
          fmt::format("A {} event must name its customer in data.object.customer.", type));
    }
    auto c = contents();
    if (!c) {
      return {500, error_body("store_failed", c.error().message)};
    }
    for (const auto& a : c->accounts) {
      if (a.customer == customer) {
        account = a.name;
      }
    }
    if (account.empty()) {
      return refuse(422, "unknown_customer",
                    fmt::format("No account has stripe_customer \"{}\"; link it with POST "
                                "/admin/accounts {{\"id\":…,\"stripe_customer\":…}}.",
                                customer));
    }
    admin_reply a = apply_account_status(account, what == act::suspend, now, "stripe",
                                         fmt::format("webhook {} {}", type, id), may_wait);
    if (a.status != 200) {
      return a;
    }
  }
  store_.remember_event(id, now);
  if (what == act::none) {
    events_ignored_.fetch_add(1, std::memory_order_relaxed);
    return {200, fmt::format(R"({{"received":true,"event":{},"action":"none"}})", js(id))};
  }
  events_applied_.fetch_add(1, std::memory_order_relaxed);
  return {200, fmt::format(R"({{"received":true,"event":{},"action":"{}","account":{}}})", js(id),
                           what == act::suspend ? "suspended" : "resumed", js(account))};
}

}  // namespace tollgate::app
