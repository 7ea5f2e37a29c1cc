// Billed usage, exported for invoicing: `tollgate usage export` and GET /admin/usage/export.
// Both read the month as read_month_billing() finds it (the data dir exactly as start-up would
// recover it, or in cluster mode the cluster's totals in Redis) and render the same rows.
#pragma once

#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "tollgate/common/result.h"
#include "tollgate/config/config.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/plan.h"
#include "tollgate/quota/service.h"

namespace tollgate::app {

/// One row per key that existed by the month's end or billed in it, sorted by account then key:
/// month, account, stripe_customer, key_id, plan, overage policy, monthly quota, used (billed
/// calls), overage (billed calls past the quota of a `bill` key), first_call and last_call
/// (RFC 3339 UTC, to the second; empty or null when unknown: usage recorded before the journal
/// kept times). CSV (a header line, RFC 4180 quoting) or JSON
/// ({"month","keys":[…],"totals":{"used","overage"}}).
std::string render_usage_export(const quota::store_contents& c, const quota::plan_map& plans,
                                uint32_t month,
                                const std::map<uint64_t, quota::usage_totals>& usage, bool csv);

/// The month's keys and billed usage, from where the config keeps them: the data dir (the
/// usage snapshot, the journals after it, or the closed month's archive: this node's own
/// calls), or with [cluster] the cluster's Redis (every node's pushed counts summed, and the keys
/// and accounts the cluster serves). An error names what could not be read.
struct month_billing {
  quota::store_contents contents;
  std::map<uint64_t, quota::usage_totals> usage;
};
result<month_billing, std::string> read_month_billing(const config::settings& s, uint32_t month);

/// `tollgate usage export --month YYYY-MM [--format csv|json] [--config FILE] [--data-dir DIR]`:
/// the words after "usage". Exit code: 0, 2 bad usage or config, 1 other.
int run_usage_command(std::span<const std::string_view> args, std::FILE* out, std::FILE* err);

}  // namespace tollgate::app
