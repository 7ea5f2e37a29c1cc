// Cluster mode (design §6, issue 15): several tollgate nodes share keys, accounts, rate limits
// and monthly quotas through Redis (or Redis Cluster: every script touches one hash slot).
//
// Redis keys (P = [cluster] prefix, default "tollgate:"):
//   P{keys}:keys          hash  key id -> "SHA256HEX ACCOUNT PLAN CREATED_UNIX active|revoked"
//   P{keys}:accounts      hash  account -> "active|suspended"
//   P{keys}:version       int   bumped by every change of the two above (nodes poll it)
//   P{keys}:epoch         str   random id set by the first write of a key set (SETNX): a Redis
//                               that lost its data lacks it (or has another), so a node knows
//                               Redis is not the continuation of what it loaded
//   P{keys}:resync        int   bumped by a restore: every node pushes its usage again
//   P{KEY_ID}:YYYY-MM     hash  one key's month, per node NODE:
//                               u:NODE  billed calls the node journaled (set from its journal,
//                                       never lowered: a retried or replayed push is a no-op)
//                               o:NODE  of those, overage
//                               g:NODE  budget units the node claims: used from leases + held
//                               e, r    a recovery: its id (epoch:resync) and the Redis time
//                                       (ms) until which no lease is granted, while every node
//                                       pushes its figures again
//                         the key's usage is the sum of u:*; a lease is granted from
//                         quota - sum(g:*), so the sum of claims never passes the quota.
//                               f:NODE, l:NODE  the node's first and last billed call (unix s)
//   P{nodes}              hash  node -> "HEARTBEAT_UNIX_MS UNITS_HELD KEYS"
//   P{admin}:idem:LOOKUP  str   the admin API's answer kept for an Idempotency-Key (a day)
//   P{admin}:event:ID     str   a Stripe event id acted on or acknowledged (a day)
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
std::string epoch_key(const settings& s);
std::string resync_key(const settings& s);
/// A new random epoch id (16 hex digits).
std::string new_epoch();
/// The usage hash of key `key_id` ("key_…") in month index `month`.
std::string usage_key(const settings& s, uint64_t key_id, uint32_t month);

}  // namespace tollgate::cluster
