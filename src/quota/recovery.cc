// Persistence and recovery: the usage snapshot (with how much of each core's journal it
// covers), closed-month exports, journal compaction, and start-up = snapshot + the journal
// bytes after what it covers, exactly once.
#include <dirent.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "quota/journal.h"
#include "quota/service_impl.h"
#include "quota/state.h"
#include "tollgate/common/log.h"
#include "tollgate/quota/civil.h"
#include "tollgate/quota/fs.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

void service::persist(int64_t /*now_ns*/) {
  std::lock_guard pl(impl_->persist_mu);
  std::string snap = "tollgate-usage v1\n";
  std::vector<covered_pos> covered;
  std::vector<std::pair<uint32_t, std::string>> exports;
  {
    std::lock_guard g(impl_->mu);
    const uint32_t month = month_.load(std::memory_order_relaxed);
    snap += fmt::format("month {}\n", month);
    covered = impl_->covered;
    for (size_t c = 0; c < covered.size(); ++c) {
      snap += fmt::format("covered {} {} {}\n", c, covered[c].gen, covered[c].offset);
    }
    for (key_state* s : impl_->by_slot) {
      const int64_t used = s->used.load(std::memory_order_relaxed);
      const int64_t over = s->overage.load(std::memory_order_relaxed);
      if (used != 0 || over != 0) {
        snap += fmt::format("used {} {} {} {} {} {}\n", month, key_id_string(s->key_id), used, over,
                            s->first_s.load(std::memory_order_relaxed),
                            s->last_s.load(std::memory_order_relaxed));
      }
    }
    for (const auto& [m, keys] : impl_->closed) {
      for (const auto& [id, u] : keys) {
        snap += fmt::format("used {} {} {} {} {} {}\n", m, key_id_string(id), u.used, u.overage,
                            u.first_s, u.last_s);
      }
    }
    std::sort(impl_->closed_dirty.begin(), impl_->closed_dirty.end());
    impl_->closed_dirty.erase(std::unique(impl_->closed_dirty.begin(), impl_->closed_dirty.end()),
                              impl_->closed_dirty.end());
    for (uint32_t m : impl_->closed_dirty) {
      std::string e = fmt::format(
          "# tollgate usage for {} (closed month, UTC): used <month> <key_id> <billed> "
          "<overage> <first call> <last call> (unix seconds; 0: not recorded)\n",
          month_label(m));
      for (const auto& [id, u] : impl_->closed[m]) {
        e += fmt::format("used {} {} {} {} {} {}\n", m, key_id_string(id), u.used, u.overage,
                         u.first_s, u.last_s);
      }
      exports.emplace_back(m, std::move(e));
    }
    impl_->closed_dirty.clear();
  }
  auto r = fs::write_file_atomic(impl_->usage_dir + "/snapshot.txt", snap);
  if (!r) {
    // Journals stay until a snapshot covers them: nothing is lost, the data dir only grows.
    // Logged once per episode (this runs every reconcile_ms), counted for /metrics.
    snapshot_errors_.fetch_add(1, std::memory_order_relaxed);
    if (!impl_->persist_failing) {
      impl_->persist_failing = true;
      log_error("usage snapshot not written: {}; journals are kept until one is", r.error());
    }
    return;
  }
  if (impl_->persist_failing) {
    impl_->persist_failing = false;
    log_info("usage snapshot written again");
  }
  for (const auto& [m, text] : exports) {
    auto w = fs::write_file_atomic(impl_->usage_dir + "/month-" + month_label(m) + ".txt", text);
    if (!w) {
      log_error("closed-month usage not written: {}", w.error());
    }
  }
  // Compaction: journal generations wholly covered by the durable snapshot go.
  DIR* d = ::opendir(impl_->usage_dir.c_str());
  if (d == nullptr) {
    return;
  }
  while (dirent* e = ::readdir(d)) {
    int core;
    uint64_t gen;
    if (parse_journal_name(e->d_name, core, gen) && static_cast<size_t>(core) < covered.size() &&
        gen < covered[static_cast<size_t>(core)].gen) {
      ::unlink((impl_->usage_dir + "/" + e->d_name).c_str());
    }
  }
  ::closedir(d);
}

void service::close(int64_t now_ns) {
  for (auto& s : ledgers_) {
    s->reconcile(now_ns);
    if (s->journal_fd_ >= 0) {
      ::fdatasync(s->journal_fd_);
    }
  }
  persist(now_ns);
}

