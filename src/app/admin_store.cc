#include "admin_store.h"

#include <fmt/format.h>

#include <cstdio>

#include "admin_util.h"
#include "tollgate/cluster/redis.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/fs.h"

namespace tollgate::app {

admin_store::admin_store(std::string data_dir, int64_t now) : data_dir_(std::move(data_dir)) {
  // Load and compact the durable memories (entries older than a day go).
  bool missing = false;
  if (auto f = quota::fs::read_file(data_dir_ + "/admin-idempotency.txt", &missing); f) {
    std::string kept;
    size_t pos = 0;
    while (pos < f->size()) {
      size_t nl = f->find('\n', pos);
      if (nl == std::string::npos) {
        break;  // a torn last line: its request was not answered
      }
      const std::string line = f->substr(pos, nl - pos);
      pos = nl + 1;
      char lookup[65], fp[65];
      long long at = 0;
      int status = 0;
      int off = 0;
      if (std::sscanf(line.c_str(), "idem %lld %64s %64s %d %n", &at, lookup, fp, &status, &off) ==
              4 &&
          off > 0 && now - at < kRememberSecs) {
        idem_[lookup] = {at, fp, status, line.substr(static_cast<size_t>(off))};
        kept += line + "\n";
      }
    }
    if (!missing) {
      (void)quota::fs::write_file_atomic(data_dir_ + "/admin-idempotency.txt", kept);
    }
  }
  if (auto f = quota::fs::read_file(data_dir_ + "/stripe-events.txt", &missing); f) {
    std::string kept;
    size_t pos = 0;
    while (pos < f->size()) {
      size_t nl = f->find('\n', pos);
      if (nl == std::string::npos) {
        break;
      }
      const std::string line = f->substr(pos, nl - pos);
      pos = nl + 1;
      char id[256];
      long long at = 0;
      if (std::sscanf(line.c_str(), "event %lld %255s", &at, id) == 2 && now - at < kRememberSecs) {
        events_[id] = at;
        kept += line + "\n";
      }
    }
    if (!missing) {
      (void)quota::fs::write_file_atomic(data_dir_ + "/stripe-events.txt", kept);
    }
  }
}

admin_store::~admin_store() = default;

void admin_store::use_redis(cluster::settings s) {
  cluster_ = std::move(s);
  auto a = cluster::parse_redis_address(cluster_.redis);
  redis_ = std::make_unique<cluster::redis_conn>(a ? *a : cluster::redis_address{},
                                                 cluster_.password, cluster_.timeout_ms);
}

bool admin_store::redis_command(const std::vector<std::string>& argv, std::string* str_out) {
  if (!redis_->connected()) {
    if (auto c = redis_->connect(); !c) {
      log_error("admin API: Redis {} not reachable: {}", cluster_.redis, c.error().message);
      return false;
    }
  }
  auto r = redis_->command(argv);
  if (!r) {
    log_error("admin API: Redis {} {}: {}", argv[0], cluster_.redis, r.error().message);
    return false;
  }
  if (str_out != nullptr) {
    *str_out = r->t == cluster::redis_reply::type::nil ? std::string() : r->str;
  }
  return true;
}

const admin_store::idem_entry* admin_store::find_answer(const std::string& lookup, int64_t now) {
  if (redis_) {
    std::string v;
    if (!redis_command({"GET", cluster_.prefix + "{admin}:idem:" + lookup}, &v) || v.empty()) {
      return nullptr;
    }
    char fp[65];
    long long at = 0;
    int status = 0;
    int off = 0;
    if (std::sscanf(v.c_str(), "%lld %64s %d %n", &at, fp, &status, &off) != 3 || off <= 0) {
      log_error("admin API: malformed idempotency record in Redis for {}", lookup);
      return nullptr;
    }
    found_ = {at, fp, status, v.substr(static_cast<size_t>(off))};
    return &found_;
  }
  if (auto it = idem_.find(lookup); it != idem_.end() && now - it->second.at < kRememberSecs) {
    return &it->second;
  }
  return nullptr;
}

void admin_store::remember_answer(const std::string& lookup, idem_entry e, int64_t now) {
  if (redis_) {
    if (!redis_command({"SET", cluster_.prefix + "{admin}:idem:" + lookup,
                        fmt::format("{} {} {} {}", now, e.fingerprint, e.status, e.sealed), "EX",
                        std::to_string(kRememberSecs)},
                       nullptr)) {
      log_error("admin API: idempotency record not kept in Redis; a retry may repeat the change");
    }
    return;
  }
  const std::string line =
      fmt::format("idem {} {} {} {} {}\n", now, lookup, e.fingerprint, e.status, e.sealed);
  if (auto r = quota::fs::append_durable(data_dir_ + "/admin-idempotency.txt", line); !r) {
    // The change itself is durable; only a retry's replay is at risk. Said in the log.
    log_error("admin API: idempotency record not written ({}); a retry may repeat the change",
              r.error());
  }
  if (idem_.size() > 100000) {  // answers older than a day are forgotten
    std::erase_if(idem_, [&](const auto& x) { return now - x.second.at >= kRememberSecs; });
  }
  idem_[lookup] = std::move(e);
}

bool admin_store::seen_event(std::string_view id, int64_t now) {
  if (redis_) {
    std::string v;
    return redis_command({"GET", cluster_.prefix + "{admin}:event:" + std::string(id)}, &v) &&
           !v.empty();
  }
  if (events_.size() > 100000) {  // ids older than a day are forgotten
    std::erase_if(events_, [&](const auto& e) { return now - e.second >= kRememberSecs; });
  }
  auto it = events_.find(std::string(id));
  return it != events_.end() && now - it->second < kRememberSecs;
}

void admin_store::remember_event(std::string_view id, int64_t now) {
  if (redis_) {
    if (!redis_command({"SET", cluster_.prefix + "{admin}:event:" + std::string(id),
                        std::to_string(now), "EX", std::to_string(kRememberSecs)},
                       nullptr)) {
      log_error("stripe webhook: event id not recorded in Redis; a redelivery is applied again");
    }
    return;
  }
  if (auto r = quota::fs::append_durable(data_dir_ + "/stripe-events.txt",
                                         fmt::format("event {} {}\n", now, id));
      !r) {
    log_error("stripe webhook: event id not recorded ({}); a redelivery is applied again",
              r.error());
  }
  events_[std::string(id)] = now;
}

void admin_store::audit(int64_t now, std::string_view who, std::string_view action,
                        std::string_view target, int status) const {
  const std::string line =
      fmt::format(R"({{"time":"{}","who":{},"action":{},"target":{},"status":{}}})",
                  admin::utc(now), admin::js(who), admin::js(action), admin::js(target), status) +
      "\n";
  if (auto d = quota::fs::ensure_dir(data_dir_); !d) {
    log_error("admin audit: {}", d.error());
    return;
  }
  if (auto r = quota::fs::append_durable(data_dir_ + "/admin-audit.log", line); !r) {
    log_error("admin audit: {}", r.error());
  }
}

}  // namespace tollgate::app
