// Cluster mode (design §6, issue 15): several tollgate nodes share keys, accounts, rate limits
// and monthly quotas through Redis (or Redis Cluster: every script touches one hash slot).
//
// Redis keys (P = [cluster] prefix, default "tollgate:"):
//   P{keys}:keys          hash  key id -> "SHA256HEX ACCOUNT PLAN CREATED_UNIX active|revoked"
//   P{keys}:accounts      hash  account -> "active|suspended"
//   P{keys}:version       int   bumped by every change of the two above (nodes poll it)
//   P{KEY_ID}:YYYY-MM     hash  one key's month, per node NODE:
//                               u:NODE  billed calls the node journaled (set from its journal,
//                                       never lowered: a retried or replayed push is a no-op)
//                               o:NODE  of those, overage
//                               g:NODE  budget units the node claims: used from leases + held
//                         the key's usage is the sum of u:*; a lease is granted from
//                         quota - sum(g:*), so the sum of claims never passes the quota.
//   P{nodes}              hash  node -> "HEARTBEAT_UNIX_MS UNITS_HELD KEYS"
// Hash tags ({keys}, {KEY_ID}, {nodes}) keep each script's keys in one slot.
#pragma once

#include <string>

#include "tollgate/common/result.h"

namespace tollgate::cluster {

/// The [cluster] table.
struct settings {
  std::string redis;     ///< "HOST:PORT" or "unix:PATH"
  std::string node;      ///< this node's unique name
  std::string password;  ///< AUTH password (read from password_env); empty: none
  std::string prefix = "tollgate:";
  int timeout_ms = 1000;  ///< connect and reply timeout
};

/// Redis key names.
std::string keys_key(const settings& s);
std::string accounts_key(const settings& s);
std::string version_key(const settings& s);
std::string nodes_key(const settings& s);
/// The usage hash of key `key_id` ("key_…") in month index `month`.
std::string usage_key(const settings& s, uint64_t key_id, uint32_t month);

}  // namespace tollgate::cluster
