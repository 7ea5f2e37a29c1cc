// The admin API's durable memories, in the data dir (admin_api.h's file comment has their
// formats): the audit log, the answers kept for an Idempotency-Key and the Stripe event ids
// acted on. Each is appended with fdatasync before the answer and compacted (rewritten without
// entries older than a day) when the store is opened. In cluster mode (use_redis) the answers
// and event ids live in Redis instead, each expiring after a day, so a portal's retry or a
// webhook's redelivery that reaches another node finds what the first node kept; the audit log
// stays each node's own file.
//
// Not thread-safe: admin_api's mutex serialises every use but audit(), which only appends.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tollgate/cluster/cluster.h"

namespace tollgate::cluster {
class redis_conn;
}

namespace tollgate::app {

class admin_store {
 public:
  /// How long idempotency answers and webhook event ids are kept.
  static constexpr int64_t kRememberSecs = 86400;

  /// One answer kept for an Idempotency-Key (its lookup digest is the map's key).
  struct idem_entry {
    int64_t at = 0;
    std::string fingerprint = {};  // hex
    int status = 0;
    std::string sealed = {};  // hex
  };

  /// Loads and compacts admin-idempotency.txt and stripe-events.txt under `data_dir`.
  admin_store(std::string data_dir, int64_t now);
  ~admin_store();
  /// Cluster mode: answers and event ids from now on in the cluster's Redis, as
  /// P{admin}:idem:LOOKUP ("UNIX FINGERPRINT STATUS SEALED") and P{admin}:event:ID ("UNIX"), each
  /// set with a day's expiry. When Redis cannot be reached a look-up finds nothing (the change
  /// itself then needs Redis too) and a record is logged as not kept.
  void use_redis(cluster::settings s);

  /// The answer kept for `lookup`, or null when there is none from the last day.
  const idem_entry* find_answer(const std::string& lookup, int64_t now);
  /// Keeps an answer: appended to the file (a failure is logged: only a retry's replay is at
  /// risk), then in memory.
  void remember_answer(const std::string& lookup, idem_entry e, int64_t now);
  /// Whether event `id` was acted on or acknowledged within the last day.
  bool seen_event(std::string_view id, int64_t now);
  /// Records event `id` (appended, then in memory; a failure is logged).
  void remember_event(std::string_view id, int64_t now);
  /// One JSON line in admin-audit.log: time, who, action, target (never a key), status.
  void audit(int64_t now, std::string_view who, std::string_view action, std::string_view target,
             int status) const;

 private:
  /// One command on the Redis connection, connecting first when needed: false on a failure
  /// (logged); `str_out` gets the string reply (empty for nil).
  bool redis_command(const std::vector<std::string>& argv, std::string* str_out);

  std::string data_dir_;
  cluster::settings cluster_;
  std::unique_ptr<cluster::redis_conn> redis_;  // set in cluster mode
  idem_entry found_;                            // find_answer's answer from Redis
  std::unordered_map<std::string, idem_entry> idem_;
  std::unordered_map<std::string, int64_t> events_;  // evt id → when first seen
};

}  // namespace tollgate::app
