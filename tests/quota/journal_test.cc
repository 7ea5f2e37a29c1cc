#include "quota/journal.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>
#include <vector>

#include "quota/test_util.h"
#include "support/alloc_counter.h"
#include "tollgate/quota/usage_read.h"

namespace tollgate::quota {
namespace {

using test::kSec;
using test::temp_dir;
using test::utc_ns;

const int64_t kNow = utc_ns(2026, 12, 2, 12, 0, 0);

std::string encode_all(const std::vector<journal::record>& rs) {
  std::string s(rs.size() * journal::kRecordSize, '\0');
  for (size_t i = 0; i < rs.size(); ++i) {
    journal::encode(s.data() + i * journal::kRecordSize, rs[i]);
  }
  return s;
}

std::vector<std::string> journal_files(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir((dir + "/usage").c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("journal-", 0) == 0) {
        out.push_back(dir + "/usage/" + n);
      }
    }
    closedir(d);
  }
  return out;
}

TEST(journal_test, record_round_trips_and_crc_catches_a_flipped_bit) {
  // Verifies encode/decode agree and any single flipped bit fails the CRC or magic.
  journal::record r{2026 * 12 + 11, 0x1234567890abcdefULL, 7, 3};
  char buf[journal::kRecordSize];
  journal::encode(buf, r);
  journal::record back;
  ASSERT_TRUE(journal::decode(buf, sizeof buf, back));
  EXPECT_EQ(back.month, r.month);
  EXPECT_EQ(back.key_id, r.key_id);
  EXPECT_EQ(back.count, r.count);
  EXPECT_EQ(back.overage, 3u);
  EXPECT_TRUE(back.has_overage);
  for (size_t bit = 0; bit < journal::kRecordSize * 8; ++bit) {
    char copy[journal::kRecordSize];
    std::memcpy(copy, buf, sizeof copy);
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(journal::decode(copy, sizeof copy, back)) << bit;
  }
  EXPECT_FALSE(journal::decode(buf, journal::kRecordSize - 1, back));  // too few bytes
}

TEST(journal_test, v1_records_decode_without_an_overage_figure) {
  // Verifies a TGJ1 record (journals written before the overage field) still decodes, says it
  // has no overage figure, and is as well protected by its CRC.
  journal::record r{2026 * 12 + 11, 42, 9, 9};
  char buf[journal::kRecordSizeV1];
  journal::encode_v1(buf, r);
  journal::record back;
  ASSERT_TRUE(journal::decode(buf, sizeof buf, back));
  EXPECT_EQ(back.key_id, 42u);
  EXPECT_EQ(back.count, 9u);
  EXPECT_FALSE(back.has_overage);
  EXPECT_EQ(back.overage, 0u);
  for (size_t bit = 0; bit < journal::kRecordSizeV1 * 8; ++bit) {
    char copy[journal::kRecordSizeV1];
    std::memcpy(copy, buf, sizeof copy);
    copy[bit / 8] = static_cast<char>(copy[bit / 8] ^ (1 << (bit % 8)));
    EXPECT_FALSE(journal::decode(copy, sizeof copy, back)) << bit;
  }
}

TEST(journal_test, scan_reads_a_file_mixing_both_formats_and_a_torn_v2_tail) {
  // Verifies a journal continued after an upgrade (TGJ1 records, then TGJ2) replays every
  // record, and a TGJ2 record cut short is a torn tail even though 24 of its bytes are there.
  std::string data(journal::kRecordSizeV1, '\0');
  journal::encode_v1(data.data(), {1, 1, 2, 0});
  data += encode_all({{1, 2, 3, 1}, {1, 3, 4, 4}});
  std::string torn(journal::kRecordSize, '\0');
  journal::encode(torn.data(), {1, 4, 5, 0});
  data += torn.substr(0, journal::kRecordSize - 3);
  std::vector<journal::record> seen;
  auto st = journal::scan(data, 0, [&](const journal::record& r) { seen.push_back(r); });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen[0].has_overage);
  EXPECT_EQ(seen[1].overage, 1u);
  EXPECT_EQ(seen[2].overage, 4u);
  EXPECT_EQ(st.units, 9u);
  EXPECT_EQ(st.torn_bytes, journal::kRecordSize - 3);
  EXPECT_EQ(st.corrupt, 0u);
}

