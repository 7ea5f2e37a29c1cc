#include "billing.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "admin_util.h"
#include "cli.h"
#include "cluster_cli.h"
#include "tollgate/cluster/keys.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/usage_read.h"

namespace tollgate::app {

namespace {

constexpr std::string_view kUsageHelp =
    "usage: tollgate usage export --month YYYY-MM [--format csv|json] [--config FILE]\n"
    "                             [--data-dir DIR]\n"
    "\n"
    "  export   prints the month's billed usage per account and key (plan, quota, billed calls,\n"
    "           overage billed past the quota of `bill` keys, first and last billed call in\n"
    "           UTC, to the second), as the data dir's usage\n"
    "           snapshot, journals and closed-month archives hold it (with [cluster] in the\n"
    "           config: the cluster's totals in Redis); safe beside a running server\n"
    "\n"
    "  --month YYYY-MM    the calendar month (UTC)\n"
    "  --format csv|json  csv (default) or json\n"
    "  --config FILE      the TOML config (its [plans] and server.data_dir)\n"
    "  --data-dir DIR     the data dir (default ./tollgate-data)\n"
    "  --help             this text\n";

std::string csv_field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) {
    return std::string(s);
  }
  std::string o = "\"";
  for (char c : s) {
    o += c;
    if (c == '"') {
      o += '"';
    }
  }
  return o + "\"";
}

// A first or last call's time, RFC 3339 UTC; unknown (usage recorded before the journal kept
// times, or no call): an empty CSV field, JSON null.
std::string call_time(int64_t unix, bool json) {
  if (unix <= 0) {
    return json ? "null" : "";
  }
  return json ? fmt::format("\"{}\"", admin::utc(unix)) : admin::utc(unix);
}

}  // namespace

std::string render_usage_export(const quota::store_contents& c, const quota::plan_map& plans,
                                uint32_t month,
                                const std::map<uint64_t, quota::usage_totals>& usage, bool csv) {
  struct row {
    std::string account, customer, key_id, plan, policy;
    int64_t quota = 0;
    quota::usage_totals u;
  };
  std::vector<row> rows;
  const int64_t end = quota::month_end_secs(month);
  std::map<uint64_t, bool> seen;
  for (const auto& k : c.keys) {
    auto it = usage.find(k.id);
    if (it == usage.end() && (k.created_unix >= end || k.revoked)) {
      continue;  // made after the month, or revoked with nothing billed in it
    }
    row r;
    r.account = k.account;
    for (const auto& a : c.accounts) {
      if (a.name == k.account) {
        r.customer = a.customer;
      }
    }
    r.key_id = quota::key_id_string(k.id);
    r.plan = k.plan;
    if (auto p = plans.find(k.plan); p != plans.end()) {
      r.quota = p->second.monthly_quota;
      r.policy = p->second.overage == quota::overage_policy::bill ? "bill" : "stop";
    }
    if (it != usage.end()) {
      r.u = it->second;
    }
    seen[k.id] = true;
    rows.push_back(std::move(r));
  }
  for (const auto& [id, u] : usage) {
    if (!seen.count(id)) {  // usage of a key the store no longer lists: still billed
      row r;
      r.key_id = quota::key_id_string(id);
      r.u = u;
      rows.push_back(std::move(r));
    }
  }
  std::sort(rows.begin(), rows.end(), [](const row& a, const row& b) {
    return std::tie(a.account, a.key_id) < std::tie(b.account, b.key_id);
  });
  const std::string label = quota::month_label(month);
  std::string o;
  int64_t used = 0, over = 0;
  if (csv) {
    o = "month,account,stripe_customer,key_id,plan,overage_policy,quota,used,overage,"
        "first_call,last_call\n";
    for (const row& r : rows) {
      o += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", label, csv_field(r.account),
                       csv_field(r.customer), r.key_id, csv_field(r.plan), r.policy, r.quota,
                       r.u.used, r.u.overage, call_time(r.u.first_s, false),
                       call_time(r.u.last_s, false));
    }
    return o;
  }
  o = fmt::format("{{\"month\":\"{}\",\"keys\":[", label);
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    o += fmt::format(
        "{}{{\"account\":{},\"stripe_customer\":{},\"key_id\":\"{}\",\"plan\":{},"
        "\"overage_policy\":{},\"quota\":{},\"used\":{},\"overage\":{},\"first_call\":{},"
        "\"last_call\":{}}}",
        i == 0 ? "" : ",", admin::js(r.account),
        r.customer.empty() ? std::string("null") : admin::js(r.customer), r.key_id,
        admin::js(r.plan), r.policy.empty() ? std::string("null") : admin::js(r.policy), r.quota,
        r.u.used, r.u.overage, call_time(r.u.first_s, true), call_time(r.u.last_s, true));
    used += r.u.used;
    over += r.u.overage;
  }
  o += fmt::format("],\"totals\":{{\"used\":{},\"overage\":{}}}}}\n", used, over);
  return o;
}

