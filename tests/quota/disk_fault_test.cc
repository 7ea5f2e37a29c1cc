// The quota core on a data dir that cannot be written: a start whose journal cannot be opened
// is refused, naming the path and errno. The directory is made unwritable with the immutable
// attribute (FS_IMMUTABLE_FL), which binds root too; where the file system or the process
// cannot set it, the test is skipped and says why.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "quota/journal.h"
#include "quota/test_util.h"

namespace tollgate::quota {
namespace {

using test::temp_dir;
using test::utc_ns;

constexpr int64_t kRec = journal::kRecordSize;  // one record's bytes

const int64_t kNow = utc_ns(2026, 12, 2, 12, 0, 0);

/// Sets or clears the immutable attribute of a directory; false when that is not possible here.
bool set_immutable(const std::string& dir, bool on) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return ok;
}

/// Makes `dir` immutable for its lifetime (nothing can be created in it, by root either).
class immutable_dir {
 public:
  explicit immutable_dir(std::string dir) : dir_(std::move(dir)), ok_(set_immutable(dir_, true)) {}
  ~immutable_dir() {
    if (ok_) {
      set_immutable(dir_, false);
    }
  }
  bool ok() const { return ok_; }

 private:
  std::string dir_;
  bool ok_;
};

TEST(quota_disk_fault_test, a_start_whose_journal_cannot_be_opened_is_refused_naming_it) {
  // Verifies service::open fails (instead of starting a server that could never record a
  // billed call) when the core's journal file cannot be created, naming the file and errno.
  temp_dir d;
  test::add_key(d.path(), "a", "free");
  auto o = test::options(d.path());
  test::open_service(o, kNow).reset();  // creates usage/ and the first journal generation
  immutable_dir frozen(d.path() + "/usage");
  if (!frozen.ok()) {
    GTEST_SKIP() << "cannot set the immutable attribute on " << d.path() << "/usage here";
  }
  auto r = service::open(o, kNow);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find(d.path() + "/usage/journal-0-"), std::string::npos) << r.error();
  EXPECT_NE(r.error().find("errno"), std::string::npos) << r.error();
}

TEST(quota_disk_fault_test, a_failed_journal_write_refuses_billed_calls_until_it_lands) {
  // Verifies that while the engine's journal write fails, admit() refuses billed calls as
  // unavailable (retry after 1 s, nothing billed, figures as they stand), health() says
  // failing, and once the kept bytes are written calls are admitted again; usage then counts
  // exactly the billed calls.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto svc = test::open_service(test::options(d.path()), kNow);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  figures f;
  ticket t;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
    s.settle(t, true);
  }
  core_ledger::journal_chunk c = s.take_journal();
  ASSERT_FALSE(c.bytes.empty());
  s.journal_done(-ENOSPC);
  EXPECT_TRUE(s.health().failing.load());
  EXPECT_EQ(s.health().errors.load(), 1u);
  EXPECT_EQ(s.admit(*r, kNow, f, t), admit_verdict::unavailable);
  EXPECT_EQ(f.retry_after_secs, 1);
  EXPECT_EQ(f.quota_used, 3);
  EXPECT_EQ(s.health().refused.load(), 1u);

  c = s.take_journal();  // the kept bytes, written this time
  ASSERT_EQ(c.bytes.size(), size_t{kRec});
  ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), kRec);
  s.journal_done(kRec);
  EXPECT_FALSE(s.health().failing.load());
  EXPECT_EQ(s.health().unwritten_since_ns.load(), 0);
  ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
  s.settle(t, true);
  c = s.take_journal();
  ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), static_cast<ssize_t>(c.bytes.size()));
  s.journal_done(static_cast<int64_t>(c.bytes.size()));
  s.reconcile(kNow);
  EXPECT_EQ(svc->usage(r->key_id, svc->month()).used, 4);
  const uint64_t id = r->key_id;  // r lives as long as svc
  svc.reset();
  auto again = test::open_service(test::options(d.path()), kNow);
  EXPECT_EQ(again->usage(id, again->month()).used, 4);
}