usage_totals service::usage(uint64_t key_id, uint32_t month) const {
  std::lock_guard g(impl_->mu);
  if (month == month_.load(std::memory_order_relaxed)) {
    auto it = impl_->states.find(key_id);
    if (it == impl_->states.end()) {
      return {};
    }
    return {it->second->used.load(std::memory_order_relaxed),
            it->second->overage.load(std::memory_order_relaxed),
            it->second->first_s.load(std::memory_order_relaxed),
            it->second->last_s.load(std::memory_order_relaxed)};
  }
  auto mit = impl_->closed.find(month);
  if (mit == impl_->closed.end()) {
    return {};
  }
  auto kit = mit->second.find(key_id);
  return kit == mit->second.end() ? usage_totals{} : kit->second;
}

// What start-up gathers before the keys are loaded (service::open's steps 1-3).
struct service::recovered {
  uint32_t month = 0;  // the month being counted
  std::string snap_path;
  bool missing = false;                                // no snapshot file
  bool snap_empty = false;                             // a snapshot of blanks only
  std::unordered_map<uint64_t, usage_totals> current;  // this month's usage per key
  std::vector<covered_pos> covered;                    // what the snapshot covers, per core
  std::vector<covered_pos> next;                       // each core's next journal generation
  std::unordered_set<uint64_t> overage_unrecorded;     // keys with current-month TGJ1 records

  void add(impl& im, uint32_t m, uint64_t id, int64_t used, int64_t over, int64_t first,
           int64_t last) {
    (m >= month ? current[id] : im.closed[m][id]).add(used, over, first, last);
  }
};

// Start-up in numbered steps (each a member below): 1. read the snapshot, 2. replay the journal
// bytes it does not cover, 3. restore usage into the key states and build the first table,
// 4. write a fresh snapshot and open each core's ledger and journal.
result<std::unique_ptr<service>, std::string> service::open(service_options opt, int64_t now_ns) {
  if (auto v = validate_plans(opt.plans); !v) {
    return unexpected(v.error());
  }
  if (opt.cores < 1 || opt.reconcile_ms < 1 || opt.fsync_ms < 1 || opt.reload_ms < 1 ||
      opt.max_lease < 1 || opt.journal_rotate_bytes < 1) {
    return unexpected(
        std::string("quota: cores, reconcile_ms, fsync_ms, reload_ms, max_lease "
                    "and journal_rotate_bytes must be positive"));
  }
  std::unique_ptr<service> svc(new service(std::move(opt)));
  impl& im = *svc->impl_;
  if (auto d = fs::ensure_dir(im.usage_dir); !d) {
    return unexpected(d.error());
  }
  const uint32_t month = month_index_of_ns(now_ns);
  svc->month_.store(month, std::memory_order_relaxed);

  recovered rc;
  rc.month = month;
  rc.snap_path = im.usage_dir + "/snapshot.txt";
  if (auto r = svc->read_snapshot(rc); !r) {
    return unexpected(r.error());
  }
  if (auto r = svc->replay_journals(rc); !r) {
    return unexpected(r.error());
  }
  if (auto r = svc->restore_usage(rc); !r) {
    return unexpected(r.error());
  }
  if (svc->recovery_.units_replayed > 0 || svc->recovery_.corrupt_records > 0) {
    log_info("usage recovered: {} journal file(s), {} record(s), {} billed call(s) replayed",
             svc->recovery_.journal_files, svc->recovery_.records_replayed,
             svc->recovery_.units_replayed);
  }
  svc->persist(now_ns);  // a fresh snapshot covering everything replayed; older journals go
  if (auto r = svc->open_ledgers(month, now_ns); !r) {
    return unexpected(r.error());
  }
  svc->next_reload_ns_.store(now_ns + svc->opt_.reload_ms * kNsPerMs);
  svc->next_persist_ns_.store(now_ns + svc->opt_.reconcile_ms * kNsPerMs);
  return svc;
}