TEST(journal_test, crc32_matches_the_standard_check_value) {
  // Verifies CRC-32/IEEE of "123456789" is 0xCBF43926.
  EXPECT_EQ(journal::crc32("123456789", 9), 0xCBF43926u);
}

TEST(journal_test, scan_reports_a_torn_tail_and_keeps_whole_records) {
  // Verifies a partial record at the end is counted as torn and the whole ones replay.
  std::string data = encode_all({{1, 1, 2}, {1, 2, 3}});
  data.append("\x54\x47\x4a", 3);
  uint64_t units = 0;
  auto st = journal::scan(data, 0, [&](const journal::record& r) { units += r.count; });
  EXPECT_EQ(units, 5u);
  EXPECT_EQ(st.records, 2u);
  EXPECT_EQ(st.torn_bytes, 3u);
  EXPECT_EQ(st.corrupt, 0u);
}

TEST(journal_test, scan_skips_a_corrupt_record_and_resynchronises) {
  // Verifies a damaged record in the middle (and stray bytes) is skipped and later records
  // still replay.
  std::string data = encode_all({{1, 1, 1}, {1, 2, 10}, {1, 3, 100}});
  data[journal::kRecordSize + 10] ^= 0x40;           // damage record 2
  data.insert(2 * journal::kRecordSize, "garbage");  // stray bytes before record 3
  uint64_t units = 0;
  auto st = journal::scan(data, 0, [&](const journal::record& r) { units += r.count; });
  EXPECT_EQ(units, 101u);
  EXPECT_EQ(st.corrupt, 1u);
  EXPECT_EQ(st.torn_bytes, 0u);
}

TEST(journal_test, flush_writes_coalesced_records_before_send) {
  // Verifies settle(success) buffers a record and before_send writes it to the core's journal.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "free");
  auto svc = test::open_service(test::options(d.path()), kNow);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures f;
  ticket t;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
    s.settle(t, true);
  }
  EXPECT_EQ(s.pending_journal().size(), journal::kRecordSize);  // coalesced
  s.before_send(kNow);
  EXPECT_TRUE(s.pending_journal().empty());
  auto files = journal_files(d.path());
  ASSERT_EQ(files.size(), 1u);
  std::ifstream in(files[0], std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t units = 0;
  journal::scan(data, 0, [&](const journal::record& rec) {
    EXPECT_EQ(rec.key_id, r->key_id);
    units += rec.count;
  });
  EXPECT_EQ(units, 3u);
}

TEST(journal_test, crash_without_snapshot_recovers_every_answered_call) {
  // Verifies a "kill -9" after journals were flushed but before any reconciliation or snapshot
  // loses nothing: recovery counts every billed call whose record was written.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  uint64_t key_id = 0;
  {
    auto o = test::options(d.path(), 2);
    auto svc = test::open_service(o, kNow);
    for (int c = 0; c < 2; ++c) {
      core_ledger& s = svc->ledger(c);
      const key_record* r = s.authenticate(k.secret);
      key_id = r->key_id;
      for (int i = 0; i < 500; ++i) {
        figures f;
        ticket t;
        ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
        s.settle(t, i % 5 != 0);  // every 5th call fails: not billed
        if (i % 7 == 0) {
          s.before_send(kNow);
        }
      }
      s.before_send(kNow);
    }
    // The service is dropped without close(): no reconcile, no snapshot (a crash).
  }
  auto svc = test::open_service(test::options(d.path(), 2), kNow + kSec);
  EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 800);
  EXPECT_EQ(svc->recovery().units_replayed, 800u);
}

