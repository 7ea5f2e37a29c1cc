// The admin API's routes for accounts, keys and usage (admin_api.h): each a change through the
// key store, audited, or a read of the store and the usage files.
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "admin_api.h"
#include "admin_util.h"
#include "billing.h"
#include "handler.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/usage_read.h"

namespace tollgate::app {

using namespace admin;  // NOLINT: the admin API's own helpers (admin_util.h)

admin_api::admin_reply admin_api::create_account(std::string_view body, int64_t now) {
  auto f = parse_body(body, {"id", "stripe_customer"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto id = f->strings.find("id");
  if (id == f->strings.end()) {
    return {400, error_body("invalid_argument", "The body needs \"id\": the account's name.")};
  }
  auto cu = f->strings.find("stripe_customer");
  const std::string customer = cu == f->strings.end() ? std::string() : cu->second;
  auto r = keys_->create_account(id->second, customer);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    store_.audit(now, token_name_, "accounts.create", id->second, status);
    return {status, b};
  }
  put_in_force(true);
  store_.audit(now, token_name_, "accounts.create", id->second, 201);
  auto c = contents();
  if (c) {
    for (const auto& a : c->accounts) {
      if (a.name == id->second) {
        return {201, account_json(a, *c, now)};
      }
    }
  }
  return {201, fmt::format(R"({{"id":{},"status":"active","stripe_customer":{},"keys":[]}})",
                           js(id->second), customer.empty() ? "null" : js(customer))};
}

admin_api::admin_reply admin_api::get_account(std::string_view id, int64_t now) {
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  for (const auto& a : c->accounts) {
    if (a.name == id) {
      return {200, account_json(a, *c, now)};
    }
  }
  return {404, error_body("not_found", fmt::format("There is no account \"{}\".", id))};
}

admin_api::admin_reply admin_api::set_account(std::string_view id, bool suspend, int64_t now) {
  return apply_account_status(id, suspend, now, token_name_,
                              suspend ? "accounts.suspend" : "accounts.resume", true);
}

admin_api::admin_reply admin_api::apply_account_status(std::string_view account, bool suspend,
                                                       int64_t now, std::string_view who,
                                                       std::string_view action, bool may_wait) {
  auto r = suspend ? keys_->suspend(account) : keys_->resume(account);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    if (status == 404) {
      b = error_body("not_found", fmt::format("There is no account \"{}\".", account));
    }
    store_.audit(now, who, action, account, status);
    return {status, b};
  }
  put_in_force(may_wait);
  store_.audit(now, who, action, account, 200);
  auto c = contents();
  if (c) {
    for (const auto& a : c->accounts) {
      if (a.name == account) {
        return {200, account_json(a, *c, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"status":"{}"}})", js(account),
                           suspend ? "suspended" : "active")};
}

admin_api::admin_reply admin_api::create_key(std::string_view body, int64_t now) {
  auto f = parse_body(body, {"account", "plan"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto acc = f->strings.find("account");
  auto plan = f->strings.find("plan");
  if (acc == f->strings.end() || plan == f->strings.end()) {
    return {400, error_body("invalid_argument",
                            "The body needs \"account\" and \"plan\" (both strings).")};
  }
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  bool known = false;
  for (const auto& a : c->accounts) {
    known = known || a.name == acc->second;
  }
  if (!known) {
    store_.audit(now, token_name_, "keys.create", acc->second, 404);
    return {404,
            error_body("not_found", fmt::format("There is no account \"{}\": create it with POST "
                                                "/admin/accounts first.",
                                                acc->second))};
  }
  const quota::plan_map& plans = st_.quota->options().plans;
  auto r = keys_->create_key(acc->second, plan->second, plans, now);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    store_.audit(now, token_name_, "keys.create", acc->second, status);
    return {status, b};
  }
  put_in_force(true);
  store_.audit(now, token_name_, "keys.create", r->key_id, 201);
  return {201,
          fmt::format(
              R"({{"id":"{}","key":{},"account":{},"plan":{},"created":"{}","status":"active"}})",
              r->key_id, js(r->secret), js(acc->second), js(plan->second), utc(now))};
}

admin_api::admin_reply admin_api::list_keys(std::string_view query, int64_t now) {
  auto account = query_param(query, "account");
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  std::map<std::string, bool, std::less<>> suspended;
  for (const auto& a : c->accounts) {
    suspended[a.name] = a.suspended;
  }
  if (account && !suspended.count(*account)) {
    return {404, error_body("not_found", fmt::format("There is no account \"{}\".", *account))};
  }
  std::string keys;
  for (const auto& k : c->keys) {
    if (!account || k.account == *account) {
      keys += (keys.empty() ? "" : ",") + key_json(k, suspended[k.account], now);
    }
  }
  return {200, fmt::format(R"({{"keys":[{}]}})", keys)};
}

admin_api::admin_reply admin_api::revoke_key(std::string_view id, int64_t now) {
  auto r = keys_->revoke(id);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    store_.audit(now, token_name_, "keys.revoke", id, status);
    return {status, b};
  }
  put_in_force(true);
  store_.audit(now, token_name_, "keys.revoke", id, 200);
  auto c = contents();
  if (c) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == id) {
        return {200, key_json(k, false, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"status":"revoked"}})", js(id))};
}

