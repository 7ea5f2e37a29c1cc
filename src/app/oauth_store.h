// The OAuth grants tollgate has made (README "Connect claude.ai, ChatGPT or any OAuth client";
// docs/design.md "OAuth: a token is its key"): registered clients, grants (a key lent to a
// client), and their access and refresh tokens, stored only as SHA-256 digests.
//
// A log of events, one line each:
//   client  <client_id> <created> =<name> =<redirect_uri>...   (=: percent-encoded text follows)
//   grant   <grant_id> <key_id> <client_id> <created> =<scope>
//   access  <sha256-hex> <grant_id> <expires>
//   refresh <sha256-hex> <grant_id> <expires>
//   spent   <sha256-hex>        a refresh token used once: using it again revokes its grant
//   revoke  <grant_id>          by POST /revoke, refresh reuse, or `tollgate oauth revoke`
//
// Single node: the log is <data>/oauth.log, appended with fdatasync before the answer that
// depends on it, compacted (rewritten without dead entries) when the store is opened.
// Authorization codes live in memory only (<= 60 s, single use): a restart forgets them, so a
// code redeemed before a restart or a kill -9 never works after it either.
//
// Cluster mode (use_redis): the log is the Redis list P{oauth}:log, its generation P{oauth}:gen
// (a random id: a Redis that lost its data lacks it, and a compaction changes it). Every node
// reads the lines it has not seen yet at each poll (4 a second), so a token issued or revoked on
// one node is in force on every node within a second. Codes are P{oauth}:code:DIGEST (taken
// with one script: redeemable once across the cluster); a refresh token's single use is
// P{oauth}:spent:DIGEST, set only if absent. The data dir's oauth.log is then this node's copy
// of the list: after an empty restart of Redis, the first node to notice puts its copy back.
//
// Every live access token is also pushed into the quota service's lookup table as an alias of
// its key (service::set_token_aliases), which is how the hot path knows it: this class is never
// on the request path of /mcp or REST.
//
// Threads: the methods that change grants, and poll(), are called by one thread at a time (the
// server's worker, oauth.h; or the CLI). They do their I/O (a file append with fdatasync, a Redis
// round trip) without holding the mutex; readers (find_client, on the cores) take it only to copy
// an entry.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tollgate/common/result.h"

namespace tollgate::quota {
class service;
}
namespace tollgate::cluster {
struct settings;
class redis_conn;
}  // namespace tollgate::cluster

namespace tollgate::app::oauth {

struct client {
  std::string id;
  std::string name;
  std::vector<std::string> redirect_uris;
  int64_t created = 0;
};

struct grant {
  std::string id;
  uint64_t key_id = 0;
  std::string client_id;
  int64_t created = 0;
  std::string scope;
  bool revoked = false;
};

/// What an authorization code stands for (RFC 6749 §4.1.2, bound as OAuth 2.1 asks).
struct code_data {
  std::string client_id;
  std::string redirect_uri;
  std::string challenge;  ///< PKCE S256 code_challenge
  std::string resource;   ///< RFC 8707 (empty: none asked)
  std::string scope;
  uint64_t key_id = 0;
  int64_t expires = 0;
};

/// A token response's secrets (shown once).
struct issued {
  std::string access;
  std::string refresh;
  int64_t expires_in = 0;
  std::string scope;
};

/// A grant as `tollgate oauth list` shows it.
struct grant_view {
  grant g;
  std::string client_name;
  size_t live_access = 0;
  bool live_refresh = false;
};

class store {
 public:
  /// `svc` receives the live access tokens (null: the CLI, which only reads and revokes).
  store(std::string data_dir, quota::service* svc, int64_t access_secs, int64_t refresh_secs);
  ~store();
  store(const store&) = delete;
  store& operator=(const store&) = delete;

  /// Cluster mode: the log and the codes live in Redis (see above). Call before open().
  /// `keep_copy`: this node keeps oauth.log as its copy of the Redis log (false: the CLI).
  void use_redis(const cluster::settings& s, int timeout_ms, bool keep_copy = true);
  bool clustered() const noexcept { return redis_ != nullptr; }

  /// Loads oauth.log (compacting it when `compact`), in cluster mode then the Redis log, and
  /// pushes the live tokens. The error names the file and line, or Redis.
  result<void, std::string> open(int64_t now, bool compact);
  /// Takes in what others appended: the file re-read if another process (the CLI) appended to
  /// it; in cluster mode the Redis log's new lines (or all of it after a compaction, or this
  /// node's copy put back into an empty Redis). False when Redis could not be read.
  bool poll(int64_t now);