TEST(journal_test, records_carry_their_pass_time_and_older_formats_decode_without_one) {
  // Verifies a TGJ3 record keeps the time of its pass, a TGJ2 record (journals from before the
  // time field) decodes with its overage and no time, and one file may hold all three formats.
  journal::record r{2026 * 12 + 11, 42, 5, 2, 1796212800};
  char v3[journal::kRecordSize];
  journal::encode(v3, r);
  journal::record back;
  ASSERT_TRUE(journal::decode(v3, sizeof v3, back));
  EXPECT_EQ(back.time_s, 1796212800u);
  EXPECT_EQ(back.overage, 2u);
  char v2[journal::kRecordSizeV2];
  journal::encode_v2(v2, r);
  ASSERT_TRUE(journal::decode(v2, sizeof v2, back));
  EXPECT_EQ(back.count, 5u);
  EXPECT_EQ(back.overage, 2u);
  EXPECT_TRUE(back.has_overage);
  EXPECT_EQ(back.time_s, 0u);
  v2[21] = static_cast<char>(v2[21] ^ 1);
  EXPECT_FALSE(journal::decode(v2, sizeof v2, back));  // its CRC covers 24 bytes
  v2[21] = static_cast<char>(v2[21] ^ 1);
  char v1[journal::kRecordSizeV1];
  journal::encode_v1(v1, r);
  const std::string mixed =
      std::string(v1, sizeof v1) + std::string(v2, sizeof v2) + std::string(v3, sizeof v3);
  std::vector<journal::record> seen;
  const journal::scan_stats st =
      journal::scan(mixed, 0, [&](const journal::record& x) { seen.push_back(x); });
  EXPECT_EQ(st.corrupt, 0u);
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_FALSE(seen[0].has_overage);
  EXPECT_EQ(seen[1].time_s, 0u);
  EXPECT_EQ(seen[2].time_s, 1796212800u);
}

TEST(journal_test, first_and_last_billed_call_survive_a_snapshot_and_a_crash) {
  // Verifies the usage export's first and last call: each billed call is dated by its pass, the
  // reconciled figures carry the earliest and latest, a snapshot keeps them across a clean
  // restart, and a crash (journals only) recovers them from the records.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  const int64_t t1 = kNow + 5 * kSec;
  const int64_t t2 = kNow + 65 * kSec;
  const uint32_t month = month_index_of_ns(kNow);
  uint64_t key_id = 0;
  auto bill_at = [&](core_ledger& s, int64_t at, int calls) {
    s.on_tick(at);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    for (int i = 0; i < calls; ++i) {
      figures f;
      ticket t;
      ASSERT_EQ(s.admit(*r, at, f, t), admit_verdict::ok);
      s.settle(t, true);
    }
    s.before_send(at);
  };
  {
    auto svc = test::open_service(test::options(d.path()), kNow);
    bill_at(svc->ledger(0), t1, 3);
    bill_at(svc->ledger(0), t2, 2);
    svc->ledger(0).reconcile(t2);
    const usage_totals u = svc->usage(key_id, month);
    EXPECT_EQ(u.used, 5);
    EXPECT_EQ(u.first_s, t1 / kSec);
    EXPECT_EQ(u.last_s, t2 / kSec);
    svc->close(t2);  // a snapshot covers them all
  }
  {
    auto svc = test::open_service(test::options(d.path()), t2 + kSec);
    const usage_totals u = svc->usage(key_id, month);
    EXPECT_EQ(u.used, 5);
    EXPECT_EQ(u.first_s, t1 / kSec);
    EXPECT_EQ(u.last_s, t2 / kSec);
    bill_at(svc->ledger(0), t2 + 60 * kSec, 1);
    // Dropped without close(): no reconcile, no snapshot (a crash); the record holds the call.
  }
  auto svc = test::open_service(test::options(d.path()), t2 + 120 * kSec);
  const usage_totals u = svc->usage(key_id, month);
  EXPECT_EQ(u.used, 6);
  EXPECT_EQ(u.first_s, t1 / kSec);
  EXPECT_EQ(u.last_s, (t2 + 60 * kSec) / kSec);
  auto read = read_month_usage(d.path(), month);
  ASSERT_TRUE(read) << read.error();
  EXPECT_EQ((*read)[key_id].first_s, t1 / kSec);
  EXPECT_EQ((*read)[key_id].last_s, (t2 + 60 * kSec) / kSec);
}