result<month_billing, std::string> read_month_billing(const config::settings& s, uint32_t month) {
  month_billing b;
  if (s.cluster) {
    auto cs = cluster_settings(s, "usage-export");
    if (!cs) {
      return unexpected(cs.error());
    }
    cluster::redis_keys keys(std::move(*cs));
    auto c = keys.load();
    if (!c) {
      return unexpected(c.error().message);
    }
    std::vector<uint64_t> ids;
    ids.reserve(c->keys.size());
    for (const auto& k : c->keys) {
      ids.push_back(k.id);
    }
    auto u = keys.month_usage(ids, month);
    if (!u) {
      return unexpected(u.error().message);
    }
    b.contents = std::move(*c);
    b.usage = std::move(*u);
    return b;
  }
  quota::key_store store(s.data_dir);
  auto c = store.load();
  if (!c) {
    return unexpected(c.error().message);
  }
  auto u = quota::read_month_usage(s.data_dir, month);
  if (!u) {
    return unexpected(u.error());
  }
  b.contents = std::move(*c);
  b.usage = std::move(*u);
  return b;
}

int run_usage_command(std::span<const std::string_view> args, std::FILE* out, std::FILE* err) {
  std::string month_s, format = "csv", config_path, data_dir;
  bool help = false;
  std::vector<std::string_view> words;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == "--help" || a == "-h") {
      help = true;
      continue;
    }
    if (a.substr(0, 2) != "--") {
      words.push_back(a);
      continue;
    }
    std::string_view name = a, value;
    bool has_value = false;
    if (auto eq = a.find('='); eq != std::string_view::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    std::string* dst = name == "--month"      ? &month_s
                       : name == "--format"   ? &format
                       : name == "--config"   ? &config_path
                       : name == "--data-dir" ? &data_dir
                                              : nullptr;
    if (dst == nullptr) {
      fmt::print(err, "tollgate usage: unknown option {}\n{}", name, kUsageHelp);
      return 2;
    }
    if (!has_value) {
      if (i + 1 >= args.size() || args[i + 1].substr(0, 2) == "--") {
        fmt::print(err, "tollgate usage: option {} needs a value\n{}", name, kUsageHelp);
        return 2;
      }
      value = args[++i];
    }
    if (value.empty()) {
      fmt::print(err, "tollgate usage: option {} needs a value (got an empty one)\n{}", name,
                 kUsageHelp);
      return 2;
    }
    *dst = std::string(value);
  }
  if (help) {
    fmt::print(out, "{}", kUsageHelp);
    return 0;
  }
  if (words.size() != 1 || words[0] != "export") {
    fmt::print(err, "tollgate usage: {}\n{}",
               words.empty() ? std::string("needs a subcommand: export")
                             : fmt::format("unknown subcommand or argument \"{}\"",
                                           words[0] == "export" ? words[1] : words[0]),
               kUsageHelp);
    return 2;
  }
  if (month_s.empty()) {
    fmt::print(err, "tollgate usage export: --month YYYY-MM is required\n{}", kUsageHelp);
    return 2;
  }
  auto month = quota::parse_month(month_s);
  if (!month) {
    fmt::print(err, "tollgate usage export: --month: {}\n", month.error());
    return 2;
  }
  if (format != "csv" && format != "json") {
    fmt::print(err, "tollgate usage export: --format must be csv or json (got \"{}\")\n", format);
    return 2;
  }
  config::settings s = config::defaults();
  if (!config_path.empty()) {
    auto loaded = config::load_file(config_path, std::move(s));
    if (!loaded) {
      fmt::print(err, "tollgate usage: {}\n", loaded.error().message);
      return 2;
    }
    s = std::move(*loaded);
  }
  if (!data_dir.empty()) {
    s.data_dir = data_dir;
  }
  auto b = read_month_billing(s, *month);
  if (!b) {
    fmt::print(err, "tollgate usage export: {}\n", b.error());
    return 1;
  }
  fmt::print(out, "{}",
             render_usage_export(b->contents, to_plans(s), *month, b->usage, format == "csv"));
  return 0;
}

}  // namespace tollgate::app