admin_api::admin_reply admin_api::rotate_key(std::string_view id, std::string_view body,
                                             int64_t now) {
  auto f = parse_body(body, {}, {"grace_secs"}, true);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  int64_t grace = rotate_grace_secs_;
  if (auto g = f->integers.find("grace_secs"); g != f->integers.end()) {
    if (g->second < 0 || g->second > 30 * 86400) {
      return {400, error_body("invalid_argument",
                              "grace_secs must be between 0 and 2592000 (30 days).")};
    }
    grace = g->second;
  }
  // grace 0: the old key stops at once (the table is rebuilt before the answer).
  auto r = keys_->rotate(id, now, grace == 0 ? now : now + grace);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    store_.audit(now, token_name_, "keys.rotate", id, status);
    return {status, b};
  }
  put_in_force(true);
  store_.audit(now, token_name_, "keys.rotate", fmt::format("{} -> {}", id, r->key_id), 201);
  std::string account, plan;
  if (auto c = contents()) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == r->key_id) {
        account = k.account;
        plan = k.plan;
      }
    }
  }
  return {
      201,
      fmt::format(
          R"({{"id":"{}","key":{},"account":{},"plan":{},"created":"{}","status":"active","replaces":{},"old_key_expires":"{}"}})",
          r->key_id, js(r->secret), js(account), js(plan), utc(now), js(id),
          utc(grace == 0 ? now : now + grace))};
}

admin_api::admin_reply admin_api::patch_key(std::string_view id, std::string_view body,
                                            int64_t now) {
  auto f = parse_body(body, {"plan"}, {}, false);
  if (!f) {
    return {400, error_body("invalid_argument", f.error())};
  }
  auto plan = f->strings.find("plan");
  if (plan == f->strings.end()) {
    return {400, error_body("invalid_argument", "The body needs \"plan\": the new plan's name.")};
  }
  auto r = keys_->set_plan(id, plan->second, st_.quota->options().plans);
  if (!r) {
    auto [status, b] = store_answer(r.error());
    store_.audit(now, token_name_, "keys.plan", id, status);
    return {status, b};
  }
  put_in_force(true);
  store_.audit(now, token_name_, "keys.plan", fmt::format("{} -> {}", id, plan->second), 200);
  auto c = contents();
  if (c) {
    for (const auto& k : c->keys) {
      if (quota::key_id_string(k.id) == id) {
        return {200, key_json(k, false, now)};
      }
    }
  }
  return {200, fmt::format(R"({{"id":{},"plan":{}}})", js(id), js(plan->second))};
}

admin_api::admin_reply admin_api::usage(std::string_view query, int64_t now) {
  auto account = query_param(query, "account");
  if (!account || account->empty()) {
    return {400, error_body("invalid_argument", "usage needs ?account=NAME (and &month=YYYY-MM).")};
  }
  uint32_t month = quota::month_index_of_secs(now);
  if (auto m = query_param(query, "month")) {
    auto pm = quota::parse_month(*m);
    if (!pm) {
      return {400, error_body("invalid_argument", pm.error())};
    }
    month = *pm;
  }
  auto c = contents();
  if (!c) {
    auto [status, b] = store_answer(c.error());
    return {status, b};
  }
  const quota::account_entry* acc = nullptr;
  for (const auto& a : c->accounts) {
    if (a.name == *account) {
      acc = &a;
    }
  }
  if (acc == nullptr) {
    return {404, error_body("not_found", fmt::format("There is no account \"{}\".", *account))};
  }
  const quota::plan_map& plans = st_.quota->options().plans;
  std::string keys;
  int64_t used = 0, over = 0;
  for (const auto& k : c->keys) {
    if (k.account != *account) {
      continue;
    }
    const quota::usage_totals u = st_.quota->usage(k.id, month);
    int64_t limit = 0;
    std::string_view policy = "stop";
    if (auto p = plans.find(k.plan); p != plans.end()) {
      limit = p->second.monthly_quota;
      policy = p->second.overage == quota::overage_policy::bill ? "bill" : "stop";
    }
    keys += fmt::format(
        R"({}{{"id":"{}","plan":{},"overage_policy":"{}","limit":{},"used":{},"remaining":{},"overage":{},"status":"{}"}})",
        keys.empty() ? "" : ",", quota::key_id_string(k.id), js(k.plan), policy, limit, u.used,
        std::max<int64_t>(0, limit - u.used), u.overage,
        k.revoked                                       ? "revoked"
        : (k.expires_unix > 0 && k.expires_unix <= now) ? "expired"
        : acc->suspended                                ? "suspended"
                                                        : "active");
    used += u.used;
    over += u.overage;
  }
  return {
      200,
      fmt::format(
          R"({{"account":{},"month":"{:04}-{:02}","keys":[{}],"totals":{{"used":{},"overage":{}}}}})",
          js(*account), quota::month_year(month), quota::month_of_year(month), keys, used, over)};
}

admin_api::admin_reply admin_api::usage_export(std::string_view query) {
  auto m = query_param(query, "month");
  if (!m) {
    return {400, error_body("invalid_argument", "usage/export needs ?month=YYYY-MM.")};
  }
  auto month = quota::parse_month(*m);
  if (!month) {
    return {400, error_body("invalid_argument", month.error())};
  }
  const std::string format = query_param(query, "format").value_or("json");
  if (format != "json" && format != "csv") {
    return {400, error_body("invalid_argument", "format must be json or csv.")};
  }
  auto b = read_month_billing(usage_source_, *month);
  if (!b) {
    return {500, error_body("usage_unreadable", b.error())};
  }
  admin_reply a{200, render_usage_export(b->contents, st_.quota->options().plans, *month, b->usage,
                                         format == "csv")};
  if (format == "csv") {
    a.content_type = "text/csv; charset=utf-8";
  }
  return a;
}

}  // namespace tollgate::app