// Runs `calls` billed successes of a new "pro" key (bill overage) whose plan has `quota`, then
// drops the service without reconcile or snapshot (a crash), and restarts with the plan's quota
// at `quota_after`. Returns the restarted service's figures for the key.
usage_totals overage_after_crash(int64_t quota, int calls, int64_t quota_after,
                                 bool rewrite_as_v1 = false) {
  temp_dir d;
  auto plans_with = [](int64_t q) {
    plan_map m = test::default_plans();
    m["pro"].monthly_quota = q;
    return m;
  };
  auto k = test::add_key(d.path(), "a", "pro", plans_with(quota));
  uint64_t key_id = 0;
  {
    auto o = test::options(d.path());
    o.plans = plans_with(quota);
    auto svc = test::open_service(o, kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    figures f;
    ticket t;
    for (int i = 0; i < calls; ++i) {
      EXPECT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
      s.settle(t, true);
      s.before_send(kNow);
    }
  }
  if (rewrite_as_v1) {  // as a build from before the overage field would have written it
    for (const std::string& path : journal_files(d.path())) {
      std::ifstream in(path, std::ios::binary);
      std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      std::string v1;
      journal::scan(data, 0, [&](const journal::record& rec) {
        char buf[journal::kRecordSizeV1];
        journal::encode_v1(buf, rec);
        v1.append(buf, sizeof buf);
      });
      std::ofstream(path, std::ios::binary | std::ios::trunc) << v1;
    }
  }
  auto o = test::options(d.path());
  o.plans = plans_with(quota_after);
  auto svc = test::open_service(o, kNow + kSec);
  return svc->usage(key_id, month_index_of_ns(kNow));
}

TEST(journal_test, overage_survives_a_crash_as_billed_when_the_quota_changes_before_restart) {
  // Verifies overage recovered from the journal is what was billed at admission, not a
  // recomputation against the plan in force at restart: calls past a quota of 100 stay
  // overage after the quota is raised to 1000, and calls within a quota of 1000 do not become
  // overage when it is cut to 100.
  const usage_totals raised = overage_after_crash(100, 150, 1000);
  EXPECT_EQ(raised.used, 150);
  EXPECT_EQ(raised.overage, 50);
  const usage_totals cut = overage_after_crash(1000, 150, 100);
  EXPECT_EQ(cut.used, 150);
  EXPECT_EQ(cut.overage, 0);
  const usage_totals same = overage_after_crash(100, 150, 100);
  EXPECT_EQ(same.overage, 50);
}

TEST(journal_test, v1_journals_still_replay_with_overage_recomputed_against_the_plan) {
  // Verifies journals from before the overage field replay every call, and their overage is
  // recomputed against the plan at restart (all such records can tell).
  const usage_totals v1 = overage_after_crash(100, 150, 100, true);
  EXPECT_EQ(v1.used, 150);
  EXPECT_EQ(v1.overage, 50);
  const usage_totals v1_raised = overage_after_crash(100, 150, 1000, true);
  EXPECT_EQ(v1_raised.used, 150);
  EXPECT_EQ(v1_raised.overage, 0);
}

TEST(journal_test, snapshot_plus_journal_tail_counts_each_call_once) {
  // Verifies calls before a reconcile+snapshot and calls after it are each counted exactly
  // once after a crash (covered journal bytes are not replayed twice).
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  uint64_t key_id = 0;
  {
    auto svc = test::open_service(test::options(d.path()), kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    figures f;
    ticket t;
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
      s.settle(t, true);
      s.before_send(kNow);
    }
    s.reconcile(kNow);
    svc->persist(kNow);
    for (int i = 0; i < 45; ++i) {
      ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
      s.settle(t, true);
      s.before_send(kNow);
    }
  }
  auto svc = test::open_service(test::options(d.path()), kNow + kSec);
  EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 345);
  EXPECT_TRUE(svc->recovery().snapshot_loaded);
  EXPECT_EQ(svc->recovery().units_replayed, 45u);
}

