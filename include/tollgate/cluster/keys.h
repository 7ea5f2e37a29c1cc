// Keys and accounts in Redis: what `tollgate keys` and `tollgate accounts` act on given a config
// with [cluster], and what every node loads its lookup table from.
//
// Thread-safe only in the sense that each instance has its own connection: use one per thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>

#include "tollgate/cluster/cluster.h"
#include "tollgate/quota/key_store.h"
#include "tollgate/quota/service.h"

namespace tollgate::cluster {

class redis_conn;

/// What kRestore did: keys added back, and the epoch now in force.
struct restored {
  int added = 0;
  std::string epoch;
};
/// The key set's marks, read in one command (MGET) by every node's poll.
struct marks {
  int64_t version = -1;  ///< -1: never set
  std::string epoch;     ///< empty: none (a Redis that lost its data, or a new cluster)
  int64_t resync = 0;    ///< bumped by each restore: every node pushes its usage again
};
/// A node's durable copy of what Redis told it (the data dir's cluster-copy.txt).
struct node_copy {
  std::string epoch;
  quota::store_contents contents;
};
/// The copy's text, and its parser (a copy of another prefix parses as empty).
std::string copy_text(const settings& s, std::string_view epoch, const quota::store_contents& c);
result<node_copy, std::string> parse_copy(const settings& s, std::string_view text);

class redis_keys final : public quota::key_backend {
 public:
  explicit redis_keys(settings s);
  ~redis_keys() override;

  result<quota::created_key, quota::store_error> create_key(std::string_view account,
                                                            std::string_view plan,
                                                            const quota::plan_map& plans,
                                                            int64_t now_unix) override;
  result<std::vector<quota::key_entry>, quota::store_error> list_keys() override;
  result<void, quota::store_error> revoke(std::string_view key_id) override;
  result<void, quota::store_error> suspend(std::string_view account) override;
  result<void, quota::store_error> resume(std::string_view account) override;
  result<quota::store_contents, quota::store_error> load() override;
  // The admin API's edits, each one script (so a node never loads half of one).
  result<void, quota::store_error> create_account(std::string_view account,
                                                  std::string_view customer) override;
  result<void, quota::store_error> set_plan(std::string_view key_id, std::string_view plan,
                                            const quota::plan_map& plans) override;
  result<quota::created_key, quota::store_error> rotate(std::string_view key_id, int64_t now_unix,
                                                        int64_t expires_unix) override;
  /// load() and the version it is of, read atomically (one script).
  result<quota::store_contents, quota::store_error> load_versioned(int64_t& version);
  /// The cluster's billed usage of each key in `ids` for `month`: every node's u: (billed calls)
  /// and o: (overage among them) summed, as the nodes last pushed them (within a sync interval
  /// of their journals). A key with no usage hash is left out.
  result<std::map<uint64_t, quota::usage_totals>, quota::store_error> month_usage(
      std::span<const uint64_t> ids, uint32_t month);
  /// The version counter alone (nodes poll it); -1 when never set.
  result<int64_t, quota::store_error> version();
  /// Adds keys and accounts that are not there yet, leaving existing ones as they are
  /// (`cluster import`). Returns how many keys were added.
  result<int, quota::store_error> import(const quota::store_contents& c);
  /// Puts a node's copy back (see kRestore in keys.cc): missing keys and accounts added, the
  /// copy's revocations applied, the epoch started if none, version and resync bumped.
  result<restored, quota::store_error> restore(const quota::store_contents& c);
  /// version, epoch and resync in one round trip.
  result<marks, quota::store_error> read_marks();
  redis_conn& conn() noexcept { return *conn_; }

 private:
  result<void, quota::store_error> ready();
  result<void, quota::store_error> set_account(std::string_view account, bool suspended);

  settings s_;
  std::unique_ptr<redis_conn> conn_;
};

}  // namespace tollgate::cluster