TEST(quota_disk_fault_test, records_whose_writes_keep_failing_are_dropped_and_not_billed) {
  // Verifies that once journal writes have failed for journal_give_up_ms, the next
  // take_journal() drops the unwritten records and says so (the engine then refuses the answers
  // waiting for them): those calls are not billed (usage, overage, billed counters), their units
  // go back to the key, health counts them as refused, and billed calls are admitted again and
  // recorded exactly, before and after a restart.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "pro");  // quota 100, overage billed
  auto o = test::options(d.path());
  o.journal_give_up_ms = 0;
  auto svc = test::open_service(o, kNow);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  figures f;
  ticket t;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
    s.settle(t, true);
  }
  core_ledger::journal_chunk c = s.take_journal();
  ASSERT_EQ(c.bytes.size(), size_t{kRec});
  EXPECT_FALSE(c.dropped);
  s.journal_done(-EIO);
  ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::unavailable);
  EXPECT_EQ(s.billed_calls(), 3u);

  c = s.take_journal();
  EXPECT_TRUE(c.dropped);
  EXPECT_TRUE(c.bytes.empty());
  EXPECT_EQ(s.billed_calls(), 0u);
  EXPECT_EQ(s.health().dropped.load(), 3u);
  EXPECT_EQ(s.health().refused.load(), 4u);
  EXPECT_FALSE(s.health().failing.load());
  EXPECT_EQ(s.health().unwritten_since_ns.load(), 0);
  s.fill_quota(*r, kNow, f);
  EXPECT_EQ(f.quota_used, 0);

  ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
  EXPECT_EQ(f.quota_used, 1);
  s.settle(t, true);
  c = s.take_journal();
  EXPECT_FALSE(c.dropped);
  ASSERT_EQ(c.bytes.size(), size_t{kRec});
  ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), kRec);
  s.journal_done(kRec);
  s.reconcile(kNow);
  EXPECT_EQ(svc->usage(r->key_id, svc->month()).used, 1);
  const uint64_t id = r->key_id;
  svc.reset();
  auto again = test::open_service(test::options(d.path()), kNow);
  EXPECT_EQ(again->usage(id, again->month()).used, 1);
}

TEST(quota_disk_fault_test, a_partly_written_record_is_kept_whole_when_the_rest_is_dropped) {
  // Verifies that a record whose start reached the file (a short write, then failures) is not
  // dropped: its rest is handed out again so the file never holds a torn record, the records
  // after it are dropped, and a restart counts exactly the records on file.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto k2 = test::add_key(d.path(), "b", "big");
  auto o = test::options(d.path());
  o.journal_give_up_ms = 0;
  auto svc = test::open_service(o, kNow);
  core_ledger& s = svc->ledger(0);
  const key_record* r = s.authenticate(k.secret);
  ASSERT_NE(r, nullptr);
  const uint64_t id = r->key_id;
  figures f;
  ticket t;
  ASSERT_EQ(s.admit(*r, kNow, f, t), admit_verdict::ok);
  s.settle(t, true);
  const key_record* r2 = s.authenticate(k2.secret);
  ASSERT_NE(r2, nullptr);
  const uint64_t id2 = r2->key_id;
  ASSERT_EQ(s.admit(*r2, kNow, f, t), admit_verdict::ok);
  s.settle(t, true);
  core_ledger::journal_chunk c = s.take_journal();
  ASSERT_EQ(c.bytes.size(), size_t{2 * kRec});
  ASSERT_EQ(::write(c.fd, c.bytes.data(), 10), 10);
  s.journal_done(10);
  c = s.take_journal();
  ASSERT_EQ(c.bytes.size(), size_t{2 * kRec - 10});
  s.journal_done(-EIO);
  c = s.take_journal();
  EXPECT_TRUE(c.dropped);
  ASSERT_EQ(c.bytes.size(), size_t{kRec - 10});  // the first record's rest
  ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), kRec - 10);
  s.journal_done(kRec - 10);
  EXPECT_EQ(s.billed_calls(), 1u);
  s.reconcile(kNow);
  EXPECT_EQ(svc->usage(id, svc->month()).used, 1);
  EXPECT_EQ(svc->usage(id2, svc->month()).used, 0);
  svc.reset();
  auto again = test::open_service(test::options(d.path()), kNow);
  EXPECT_EQ(again->recovery().corrupt_records, 0u);
  EXPECT_EQ(again->usage(id, again->month()).used, 1);
  EXPECT_EQ(again->usage(id2, again->month()).used, 0);
}