TEST(journal_test, corrupt_and_torn_tails_are_reported_and_skipped) {
  // Verifies garbage appended to a journal (a torn write) is reported, not fatal, and the
  // valid records before it still count.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  uint64_t key_id = 0;
  {
    auto svc = test::open_service(test::options(d.path()), kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    figures f;
    ticket t;
    for (int i = 0; i < 10; ++i) {
      ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
      s.settle(t, true);
      s.before_send(kNow);
    }
  }
  auto files = journal_files(d.path());
  ASSERT_EQ(files.size(), 1u);
  {
    std::ofstream out(files[0], std::ios::binary | std::ios::app);
    std::string junk(journal::kRecordSize + 5, '\x7f');
    out << junk;
  }
  auto svc = test::open_service(test::options(d.path()), kNow + kSec);
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 10);
  EXPECT_GE(svc->recovery().corrupt_records + (svc->recovery().torn_bytes > 0 ? 1 : 0), 1u);
}

TEST(journal_test, rotation_and_compaction_keep_totals) {
  // Verifies small rotation thresholds produce several generations, persist deletes covered
  // ones, and totals survive a clean close and reopen exactly.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto o = test::options(d.path());
  o.journal_rotate_bytes = 2 * journal::kRecordSize;
  uint64_t key_id = 0;
  {
    auto svc = test::open_service(o, kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    figures f;
    ticket t;
    for (int round = 0; round < 20; ++round) {
      for (int i = 0; i < 3; ++i) {
        ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
        s.settle(t, true);
        s.before_send(kNow);  // separate passes: no coalescing across them
      }
      s.reconcile(kNow);
      svc->persist(kNow);
    }
    EXPECT_LE(journal_files(d.path()).size(), 2u);
    svc->close(kNow);
  }
  auto svc = test::open_service(o, kNow + kSec);
  EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 60);
  EXPECT_EQ(svc->recovery().units_replayed, 0u);
}