result<void, std::string> service::read_snapshot(recovered& rc) {
  impl& im = *impl_;
  auto& covered = rc.covered;
  auto add_usage = [&](uint32_t m, uint64_t id, int64_t used, int64_t over, int64_t first,
                       int64_t last) { rc.add(im, m, id, used, over, first, last); };
  const std::string& snap_path = rc.snap_path;
  bool& missing = rc.missing;
  bool& snap_empty = rc.snap_empty;
  // 1. Snapshot: counters and how much of each core's journal they cover.
  auto snap = fs::read_file(snap_path, &missing);
  if (!snap) {
    return unexpected(snap.error());
  }
  // Empty: nothing but blanks (persist() always writes its header line).
  snap_empty = !missing && snap->find_first_not_of(" \t\r\n") == std::string::npos;
  if (!missing) {
    recovery_.snapshot_loaded = true;
    size_t pos = 0;
    int lineno = 0;
    while (pos < snap->size()) {
      size_t nl = snap->find('\n', pos);
      if (nl == std::string::npos) {
        nl = snap->size();
      }
      std::string line = snap->substr(pos, nl - pos);
      pos = nl + 1;
      ++lineno;
      char idbuf[32];
      unsigned long long a = 0, b = 0, c = 0;
      long long u = 0, o = 0;
      unsigned mm = 0;
      if (line.empty() || line.rfind("tollgate-usage", 0) == 0 || line.rfind("month ", 0) == 0) {
        continue;
      }
      if (std::sscanf(line.c_str(), "covered %llu %llu %llu", &a, &b, &c) == 3) {
        if (covered.size() <= a) {
          covered.resize(a + 1);
        }
        covered[a] = {b, c};
        continue;
      }
      long long first = 0, last = 0;  // absent from snapshots written before they were kept
      const int n = std::sscanf(line.c_str(), "used %u %31s %lld %lld %lld %lld", &mm, idbuf, &u,
                                &o, &first, &last);
      if (n == 4 || n == 6) {
        auto id = parse_key_id(idbuf);
        if (id) {
          add_usage(mm, *id, u, o, first, last);
          continue;
        }
      }
      return unexpected(fmt::format("{}:{}: malformed usage snapshot line", snap_path, lineno));
    }
  }

  return {};
}

namespace {
// Refuses a start whose snapshot is missing or empty while the journals (`files`: core and
// generation, sorted) show one was written, unless the loss is accepted.
result<void, std::string> refuse_lost_snapshot(const std::string& snap_path, bool missing,
                                               bool snap_empty,
                                               const std::vector<std::pair<int, uint64_t>>& files,
                                               bool accept_usage_loss) {
  // Generation 0 is every core's first journal; a later one exists only once a snapshot
  // covered the earlier ones (they were compacted into it). Without that snapshot, usage
  // would silently go back to what the remaining journals hold.
  auto compacted =
      std::find_if(files.begin(), files.end(), [](const auto& f) { return f.second > 0; });
  if ((missing || snap_empty) && compacted != files.end()) {
    const std::string what = fmt::format(
        "usage snapshot {} is {} but the usage journals show one was written ({} is "
        "generation {}: earlier journals were compacted into a snapshot)",
        snap_path, missing ? "missing" : "empty", journal_name(compacted->first, compacted->second),
        compacted->second);
    if (!accept_usage_loss) {
      return unexpected(fmt::format(
          "{}; starting would reset the usage it counted. Restore the snapshot from a backup, "
          "or start with --accept-usage-loss to count only what the remaining journals hold",
          what));
    }
    log_error("{}; --accept-usage-loss: counting only what the remaining journals hold", what);
  }
  return {};
}
}  // namespace