TEST(quota_disk_fault_test, a_month_roll_while_the_journal_fails_bills_the_old_month) {
  // Verifies that calls billed in one month whose records are still unwritten when the core
  // moves to the next month are counted in their own month once written, not in the new one,
  // and that dropping them after the roll takes them back from their own month.
  for (const bool drop : {false, true}) {
    SCOPED_TRACE(drop ? "dropped" : "written");
    temp_dir d;
    auto k = test::add_key(d.path(), "a", "pro");
    auto o = test::options(d.path());
    o.journal_give_up_ms = drop ? 0 : 60000;
    const int64_t late_nov = utc_ns(2026, 11, 30, 23, 59, 0);
    const int64_t dec = utc_ns(2026, 12, 1, 0, 0, 5);
    auto svc = test::open_service(o, late_nov);
    core_ledger& s = svc->ledger(0);
    const key_record* r = s.authenticate(k.secret);
    ASSERT_NE(r, nullptr);
    const uint64_t id = r->key_id;
    const uint32_t nov = svc->month();
    figures f;
    ticket t;
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(s.admit(*r, late_nov, f, t), admit_verdict::ok);
      s.settle(t, true);
    }
    core_ledger::journal_chunk c = s.take_journal();
    ASSERT_EQ(c.bytes.size(), size_t{kRec});
    s.on_tick(dec);  // the write is in flight: the roll cannot publish November's counts
    s.journal_done(-EIO);
    c = s.take_journal();
    EXPECT_EQ(c.dropped, drop);
    if (!drop) {
      ASSERT_EQ(c.bytes.size(), size_t{kRec});
      ASSERT_EQ(::write(c.fd, c.bytes.data(), c.bytes.size()), kRec);
      s.journal_done(kRec);
    }
    s.reconcile(dec);
    const int64_t want = drop ? 0 : 3;
    EXPECT_EQ(svc->usage(id, nov).used, want);
    EXPECT_EQ(svc->usage(id, nov + 1).used, 0);
    s.fill_quota(*r, dec, f);
    EXPECT_EQ(f.quota_used, 0);
    svc->close(dec);
    svc.reset();
    auto again = test::open_service(test::options(d.path()), dec);
    EXPECT_EQ(again->usage(id, nov).used, want);
    EXPECT_EQ(again->usage(id, nov + 1).used, 0);
  }
}

TEST(quota_disk_fault_test, journal_space_is_reserved_ahead_of_its_records) {
  // Verifies the journal file has room allocated beyond its end (fallocate KEEP_SIZE), so a
  // full disk is met by a reservation before any answer rather than by a write after one.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto svc = test::open_service(test::options(d.path()), kNow);
  const std::string j = d.path() + "/usage/journal-0-0.bin";
  struct stat st {};
  ASSERT_EQ(::stat(j.c_str(), &st), 0) << j;
  EXPECT_EQ(st.st_size, 0);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, core_ledger::reserve_step);
}

TEST(quota_disk_fault_test, an_emptied_or_deleted_keys_file_keeps_the_keys_in_force) {
  // Verifies that a keys file truncated to nothing, or deleted, under a running service is
  // refused as damage (logged, reload reports why) and every key keeps authenticating; once the
  // file is back, reloads work again.
  temp_dir d;
  auto a = test::add_key(d.path(), "acme", "free");
  auto b = test::add_key(d.path(), "beta", "free");
  auto svc = test::open_service(test::options(d.path()), kNow);
  core_ledger& s = svc->ledger(0);
  const std::string keys = d.path() + "/keys.txt";
  const std::string saved = test::read_text(keys);
  for (bool remove : {false, true}) {
    if (remove) {
      ASSERT_EQ(::unlink(keys.c_str()), 0);
    } else {
      ASSERT_EQ(::truncate(keys.c_str(), 0), 0);
    }
    std::string why;
    testing::internal::CaptureStderr();
    EXPECT_FALSE(svc->reload_if_changed(true, &why));
    const std::string log = testing::internal::GetCapturedStderr();
    EXPECT_NE(why.find(remove ? "is gone" : "holds no key"), std::string::npos) << why;
    EXPECT_NE(log.find("error: keys not reloaded"), std::string::npos) << log;
    s.before_send(kNow);
    EXPECT_NE(s.authenticate(a.secret), nullptr);
    EXPECT_NE(s.authenticate(b.secret), nullptr);
    EXPECT_EQ(svc->key_count(), 2u);
    std::ofstream(keys) << saved;
  }
  EXPECT_TRUE(svc->reload_if_changed(true));
}

