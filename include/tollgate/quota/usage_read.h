// Reading a month's billed usage from a data dir without opening it as a server: what
// `tollgate usage export` prints. The figures are exactly what start-up would recover (design
// §6, "Recovery counts each billed call exactly once"): the usage snapshot's counters, plus the
// journal bytes after what the snapshot covers; for a month the snapshot does not hold, the
// closed month's archive (usage/month-YYYY-MM.txt) the server wrote at the rollover.
//
// Safe beside a running server: it only reads, and when the server wrote a new snapshot (and
// compacted journals) while the files were read, the read starts over.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tollgate/common/result.h"
#include "tollgate/quota/service.h"

namespace tollgate::quota {

/// Billed calls and overage per key id in month `month` (year * 12 + month - 1), from
/// `data_dir`'s usage directory. Keys with no usage are absent. An unreadable or malformed
/// snapshot is an error naming the file and line. Journal records written before the overage
/// field (TGJ1) count as used with no overage (the server recomputes that at start-up).
result<std::map<uint64_t, usage_totals>, std::string> read_month_usage(const std::string& data_dir,
                                                                       uint32_t month);

/// "YYYY-MM" as a month index; an error naming the rule otherwise.
result<uint32_t, std::string> parse_month(std::string_view s);

}  // namespace tollgate::quota