TEST(journal_test, stop_key_budget_survives_a_restart) {
  // Verifies a restarted server refuses a stop key that used its quota before the crash.
  temp_dir d;
  plan_map plans;
  plans["tiny"] = test::make_plan("tiny", 1e9, 1000000000, 5, overage_policy::stop);
  auto k = test::add_key(d.path(), "a", "tiny", plans);
  auto o = test::options(d.path());
  o.plans = plans;
  {
    auto svc = test::open_service(o, kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    figures f;
    ticket t;
    for (int i = 0; i < 5; ++i) {
      ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
      s.settle(t, true);
    }
    s.before_send(kNow);
  }
  auto svc = test::open_service(o, kNow + kSec);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  figures f;
  ticket t;
  EXPECT_EQ(s.admit(*r, kNow + kSec, f, t), admit_verdict::quota_exceeded);
}

TEST(journal_test, engine_path_survives_short_and_failed_writes_without_losing_records) {
  // Verifies the io_uring engine path of the journal: take_journal hands out the buffered
  // records, a short write keeps the rest (returned first by the next take, before newer
  // records), a failed write keeps every byte, reconcile and flush_journal write nothing while
  // a chunk is out, before_send no longer writes, and a crash after the writes loses nothing.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  uint64_t key_id = 0;
  {
    auto svc = test::open_service(test::options(d.path()), kNow);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    key_id = r->key_id;
    auto bill = [&](int n) {
      for (int i = 0; i < n; ++i) {
        figures f;
        ticket t;
        ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
        s.settle(t, true);
        (void)s.pending_journal();  // seals: one record per call
      }
    };
    bill(3);  // three records (sealed one by one)
    core_ledger::journal_chunk c = s.take_journal();
    ASSERT_GE(c.fd, 0);
    ASSERT_EQ(c.bytes.size(), 3 * journal::kRecordSize);
    const std::string first(c.bytes);
    // While the chunk is out: newer records stay apart; nothing else writes the journal.
    bill(2);
    EXPECT_FALSE(s.flush_journal());
    s.reconcile(kNow);
    s.before_send(kNow);
    EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 0);  // not reconciled
    // A short write: half a record and a bit.
    const size_t part = journal::kRecordSize + journal::kRecordSize / 2;
    ASSERT_EQ(::write(c.fd, first.data(), part), static_cast<ssize_t>(part));
    s.journal_done(static_cast<int64_t>(part));
    c = s.take_journal();
    ASSERT_EQ(c.bytes, std::string_view(first).substr(part));  // the rest, not the newer ones
    s.journal_done(-EIO);                                      // failed: nothing counted
    EXPECT_EQ(s.journal_errors(), 1u);
    c = s.take_journal();
    ASSERT_EQ(c.bytes, std::string_view(first).substr(part));
    ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), static_cast<ssize_t>(c.bytes.size()));
    s.journal_done(static_cast<int64_t>(c.bytes.size()));
    c = s.take_journal();  // now the two newer records
    ASSERT_EQ(c.bytes.size(), 2 * journal::kRecordSize);
    ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), static_cast<ssize_t>(c.bytes.size()));
    s.journal_done(static_cast<int64_t>(c.bytes.size()));
    EXPECT_TRUE(s.take_journal().bytes.empty());
    EXPECT_GT(s.journal_unsynced(), 0u);
    // on_tick asks for the fdatasync instead of doing it.
    s.on_tick(kNow + 10 * kSec);
    c = s.take_journal();
    EXPECT_TRUE(c.sync_due);
    s.journal_synced(0);
    EXPECT_EQ(s.journal_unsynced(), 0u);
    // The service is dropped without close(): a crash.
  }
  auto svc = test::open_service(test::options(d.path()), kNow + kSec);
  EXPECT_EQ(svc->usage(key_id, month_index_of_ns(kNow)).used, 5);
  EXPECT_EQ(svc->recovery().corrupt_records, 0u);
  EXPECT_EQ(svc->recovery().torn_bytes, 0u);
}

TEST(journal_test, engine_path_allocates_nothing_in_the_steady_state) {
  // Verifies admit + settle + take_journal + a write + journal_done (whole and short) make no
  // heap allocation after warm-up: the two journal buffers swap and keep their capacity.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto svc = test::open_service(test::options(d.path()), kNow);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  auto pass = [&](int calls, bool short_write) {
    for (int i = 0; i < calls; ++i) {
      figures f;
      ticket t;
      if (s.admit(*r, kNow, f, t) != admit_verdict::ok) {
        return false;
      }
      s.settle(t, true);
      (void)s.pending_journal();
    }
    core_ledger::journal_chunk c = s.take_journal();
    const size_t n = short_write && c.bytes.size() > 1 ? c.bytes.size() / 2 : c.bytes.size();
    if (c.fd < 0 || ::write(c.fd, c.bytes.data(), n) != static_cast<ssize_t>(n)) {
      return false;
    }
    s.journal_done(static_cast<int64_t>(n));
    return true;
  };
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(pass(8, i % 3 == 0));
  }
  tollgate::test::alloc_scope scope;
  for (int i = 0; i < 2000; ++i) {
    ASSERT_TRUE(pass(8, i % 3 == 0));
  }
  EXPECT_EQ(scope.count(), 0u);
}

}  // namespace
}  // namespace tollgate::quota