TEST(quota_disk_fault_test, a_deleted_accounts_file_does_not_lift_a_suspension) {
  // Verifies a deleted accounts file is refused as damage: a suspended account stays suspended
  // rather than every account turning active.
  temp_dir d;
  auto k = test::add_key(d.path(), "acme", "free");
  key_store store(d.path());
  ASSERT_TRUE(store.suspend("acme").has_value());
  auto svc = test::open_service(test::options(d.path()), kNow);
  core_ledger& s = svc->ledger(0);
  ASSERT_TRUE(s.authenticate(k.secret)->suspended);
  ASSERT_EQ(::unlink((d.path() + "/accounts.txt").c_str()), 0);
  std::string why;
  EXPECT_FALSE(svc->reload_if_changed(true, &why));
  EXPECT_NE(why.find("accounts.txt is gone"), std::string::npos) << why;
  s.before_send(kNow);
  EXPECT_TRUE(s.authenticate(k.secret)->suspended);
}

TEST(quota_disk_fault_test, every_reload_logs_keys_added_revoked_and_unchanged) {
  // Verifies a reload logs its effect: which keys were added and revoked, and how many stayed.
  temp_dir d;
  auto a = test::add_key(d.path(), "acme", "free");
  auto b = test::add_key(d.path(), "beta", "free");
  auto svc = test::open_service(test::options(d.path()), kNow);
  key_store store(d.path());
  ASSERT_TRUE(store.revoke(a.key_id).has_value());
  auto c = test::add_key(d.path(), "gamma", "free");
  ASSERT_TRUE(store.suspend("beta").has_value());
  testing::internal::CaptureStderr();
  EXPECT_TRUE(svc->reload_if_changed(true));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("1 added (" + c.key_id + ")"), std::string::npos) << log;
  EXPECT_NE(log.find("1 revoked (" + a.key_id + ")"), std::string::npos) << log;
  EXPECT_NE(log.find("1 suspended (" + b.key_id + ")"), std::string::npos) << log;
  EXPECT_NE(log.find("0 unchanged"), std::string::npos) << log;
}

TEST(quota_disk_fault_test, a_lost_snapshot_after_compaction_refuses_the_start) {
  // Verifies that once journals were compacted into the snapshot, a missing or empty snapshot
  // refuses the start (usage would silently go back), naming the file and the way on; that
  // accept_usage_loss (--accept-usage-loss) starts with what the remaining journals hold; and
  // that a data dir whose journals were never compacted starts without a snapshot.
  temp_dir d;
  auto k = test::add_key(d.path(), "a", "big");
  auto o = test::options(d.path());
  const std::string snap = d.path() + "/usage/snapshot.txt";
  auto bill_one = [&](service& svc) {
    core_ledger& s = svc.ledger(0);
    figures f;
    ticket t;
    ASSERT_EQ(s.admit(*s.authenticate(k.secret), kNow, f, t), admit_verdict::ok);
    s.settle(t, true);
    s.before_send(kNow);
  };
  {
    auto svc = test::open_service(o, kNow);
    bill_one(*svc);
  }
  ASSERT_EQ(::unlink(snap.c_str()), 0);  // generation 0 only: nothing was compacted yet
  {
    auto svc = test::open_service(o, kNow);  // replays generation 0, compacts it
    ASSERT_NE(svc, nullptr);
    EXPECT_EQ(svc->usage(svc->ledger(0).authenticate(k.secret)->key_id, svc->month()).used, 1);
    bill_one(*svc);
  }
  for (bool remove : {true, false}) {
    const std::string saved = test::read_text(snap);
    if (remove) {
      ASSERT_EQ(::unlink(snap.c_str()), 0);
    } else {
      ASSERT_EQ(::truncate(snap.c_str(), 0), 0);
    }
    auto r = service::open(o, kNow);
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.error().find(snap + (remove ? " is missing" : " is empty")), std::string::npos)
        << r.error();
    EXPECT_NE(r.error().find("--accept-usage-loss"), std::string::npos) << r.error();
    std::ofstream(snap) << saved;
  }
  ASSERT_EQ(::unlink(snap.c_str()), 0);
  o.accept_usage_loss = true;
  auto svc = test::open_service(o, kNow);
  ASSERT_NE(svc, nullptr);
  // The first call was counted only in the lost snapshot; the second's journal remains.
  EXPECT_EQ(svc->usage(svc->ledger(0).authenticate(k.secret)->key_id, svc->month()).used, 1);
}

}  // namespace
}  // namespace tollgate::quota