result<void, std::string> service::replay_journals(recovered& rc) {
  impl& im = *impl_;
  const uint32_t month = rc.month;
  auto& covered = rc.covered;
  auto add_usage = [&](uint32_t m, uint64_t id, int64_t used, int64_t over, int64_t time_s) {
    rc.add(im, m, id, used, over, time_s, time_s);
  };
  const std::string& snap_path = rc.snap_path;
  bool missing = rc.missing;
  const bool snap_empty = rc.snap_empty;
  auto& next = rc.next;
  auto& overage_unrecorded = rc.overage_unrecorded;
  // 2. Journals: replay what the snapshot does not cover; corrupt or torn bytes are skipped.
  next.resize(static_cast<size_t>(opt_.cores));
  for (size_t c = 0; c < covered.size() && c < next.size(); ++c) {
    next[c].gen = covered[c].gen + 1;
  }
  if (DIR* d = ::opendir(im.usage_dir.c_str())) {
    std::vector<std::pair<int, uint64_t>> files;
    while (dirent* e = ::readdir(d)) {
      int core;
      uint64_t gen;
      if (parse_journal_name(e->d_name, core, gen)) {
        files.emplace_back(core, gen);
      }
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
    if (auto r =
            refuse_lost_snapshot(snap_path, missing, snap_empty, files, opt_.accept_usage_loss);
        !r) {
      return r;
    }
    for (auto [core, gen] : files) {
      const size_t c = static_cast<size_t>(core);
      if (c >= next.size()) {
        next.resize(c + 1);
      }
      next[c].gen = std::max(next[c].gen, gen + 1);
      uint64_t from = 0;
      if (c < covered.size()) {
        if (gen < covered[c].gen) {
          continue;  // compacted into the snapshot already
        }
        if (gen == covered[c].gen) {
          from = covered[c].offset;
        }
      }
      const std::string path = im.usage_dir + "/" + journal_name(core, gen);
      auto data = fs::read_file(path, &missing);
      if (!data) {
        return unexpected(data.error());
      }
      ++recovery_.journal_files;
      auto st =
          journal::scan(*data, std::min<size_t>(from, data->size()), [&](const journal::record& r) {
            add_usage(r.month, r.key_id, r.count, r.overage, r.time_s);
            if (!r.has_overage && r.month >= month) {
              overage_unrecorded.insert(r.key_id);
            }
          });
      recovery_.records_replayed += st.records;
      recovery_.units_replayed += st.units;
      recovery_.corrupt_records += st.corrupt;
      recovery_.torn_bytes += st.torn_bytes;
      if (st.corrupt > 0 || st.torn_bytes > 0) {
        log_error(
            "usage journal {}: skipped {} corrupt stretch(es) ({} bytes) and a torn tail of "
            "{} bytes",
            path, st.corrupt, st.corrupt_bytes, st.torn_bytes);
      }
    }
  }
  // TGJ1 records (journals from before the overage field) do not say which of their units were
  // overage: for the keys they name, it is recomputed against the plan below.

  return {};
}

result<void, std::string> service::restore_usage(recovered& rc) {
  impl& im = *impl_;
  const uint32_t month = rc.month;
  const auto& current = rc.current;
  const auto& next = rc.next;
  const auto& overage_unrecorded = rc.overage_unrecorded;
  // 3. Keys and the first table; restored usage goes into the key states.
  for (const auto& [id, u] : current) {
    std::lock_guard g(im.mu);
    key_state* s = im.state_for_locked(id, 0, month);
    s->used.store(u.used, std::memory_order_relaxed);
    s->overage.store(u.overage, std::memory_order_relaxed);
    s->first_s.store(u.first_s, std::memory_order_relaxed);
    s->last_s.store(u.last_s, std::memory_order_relaxed);
  }
  if (!reload_if_changed(true) && current_.load() == nullptr) {
    return unexpected(fmt::format("cannot load keys from {}", opt_.data_dir));
  }
  {
    std::lock_guard g(im.mu);
    for (key_state* s : im.by_slot) {
      const int64_t used = s->used.load(std::memory_order_relaxed);
      s->pool.store(make_pool(month, im.cluster ? 0 : s->quota - used), std::memory_order_relaxed);
      if (overage_unrecorded.count(s->key_id) == 0) {
        continue;
      }
      // Units past the quota are overage (stop keys never get there). Exact unless the quota
      // changed since they were admitted, which is why records now carry the figure.
      const int64_t over = std::max<int64_t>(0, used - s->quota);
      if (over > s->overage.load(std::memory_order_relaxed)) {
        s->overage.store(over, std::memory_order_relaxed);
      }
    }
    im.covered = next;
    for (auto& c : im.covered) {
      c.offset = 0;
    }
  }
  return {};
}

result<void, std::string> service::open_ledgers(uint32_t month, int64_t now_ns) {
  impl& im = *impl_;
  // 4. (after a fresh snapshot) One ledger per core, each with its journal open.
  for (int i = 0; i < opt_.cores; ++i) {
    ledgers_.emplace_back(new core_ledger_impl(*this, i));
  }
  for (auto& s : ledgers_) {
    s->journal_gen_ = im.covered[static_cast<size_t>(s->index_)].gen;
    if (s->journal_fd_ >= 0) {
      ::close(s->journal_fd_);
      s->journal_fd_ = -1;
    }
    if (const int e = s->open_journal(); e != 0) {
      // A server that cannot record a billed call must not start answering (it would refuse
      // every one of them): refuse the start instead, as for a data dir another process holds.
      return unexpected(fmt::format(
          "cannot open usage journal {}/{}: {} (errno {}); the data dir must be writable",
          im.usage_dir, journal_name(s->index_, s->journal_gen_), std::strerror(e), e));
    }
    s->month_ = month;
    s->month_end_ns_ = month_end_secs(month) * kNsPerSec;
    s->last_reconcile_ns_ = now_ns;
    s->last_fsync_ns_ = now_ns;
  }
  return {};
}

}  // namespace tollgate::quota
