// read_month_usage: the snapshot, then the journal bytes after it, as recovery.cc reads them.
#include "tollgate/quota/usage_read.h"

#include <dirent.h>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <vector>

#include "quota/journal.h"
#include "quota/service_impl.h"
#include "tollgate/quota/fs.h"

namespace tollgate::quota {

namespace {

struct snapshot_view {
  std::vector<std::pair<uint64_t, uint64_t>> covered;  // per core: generation, offset
  std::map<uint64_t, usage_totals> month;              // the asked month's lines
  bool has_month = false;
};

result<snapshot_view, std::string> read_usage_lines(const std::string& path, uint32_t month,
                                                    bool covered_lines) {
  snapshot_view v;
  bool missing = false;
  auto text = fs::read_file(path, &missing);
  if (!text) {
    return unexpected(text.error());
  }
  size_t pos = 0;
  int lineno = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) {
      nl = text->size();
    }
    const std::string line = text->substr(pos, nl - pos);
    pos = nl + 1;
    ++lineno;
    if (line.empty() || line[0] == '#' || line.rfind("tollgate-usage", 0) == 0 ||
        line.rfind("month ", 0) == 0) {
      continue;
    }
    unsigned long long a = 0, b = 0, c = 0;
    long long u = 0, o = 0;
    unsigned mm = 0;
    char idbuf[32];
    if (covered_lines && std::sscanf(line.c_str(), "covered %llu %llu %llu", &a, &b, &c) == 3) {
      if (a > 4096) {
        return unexpected(fmt::format("{}:{}: core {} out of range", path, lineno, a));
      }
      if (v.covered.size() <= a) {
        v.covered.resize(a + 1);
      }
      v.covered[a] = {b, c};
      continue;
    }
    long long first = 0, last = 0;  // absent from files written before they were kept
    const int n = std::sscanf(line.c_str(), "used %u %31s %lld %lld %lld %lld", &mm, idbuf, &u, &o,
                              &first, &last);
    if (n == 4 || n == 6) {
      if (auto id = parse_key_id(idbuf)) {
        if (mm == month) {
          v.has_month = true;
          v.month[*id].add(u, o, first, last);
        }
        continue;
      }
    }
    return unexpected(fmt::format("{}:{}: malformed usage line", path, lineno));
  }
  return v;
}

// One attempt; `stable` is false when the snapshot changed while the journals were read.
result<std::map<uint64_t, usage_totals>, std::string> read_once(const std::string& usage_dir,
                                                                uint32_t month, bool& stable) {
  const std::string snap_path = usage_dir + "/snapshot.txt";
  const fs::file_stamp before = fs::stamp(snap_path);
  auto snap = read_usage_lines(snap_path, month, true);
  if (!snap) {
    return unexpected(snap.error());
  }
  std::map<uint64_t, usage_totals> out = std::move(snap->month);
  if (!snap->has_month) {
    // A month the snapshot lacks (a data dir restored from parts): its closed-month archive.
    const std::string archive = usage_dir + "/month-" + month_label(month) + ".txt";
    if (fs::stamp(archive).ino != 0) {
      auto a = read_usage_lines(archive, month, false);
      if (!a) {
        return unexpected(a.error());
      }
      out = std::move(a->month);
    }
  }
  std::vector<std::pair<int, uint64_t>> files;
  if (DIR* d = ::opendir(usage_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      int core = 0;
      uint64_t gen = 0;
      if (parse_journal_name(e->d_name, core, gen)) {
        files.emplace_back(core, gen);
      }
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  for (auto [core, gen] : files) {
    const size_t c = static_cast<size_t>(core);
    uint64_t from = 0;
    if (c < snap->covered.size()) {
      if (gen < snap->covered[c].first) {
        continue;  // compacted into the snapshot
      }
      if (gen == snap->covered[c].first) {
        from = snap->covered[c].second;
      }
    }
    bool missing = false;
    auto data = fs::read_file(usage_dir + "/" + journal_name(core, gen), &missing);
    if (!data) {
      return unexpected(data.error());
    }
    if (missing) {
      stable = false;  // compacted meanwhile: a newer snapshot holds it
      return out;
    }
    journal::scan(*data, std::min<size_t>(from, data->size()), [&](const journal::record& r) {
      if (r.month == month) {
        out[r.key_id].add(r.count, r.has_overage ? r.overage : 0, r.time_s, r.time_s);
      }
    });
  }
  stable = fs::stamp(snap_path) == before;
  return out;
}

}  // namespace

result<std::map<uint64_t, usage_totals>, std::string> read_month_usage(const std::string& data_dir,
                                                                       uint32_t month) {
  const std::string usage_dir = data_dir + "/usage";
  for (int attempt = 0; attempt < 20; ++attempt) {
    bool stable = true;
    auto r = read_once(usage_dir, month, stable);
    if (!r || stable) {
      return r;
    }
  }
  return unexpected(
      fmt::format("{}: the usage snapshot kept changing while it was read (20 attempts); try again",
                  usage_dir));
}

result<uint32_t, std::string> parse_month(std::string_view s) {
  int y = 0, m = 0;
  auto bad = [&] {
    return unexpected(fmt::format("\"{}\" is not a month: expected YYYY-MM (e.g. 2026-11)", s));
  };
  if (s.size() != 7 || s[4] != '-') {
    return bad();
  }
  auto a = std::from_chars(s.data(), s.data() + 4, y);
  auto b = std::from_chars(s.data() + 5, s.data() + 7, m);
  if (a.ec != std::errc() || a.ptr != s.data() + 4 || b.ec != std::errc() ||
      b.ptr != s.data() + 7 || y < 1970 || m < 1 || m > 12) {
    return bad();
  }
  return static_cast<uint32_t>(y * 12 + m - 1);
}

}  // namespace tollgate::quota