  result<client, std::string> register_client(std::string name, std::vector<std::string> uris,
                                              int64_t now);
  std::optional<client> find_client(std::string_view id) const;

  /// A fresh code for `d` (memory, or Redis in cluster mode); empty when it could not be kept.
  std::string issue_code(code_data d);
  /// The code's data, removing it (single use); nullopt when unknown, used or expired.
  std::optional<code_data> take_code(std::string_view code, int64_t now);

  /// A new grant of key `key_id` to `client_id` and its first tokens (durable before it returns).
  result<issued, std::string> new_grant(uint64_t key_id, std::string_view client_id,
                                        std::string_view scope, int64_t now);
  enum class refresh_error { none, invalid, reused, io };
  /// Rotates refresh token `token` of `client_id`. A spent token revokes its grant (`reused`).
  /// `key_live(key_id)` false (a revoked key) refuses it too.
  result<issued, refresh_error> refresh(std::string_view token, std::string_view client_id,
                                        int64_t now, const std::function<bool(uint64_t)>& key_live);
  /// RFC 7009: revokes the grant of an access or refresh token of `client_id`; an unknown
  /// token is no error. False only when the record could not be written.
  bool revoke_token(std::string_view token, std::string_view client_id, int64_t now);

  /// Grants, newest last (`key_id` 0: all).
  std::vector<grant_view> list(uint64_t key_id, int64_t now) const;
  /// Revokes grant `grant_id`, or every grant of `key_id`, or of `client_id` (the others empty
  /// or 0). The number revoked, or why not.
  result<size_t, std::string> revoke(std::string_view grant_id, uint64_t key_id,
                                     std::string_view client_id, int64_t now);

  std::string path() const { return dir_ + "/oauth.log"; }
  /// Cluster mode: the consent forms' key every node shares (P{oauth}:form-key, made by the
  /// first node); empty until Redis was read, and in single-node mode.
  std::string form_key() const;

 private:
  struct token {
    std::string grant_id;
    int64_t expires = 0;
    bool spent = false;
  };
  /// Reads the log file and puts it in force (compacting it first when `compact`, or when its
  /// last line is torn); the file's I/O is done without the mutex.
  result<void, std::string> load(int64_t now, bool compact);
  /// Replaces the tables with those of `text`'s whole lines (`end`: the bytes read); on a line
  /// that does not read, the tables are left as they were.
  result<void, std::string> replace_locked(std::string_view text, size_t& end);
  result<void, std::string> apply(std::string_view line);
  void apply_all_locked(std::string_view lines);
  /// The live part of the log (what compaction keeps).
  std::string compacted_locked(int64_t now) const;
  void clear_locked();
  /// Appends `lines` to the log (file or Redis), then applies them and pushes the tokens.
  bool append(const std::string& lines, int64_t now);
  bool append_file(const std::string& lines);
  result<issued, std::string> mint(const std::string& grant_id, std::string& lines, int64_t now);
  /// Puts the live access tokens in force (outside the mutex: the service may read files).
  void push(int64_t now);
  void revoke_locked(const std::string& grant_id, std::string& lines) const;
  // Cluster mode (oauth_store_redis.cc).
  bool redis_ready();
  bool redis_append(const std::string& lines);
  /// Reads the Redis log's new lines (`changed` set when any were applied); false when Redis
  /// could not be read.
  bool redis_sync(int64_t now, bool* changed = nullptr);
  /// Cluster mode: whether token digest `h` is known, after reading the log's newest lines if
  /// it was not (a token issued on another node a moment ago).
  bool knows_token(const std::string& h, int64_t now);
  std::string redis_key(std::string_view what) const;

  std::string dir_;
  quota::service* svc_;
  int64_t access_secs_;
  int64_t refresh_secs_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, client> clients_;
  std::unordered_map<std::string, grant> grants_;
  std::vector<std::string> grant_order_;
  std::unordered_map<std::string, token> access_;   // digest hex → token
  std::unordered_map<std::string, token> refresh_;  // digest hex → token
  std::unordered_map<std::string, code_data> codes_;
  uint64_t expected_size_ = 0;  // the file's size after this process's last read or append
  uint64_t expected_ino_ = 0;
  // Cluster mode.
  std::unique_ptr<cluster::redis_conn> redis_;
  std::string prefix_;
  std::string gen_;             // the generation of the Redis log read so far (empty: none)
  int64_t offset_ = 0;          // lines of it applied
  bool reread_ = false;         // read the log whole at the next sync
  bool redis_failing_ = false;  // logged once until it answers again
  bool keep_copy_ = true;
  std::string form_key_;  // guarded by mu_
};

}  // namespace tollgate::app::oauth
