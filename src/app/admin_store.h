// The admin API's durable memories, in the data dir (admin_api.h's file comment has their
// formats): the audit log, the answers kept for an Idempotency-Key and the Stripe event ids
// acted on. Each is appended with fdatasync before the answer and compacted (rewritten without
// entries older than a day) when the store is opened.
//
// Not thread-safe: admin_api's mutex serialises every use but audit(), which only appends.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>

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

  /// The answer kept for `lookup`, or null when there is none from the last day.
  const idem_entry* find_answer(const std::string& lookup, int64_t now) const;
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
  std::string data_dir_;
  std::unordered_map<std::string, idem_entry> idem_;
  std::unordered_map<std::string, int64_t> events_;  // evt id → when first seen
};

}  // namespace tollgate::app
