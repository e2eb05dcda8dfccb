// What only etcd does, against a real 3-node cluster (support/etcd_cluster.h); every behaviour
// a user relies on is in conformance/, and a leader's death in failover_test.cc.
#include <dlock/dlock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "support/etcd_cluster.h"
#include "support/tls_certs.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string Base64(const std::string& s) {
  std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

long long MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class EtcdTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { etcd_ = new EtcdCluster(); }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(etcd_->ready()); }

  // The etcd lease a lock's key hangs on ("0" when none), read behind the client's back.
  static std::string LeaseOf(const std::string& name) {
    auto body = etcd_->Post("/v3/kv/range", R"({"key":")" + Base64("dlock:" + name) + R"("})");
    if (!body) return "unreadable";
    std::smatch m;
    return std::regex_search(*body, m, std::regex(R"re("lease":"(\d+)")re")) ? m[1].str() : "0";
  }
  static int LeaseCount() {
    auto body = etcd_->Post("/v3/lease/leases", "{}");
    if (!body) return -1;
    std::string s = *body;
    int n = 0;
    for (size_t at = 0; (at = s.find("\"ID\"", at)) != std::string::npos; ++at) ++n;
    return n;
  }

  static EtcdCluster* etcd_;
};

EtcdCluster* EtcdTest::etcd_ = nullptr;

// etcd leases are whole seconds: the server holds a lock at least as long as asked (the lease
// rounded up), while the holder's own validity keeps to lease_ms.
TEST_F(EtcdTest, LeaseIsRoundedUpOnTheServerNeverDownLocally) {
  Client holder(etcd_->url()), other(etcd_->url());
  Options o;
  o.lease(1500);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "rounded", o.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_LE(dlock_lock_remaining_ms(l), 1500);
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), "rounded", &info), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_info_holders(info), 1u);
  EXPECT_GE(dlock_info_remaining_ms(info, 0), 2000) << "etcd holds it for whole seconds, rounded up";
  EXPECT_EQ(dlock_info_fencing_token(info, 0), dlock_lock_fencing_token(l));
  dlock_info_free(info);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// Locks of one client with leases of the same whole seconds share one etcd lease (one
// keepalive per tick for all of them); a lock without a lease has none.
TEST_F(EtcdTest, LocksShareOneLeasePerLengthAndNoLeaseMeansNone) {
  const int before = LeaseCount();
  ASSERT_GE(before, 0);
  Client c(etcd_->url());
  Options ten, forever;
  ten.lease(10000);
  forever.lease(0);
  std::vector<dlock_lock*> held(20);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(dlock_acquire(c.get(), ("shared-" + std::to_string(i)).c_str(), ten.get(), &held[i]), DLOCK_OK)
        << dlock_last_error();
  }
  EXPECT_EQ(LeaseCount(), before + 1) << "20 locks of 10 s: one etcd lease";
  EXPECT_EQ(LeaseOf("shared-0"), LeaseOf("shared-19"));
  dlock_lock* unleased = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "unleased", forever.get(), &unleased), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(LeaseOf("unleased"), "0");
  EXPECT_EQ(dlock_lock_remaining_ms(unleased), INT64_MAX);
  for (dlock_lock* l : held) EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(unleased), DLOCK_OK);
}

// Several exclusive names at once are one transaction: every key is created at its revision (one
// token for all, each name's still rising), on the client's one lease, renewed with it; a name
// held elsewhere refuses the lot, and the names one at a time then say which.
TEST_F(EtcdTest, SeveralNamesAreTakenInOneTransaction) {
  Client c(etcd_->url()), other(etcd_->url());
  Options o, now;
  o.lease(2000);
  now.lease(2000).wait(0);
  const char* names[] = {"many-c", "many-a", "many-b"};
  dlock_lock* locks[3] = {nullptr, nullptr, nullptr};
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 3, o.get(), locks), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_lock_fencing_token(locks[0]), dlock_lock_fencing_token(locks[1]));
  EXPECT_EQ(dlock_lock_fencing_token(locks[1]), dlock_lock_fencing_token(locks[2]));
  EXPECT_EQ(LeaseOf("many-a"), LeaseOf("many-c"));
  EXPECT_NE(LeaseOf("many-a"), "0");
  // Past the lease's TTL (2 s, rounded up, + 1): the renewals kept every key (none is a stray).
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  for (dlock_lock* l : locks) EXPECT_TRUE(dlock_lock_is_valid(l)) << dlock_lock_name(l);
  for (const char* name : names) {
    dlock_lock* taken = nullptr;
    EXPECT_EQ(dlock_acquire(other.get(), name, now.get(), &taken), DLOCK_NOT_ACQUIRED) << name;
    if (taken != nullptr) dlock_release(taken);
  }
  const uint64_t first = dlock_lock_fencing_token(locks[0]);
  ASSERT_EQ(dlock_release_many(locks, 3), DLOCK_OK) << dlock_last_error();

  dlock_lock* blocker = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), "many-b", now.get(), &blocker), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire_many(c.get(), names, 3, now.get(), locks), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find("many-b"), std::string::npos) << dlock_last_error();
  for (const char* name : {"many-a", "many-c"}) {
    dlock_info* info = nullptr;
    ASSERT_EQ(dlock_inspect(other.get(), name, &info), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_info_holders(info), 0u) << name << " was kept from a refused call";
    dlock_info_free(info);
  }
  ASSERT_EQ(dlock_release(blocker), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire_many(c.get(), names, 3, o.get(), locks), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(locks[0]), first);
  EXPECT_EQ(dlock_release_many(locks, 3), DLOCK_OK) << dlock_last_error();
}

// A keepalive answered without a TTL means etcd no longer has the lease: every lock on it is
// lost, and reported.
TEST_F(EtcdTest, ARevokedLeaseIsALostLockReported) {
  Client c(etcd_->url());
  LostRecorder lost;
  Options o;
  o.lease(10000).heartbeat(500).on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "revoked", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const std::string lease = LeaseOf("revoked");
  ASSERT_NE(lease, "0");
  ASSERT_TRUE(etcd_->Post("/v3/lease/revoke", R"({"ID":")" + lease + R"("})").has_value());
  const auto revoked = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 15000ms)) << "never reported";
  EXPECT_LT(MsSince(revoked), 500 + kCallBoundMs) << "found by the next heartbeat, not at the 10 s deadline";
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  // The client grants a new lease for its next lock.
  ASSERT_EQ(dlock_acquire(c.get(), "revoked", o.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_NE(LeaseOf("revoked"), lease);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// Endpoints are tried in turn: a dead one first costs nothing but a refused connect.
TEST_F(EtcdTest, ADeadEndpointIsSkipped) {
  Client c("etcd://127.0.0.1:1," + etcd_->endpoints());
  ASSERT_NE(c.get(), nullptr);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "skipping", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// ---- Lock kinds: shared holds and semaphores (lock_protocol.h, "Kinds") ----

Options& Shared(Options& o) {
  EXPECT_EQ(dlock_options_set_kind(o.mutable_get(), DLOCK_SHARED), DLOCK_OK);
  return o;
}

// A writer that gave up waiting leaves no announcement standing for long: it lasts about the
// rest of the writer's wait (in etcd's whole seconds), not a whole announcement span.
TEST_F(EtcdTest, AGivenUpWritersAnnouncementLapses) {
  Client r1(etcd_->url()), r2(etcd_->url()), w(etcd_->url());
  Options shared, shared_waiting, impatient;
  Shared(shared).lease(10000);
  Shared(shared_waiting).wait(20000).retry(100, 200);
  impatient.lease(10000).wait(2500);
  dlock_lock *l1 = nullptr, *l2 = nullptr, *lw = nullptr;
  ASSERT_EQ(dlock_acquire(r1.get(), "given-up", shared.get(), &l1), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(w.get(), "given-up", impatient.get(), &lw), DLOCK_NOT_ACQUIRED);
  const auto gave_up = Clock::now();
  ASSERT_EQ(dlock_acquire(r2.get(), "given-up", shared_waiting.get(), &l2), DLOCK_OK) << dlock_last_error();
  // The announcement's rest (in etcd's whole seconds: up to 2 s), the reader's retry and
  // attempt, with slack; a whole announcement span would be 10 s.
  EXPECT_LT(MsSince(gave_up), 2000 + 200 + kSlackMs) << "the writer's announcement outlived its wait by far";
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
}

// Every member paused: each call ends with DLOCK_EIO by its bound (T), naming the cluster.
TEST_F(EtcdTest, EveryCallIsBoundedWhenTheClusterFallsSilent) {
  Client c(etcd_->url() + "?timeout_ms=500");
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "silenced", nullptr, &held), DLOCK_OK) << dlock_last_error();
  for (int i = 0; i < EtcdCluster::kNodes; ++i) etcd_->Stop(i);
  auto bounded = [&](const char* what, auto call) {
    const auto start = Clock::now();
    EXPECT_EQ(call(), DLOCK_EIO) << what;
    EXPECT_LT(MsSince(start), 500 + 1500) << what << " is bounded by timeout_ms=500";
    EXPECT_NE(std::string(dlock_last_error()).find(etcd_->endpoints()), std::string::npos)
        << what << ": " << dlock_last_error();
  };
  dlock_lock* l = nullptr;
  bounded("acquire", [&] { return dlock_acquire(c.get(), "silenced-too", nullptr, &l); });
  bounded("extend", [&] { return dlock_extend(held, 20000); });
  dlock_info* info = nullptr;
  bounded("inspect", [&] { return dlock_inspect(c.get(), "silenced", &info); });
  bounded("release", [&] { return dlock_release(held); });  // frees the handle
  for (int i = 0; i < EtcdCluster::kNodes; ++i) etcd_->Cont(i);
  std::string why;
  ASSERT_TRUE(etcd_->WaitHealthy(30s, &why)) << why;
}

// Two of three nodes paused: no quorum. Calls fail with DLOCK_EIO within timeout_ms, and work
// again once the nodes are back. (Last in the suite, as gtest runs them in order.)
TEST_F(EtcdTest, MinorityFailsWithinTimeoutThenHeals) {
  Client c(etcd_->url() + "?timeout_ms=1000");
  // An acquire refused by the timeout may still commit once the nodes are back (its proposal
  // waited on the cut-off node): that key lives until its lease ends, unrenewed. A short lease
  // keeps the wait short.
  Options o;
  o.lease(2000);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "partitioned", o.get(), &l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  const int leader = etcd_->Leader();
  ASSERT_GE(leader, 0);
  const int kept = (leader + 1) % EtcdCluster::kNodes;
  for (int i = 0; i < EtcdCluster::kNodes; ++i) {
    if (i != kept) etcd_->Stop(i);
  }
  for (int attempt = 0; attempt < 3; ++attempt) {  // each endpoint the client may be on
    const auto start = Clock::now();
    EXPECT_EQ(dlock_acquire(c.get(), "partitioned", o.get(), &l), DLOCK_EIO);
    EXPECT_LT(MsSince(start), 1000 + 1500) << "bounded by timeout_ms=1000: " << dlock_last_error();
  }
  for (int i = 0; i < EtcdCluster::kNodes; ++i) {
    if (i != kept) etcd_->Cont(i);
  }
  std::string why;
  ASSERT_TRUE(etcd_->WaitHealthy(30s, &why)) << why;
  ASSERT_TRUE(WaitFor([&] {
    if (dlock_acquire(c.get(), "partitioned", o.get(), &l) != DLOCK_OK) return false;
    return dlock_release(l) == DLOCK_OK;
  }, 15s)) << "not healed: " << dlock_last_error();
}

// ---- Semaphore takes (lock_protocol.h, "Kinds") ----

// The keys in [begin, begin + "\xff"), read behind the client's back: each key's tail after begin.
std::vector<std::string> KeyTails(EtcdCluster* etcd, const std::string& begin) {
  auto body = etcd->Post("/v3/kv/range", R"({"key":")" + Base64(begin) + R"(","range_end":")" +
                                             Base64(begin + '\xff') + R"(","keys_only":true})");
  std::vector<std::string> tails;
  if (!body) return tails;
  std::regex key(R"re("key":"([^"]*)")re");
  for (auto it = std::sregex_iterator(body->begin(), body->end(), key); it != std::sregex_iterator(); ++it) {
    const std::string b64 = (*it)[1].str();
    std::string out(b64.size(), '\0');
    int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
    out.resize(n < 0 ? 0 : static_cast<size_t>(n));
    for (size_t i = b64.size(); i > 0 && b64[i - 1] == '=' && !out.empty(); --i) out.pop_back();  // padding
    tails.push_back(out.substr(begin.size()));
  }
  return tails;
}

// A permit that took k > 1 keeps its take at its key's end (K\0hp\0n\0ID\0k), one key per hold;
// a permit of one is K\0hp\0n\0ID as before. The weighted key is renewed, extended, given a
// value, inspected (once), counted by every client, and broken like any other.
TEST_F(EtcdTest, APermitKeyEndsInItsTakeWhenItTookMoreThanOne) {
  const std::string name = "take-layout";
  Client c(etcd_->url()), other(etcd_->url());
  LostRecorder lost;
  Options three, one, once;
  three.permits(4).take(3).lease(2000).heartbeat(200).on_lost(&LostRecorder::Fn, &lost);
  one.permits(4).lease(10000);
  once.permits(4).wait(0);
  dlock_lock *l3 = nullptr, *l1 = nullptr, *none = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), three.get(), &l3), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), one.get(), &l1), DLOCK_OK) << dlock_last_error();
  const std::string permits = "dlock:" + name + std::string("\0hp\0", 4);
  std::vector<std::string> tails = KeyTails(etcd_, permits);
  ASSERT_EQ(tails.size(), 2u);
  const std::regex plain("4\\x00[0-9a-f]{32}"), weighted("4\\x00[0-9a-f]{32}\\x003");
  const std::string weighted_tail = std::regex_match(tails[0], weighted) ? tails[0] : tails[1];
  const std::string plain_tail = weighted_tail == tails[0] ? tails[1] : tails[0];
  EXPECT_TRUE(std::regex_match(weighted_tail, weighted)) << "no key ends in its take";
  EXPECT_TRUE(std::regex_match(plain_tail, plain)) << "a permit of one keeps the old layout";
  EXPECT_EQ(dlock_acquire(other.get(), name.c_str(), once.get(), &none), DLOCK_NOT_ACQUIRED) << "3 + 1 of 4";

  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the lease: renewals kept it
  EXPECT_EQ(lost.calls.load(), 0) << "the weighted hold was lost: " << dlock_last_error();
  ASSERT_EQ(dlock_extend(l3, 3000), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_lock_set_value(l3, "v", 1), DLOCK_OK) << dlock_last_error();
  tails = KeyTails(etcd_, permits);
  ASSERT_EQ(tails.size(), 2u);
  EXPECT_TRUE(tails[0] == weighted_tail || tails[1] == weighted_tail) << "the key moved";

  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 2u) << "each hold once";
  EXPECT_EQ(dlock_info_permits(info), 4u);
  dlock_info_free(info);

  ASSERT_EQ(dlock_release(l1), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), once.get(), &none), DLOCK_OK) << dlock_last_error();
  dlock_info* broken = nullptr;
  ASSERT_EQ(dlock_break_with(other.get(), name.c_str(), "", DLOCK_BREAK_NOW, &broken), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(broken), 2u);
  dlock_info_free(broken);
  EXPECT_TRUE(KeyTails(etcd_, permits).empty());
  EXPECT_EQ(dlock_release(l3), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(none), DLOCK_NOT_HELD);
}

// ---- Break (lock_protocol.h, "Break") ----

// The keys in [key, end) on the server, read behind the client's back (-1: unreadable).
int CountKeys(EtcdCluster* etcd, const std::string& key, const std::string& end) {
  auto body = etcd->Post("/v3/kv/range", R"({"key":")" + Base64(key) + R"(","range_end":")" + Base64(end) +
                                             R"(","count_only":true})");
  if (!body) return -1;
  std::smatch m;
  return std::regex_search(*body, m, std::regex(R"re("count":"(\d+)")re")) ? std::stoi(m[1].str()) : 0;
}
// Where NAME's break records live: "dlock:" NUL "broken" NUL NAME NUL token.
std::string RecordsOf(const std::string& name) { return std::string("dlock:\0broken\0", 14) + name + '\0'; }
std::string RecordsEnd(const std::string& name) { return std::string("dlock:\0broken\0", 14) + name + '\x01'; }
int Records(EtcdCluster* etcd, const std::string& name) { return CountKeys(etcd, RecordsOf(name), RecordsEnd(name)); }
bool Put(EtcdCluster* etcd, const std::string& key, const std::string& value) {
  return etcd->Post("/v3/kv/put", R"({"key":")" + Base64(key) + R"(","value":")" + Base64(value) + R"("})")
      .has_value();
}

// A leased hold, broken: the holder hears at its next heartbeat (cause "broken"), the name
// stays closed for every kind until the broken lease would have ended (at least the lease,
// rounded up to etcd's whole seconds), and then a waiter gets it with a greater token.
TEST_F(EtcdTest, ABreakKeepsTheNameClosedUntilTheBrokenLeaseWouldHaveEnded) {
  const char* name = "broken-closed";
  Client holder(etcd_->url()), breaker(etcd_->url()), other(etcd_->url());
  LostRecorder lost;
  Options o;
  o.lease(3000).heartbeat(300).owner("worker-1").on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name, o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(l);

  dlock_info* broken = nullptr;
  ASSERT_EQ(dlock_break_with(breaker.get(), name, "stuck job", 0, &broken), DLOCK_OK) << dlock_last_error();
  const auto at = Clock::now();
  ASSERT_EQ(dlock_info_holders(broken), 1u);
  EXPECT_EQ(dlock_info_fencing_token(broken, 0), token);
  EXPECT_STREQ(dlock_info_owner(broken, 0), "worker-1");
  const int64_t closed = dlock_info_closed_ms(broken);
  EXPECT_GE(closed, dlock_info_remaining_ms(broken, 0));
  EXPECT_GE(closed, 3000) << "at least the broken holder's lease";
  EXPECT_LE(closed, 3000 + 4000) << "the lease in whole seconds, etcd's rounding and a spare second; no more";
  EXPECT_STREQ(dlock_info_closed_by(broken), "broken");
  dlock_info_free(broken);

  ASSERT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 5000ms)) << "the broken holder never heard";
  EXPECT_LT(MsSince(at), 300 + kCallBoundMs);
  EXPECT_EQ(lost.token.load(), token);
  ASSERT_NE(dlock_lock_lost_cause(l), nullptr);
  const std::string cause = dlock_lock_lost_cause(l);
  EXPECT_EQ(cause.rfind("broken", 0), 0u) << cause;
  EXPECT_NE(cause.find("stuck job"), std::string::npos) << cause;

  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), name, &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u);
  EXPECT_GT(dlock_info_closed_ms(info), 0);
  EXPECT_LE(dlock_info_closed_ms(info), closed + 1000);
  EXPECT_STREQ(dlock_info_closed_by(info), "broken");
  dlock_info_free(info);

  Options once, once_shared, once_permit;
  once.wait(0);
  once_shared.shared().wait(0);
  once_permit.permits(2).wait(0);
  dlock_lock* next = nullptr;
  EXPECT_EQ(dlock_acquire(other.get(), name, once.get(), &next), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_acquire(other.get(), name, once_shared.get(), &next), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_acquire(other.get(), name, once_permit.get(), &next), DLOCK_NOT_ACQUIRED);

  Options patient;
  patient.wait(closed + 5000);
  ASSERT_EQ(dlock_acquire(other.get(), name, patient.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(MsSince(at), closed - 100) << "opened before the closed time was out";
  EXPECT_LT(MsSince(at), closed + kSlackMs) << "the marker's end was not heard";
  EXPECT_GT(dlock_lock_fencing_token(next), token);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(Records(etcd_, name), 1);
}

// DLOCK_BREAK_NOW: every shared hold and every permit goes, one record each, and the name is
// free at once; the next token is above every broken one.
TEST_F(EtcdTest, ABreakNowFreesEveryKindOfHoldAtOnce) {
  Client c(etcd_->url()), breaker(etcd_->url());
  Options shared, permit, once;
  shared.shared().lease(10000);
  permit.permits(3).lease(10000);
  once.wait(0);
  for (const auto& [name, options, n] : {std::make_tuple("broken-shared", &shared, 2),
                                         std::make_tuple("broken-permits", &permit, 3)}) {
    std::vector<dlock_lock*> held(n);
    uint64_t highest = 0;
    for (dlock_lock*& h : held) {
      ASSERT_EQ(dlock_acquire(c.get(), name, options->get(), &h), DLOCK_OK) << dlock_last_error();
      highest = std::max(highest, dlock_lock_fencing_token(h));
    }
    dlock_info* broken = nullptr;
    ASSERT_EQ(dlock_break_with(breaker.get(), name, "", DLOCK_BREAK_NOW, &broken), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_info_holders(broken), static_cast<uint32_t>(n)) << name;
    EXPECT_EQ(dlock_info_closed_ms(broken), 0);
    EXPECT_STREQ(dlock_info_closed_by(broken), "");
    if (options == &shared) {
      EXPECT_EQ(dlock_info_kind(broken), DLOCK_SHARED);
    } else {
      EXPECT_EQ(dlock_info_permits(broken), 3u);
    }
    dlock_info_free(broken);
    dlock_lock* next = nullptr;
    ASSERT_EQ(dlock_acquire(breaker.get(), name, once.get(), &next), DLOCK_OK) << dlock_last_error();
    EXPECT_GT(dlock_lock_fencing_token(next), highest);
    EXPECT_EQ(dlock_release(next), DLOCK_OK);
    EXPECT_EQ(Records(etcd_, name), n);
    for (dlock_lock* h : held) EXPECT_EQ(dlock_release(h), DLOCK_NOT_HELD);
  }
}

// A hold without a lease adds no closed time, and a break of a free name is Ok.
TEST_F(EtcdTest, ABreakClosesOnlyForLeases) {
  Client c(etcd_->url()), breaker(etcd_->url());
  Options forever, once;
  forever.lease(0);
  once.wait(0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "broken-forever", forever.get(), &l), DLOCK_OK) << dlock_last_error();
  dlock_info* broken = nullptr;
  ASSERT_EQ(dlock_break_with(breaker.get(), "broken-forever", "", 0, &broken), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(broken), 1u);
  EXPECT_EQ(dlock_info_remaining_ms(broken, 0), -1);
  EXPECT_EQ(dlock_info_closed_ms(broken), 0);
  dlock_info_free(broken);
  dlock_lock* next = nullptr;
  ASSERT_EQ(dlock_acquire(breaker.get(), "broken-forever", once.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);

  ASSERT_EQ(dlock_break_with(breaker.get(), "broken-never-held", "", 0, &broken), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(broken), 0u);
  EXPECT_EQ(dlock_info_closed_ms(broken), 0);
  dlock_info_free(broken);
}

// A second break (without now) of a name the first one keeps closed breaks nothing and keeps
// the name closed for the rest of the first one's time: the holder the first one broke may
// still be working. The earlier marker stands as it is (no new lease). A break with now then
// frees the name at once.
TEST_F(EtcdTest, ASecondBreakKeepsWhatIsLeftOfTheFirstsClosedTimeAndNowFreesTheName) {
  const char* name = "broken-twice";
  Client c(etcd_->url()), breaker(etcd_->url()), other(etcd_->url());
  Options leased, once;
  leased.lease(2000);
  once.wait(0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name, leased.get(), &l), DLOCK_OK) << dlock_last_error();
  dlock_info* broken = nullptr;
  ASSERT_EQ(dlock_break_with(breaker.get(), name, "first", 0, &broken), DLOCK_OK) << dlock_last_error();
  const auto first_at = Clock::now();
  ASSERT_EQ(dlock_info_holders(broken), 1u);
  const int64_t first = dlock_info_closed_ms(broken);
  EXPECT_GE(first, 2000);
  dlock_info_free(broken);
  const std::string marker = std::string(name) + '\0' + "c";  // the closed marker's key, after "dlock:"
  const std::string marker_lease = LeaseOf(marker);
  ASSERT_NE(marker_lease, "0");

  ASSERT_EQ(dlock_break_with(breaker.get(), name, "second", 0, &broken), DLOCK_OK) << dlock_last_error();
  const auto second_at = Clock::now();
  EXPECT_EQ(dlock_info_holders(broken), 0u);
  const int64_t second = dlock_info_closed_ms(broken);
  EXPECT_GT(second, 0) << "the second break cleared the first one's marker";
  EXPECT_GE(second, first - MsSince(first_at) - 1500) << "not what was left of the first break's time";
  EXPECT_LE(second, first + 1000) << "more than what was left of the first break's time";
  EXPECT_STREQ(dlock_info_closed_by(broken), "broken");
  dlock_info_free(broken);
  EXPECT_EQ(LeaseOf(marker), marker_lease) << "the earlier marker was not kept as it stands";
  EXPECT_EQ(Records(etcd_, name), 1) << "a break of nothing records nothing";

  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), name, &info), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_info_closed_ms(info), 0);
  EXPECT_STREQ(dlock_info_closed_by(info), "broken");
  dlock_info_free(info);
  dlock_lock* next = nullptr;
  EXPECT_EQ(dlock_acquire(other.get(), name, once.get(), &next), DLOCK_NOT_ACQUIRED);
  // Still closed shortly before the reported time is out.
  if (second > 1000) std::this_thread::sleep_for(std::chrono::milliseconds(second - 1000) - (Clock::now() - second_at));
  EXPECT_EQ(dlock_acquire(other.get(), name, once.get(), &next), DLOCK_NOT_ACQUIRED)
      << "opened " << MsSince(second_at) << " ms after the second break, which said " << second;

  ASSERT_EQ(dlock_break_with(breaker.get(), name, "now", DLOCK_BREAK_NOW, &broken), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(broken), 0u);
  EXPECT_EQ(dlock_info_closed_ms(broken), 0);
  EXPECT_STREQ(dlock_info_closed_by(broken), "");
  dlock_info_free(broken);
  ASSERT_EQ(dlock_acquire(other.get(), name, once.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

// A waiter is woken by the break's deletions (the watch), not by its retry.
TEST_F(EtcdTest, ABreakWakesAWaiter) {
  Client c(etcd_->url()), waiter(etcd_->url()), breaker(etcd_->url());
  Options forever, patient;
  forever.lease(0);
  patient.wait(20000).retry(15000, 15000);
  dlock_lock *l = nullptr, *next = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "broken-waited", forever.get(), &l), DLOCK_OK) << dlock_last_error();
  Clock::time_point broke_at;
  std::thread breaking([&] {
    std::this_thread::sleep_for(1000ms);
    broke_at = Clock::now();
    EXPECT_EQ(dlock_break(breaker.get(), "broken-waited", "handover"), DLOCK_OK) << dlock_last_error();
  });
  ASSERT_EQ(dlock_acquire(waiter.get(), "broken-waited", patient.get(), &next), DLOCK_OK) << dlock_last_error();
  breaking.join();
  EXPECT_LT(MsSince(broke_at), 2000) << "the waiter slept through the break";
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

// A name broken in a loop keeps only the newest kMaxBrokenRecords (64) records.
TEST_F(EtcdTest, BreakRecordsKeepTheNewest64) {
  Client c(etcd_->url()), breaker(etcd_->url());
  Options forever;
  forever.lease(0);
  for (int i = 0; i < 70; ++i) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(c.get(), "broken-often", forever.get(), &l), DLOCK_OK) << dlock_last_error();
    ASSERT_EQ(dlock_break(breaker.get(), "broken-often", "again"), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  }
  EXPECT_EQ(Records(etcd_, "broken-often"), 64);
}

// A marker or a record dlock did not write is a clear error, not a guess.
TEST_F(EtcdTest, AForeignMarkerOrRecordIsAClearError) {
  Client c(etcd_->url());
  Options once;
  once.wait(0);
  const std::string marker = std::string("dlock:broken-foreign") + '\0' + "c";
  ASSERT_TRUE(Put(etcd_, marker, "Not A Word!"));
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), "broken-foreign", once.get(), &l), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("marker"), std::string::npos) << dlock_last_error();
  dlock_info* info = nullptr;
  EXPECT_EQ(dlock_inspect(c.get(), "broken-foreign", &info), DLOCK_EBACKEND);
  ASSERT_TRUE(etcd_->DeleteRange(marker, marker + '\0'));

  const std::string record = RecordsOf("broken-foreign") + "12x";
  ASSERT_TRUE(Put(etcd_, record, "why"));
  EXPECT_EQ(dlock_inspect(c.get(), "broken-foreign", &info), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("break record"), std::string::npos) << dlock_last_error();
  ASSERT_TRUE(etcd_->DeleteRange(record, record + '\0'));
  ASSERT_EQ(dlock_acquire(c.get(), "broken-foreign", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// TLS: https to every endpoint, the server checked against ca=, and a client certificate
// where the cluster asks for one.
// The job rules' markers of NAME (lock_protocol.h, "Job rules"), read behind the client's
// back: each key's tail after K\0c\0 ("m\0ID" or "d\0ID"), its value and its lease.
struct Marker {
  std::string tail, value, lease;
};
std::vector<Marker> RuleMarkers(EtcdCluster* etcd, const std::string& name) {
  const std::string begin = "dlock:" + name + std::string("\0c\0", 3);
  std::string end = begin;
  end.back() = '\x01';
  auto body = etcd->Post("/v3/kv/range", R"({"key":")" + Base64(begin) + R"(","range_end":")" + Base64(end) + R"("})");
  std::vector<Marker> out;
  if (!body) return out;
  std::regex kv(R"re(\{"key":"([^"]*)"[^}]*?"value":"([^"]*)"[^}]*\})re");
  for (auto it = std::sregex_iterator(body->begin(), body->end(), kv); it != std::sregex_iterator(); ++it) {
    auto decode = [](const std::string& b64) {
      std::string out(b64.size(), '\0');
      int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                              reinterpret_cast<const unsigned char*>(b64.data()), static_cast<int>(b64.size()));
      out.resize(n < 0 ? 0 : static_cast<size_t>(n));
      // EVP_DecodeBlock keeps the padding's zero bytes.
      for (size_t i = b64.size(); i > 0 && b64[i - 1] == '=' && !out.empty(); --i) out.pop_back();
      return out;
    };
    const std::string key = decode((*it)[1].str()), value = decode((*it)[2].str());
    std::smatch m;
    const std::string whole = (*it)[0].str();
    const std::string lease = std::regex_search(whole, m, std::regex(R"re("lease":"(\d+)")re")) ? m[1].str() : "0";
    out.push_back({key.substr(begin.size()), value, lease});
  }
  return out;
}

// A hold with both rules writes one marker per rule, each on a lease of its own (not the
// hold's); a release deletes the lock-delay marker and leaves the min hold's, with no holder;
// a break now clears it and the name is free.
TEST_F(EtcdTest, JobRuleMarkersAreKeysOnLeasesOfTheirOwn) {
  const std::string name = "rules-markers";
  Client holder(etcd_->url()), other(etcd_->url());
  Options o;
  o.lease(2000).min_hold(4000).lock_delay(1000);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const std::string hold_lease = LeaseOf(name);
  std::vector<Marker> markers = RuleMarkers(etcd_, name);
  ASSERT_EQ(markers.size(), 2u);
  // "d\0ID" sorts before "m\0ID".
  EXPECT_EQ(markers[0].tail.substr(0, 2), std::string("d\0", 2));
  EXPECT_EQ(markers[0].value, "lock_delay");
  EXPECT_EQ(markers[1].tail.substr(0, 2), std::string("m\0", 2));
  EXPECT_EQ(markers[1].value, "min_hold");
  EXPECT_EQ(markers[0].tail.substr(2), markers[1].tail.substr(2)) << "one hold's id";
  for (const Marker& m : markers) {
    EXPECT_NE(m.lease, "0");
    EXPECT_NE(m.lease, hold_lease) << m.value << " is on the hold's lease";
  }
  EXPECT_NE(markers[0].lease, markers[1].lease);
  // While the hold stands, inspect shows the holder, not the markers.
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 1u);
  EXPECT_EQ(dlock_info_closed_ms(info), 0);
  dlock_info_free(info);

  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  markers = RuleMarkers(etcd_, name);
  ASSERT_EQ(markers.size(), 1u) << "the release keeps the min hold's marker alone";
  EXPECT_EQ(markers[0].value, "min_hold");
  ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u);
  EXPECT_GT(dlock_info_closed_ms(info), 0);
  EXPECT_LE(dlock_info_closed_ms(info), 5000);
  EXPECT_STREQ(dlock_info_closed_by(info), "min_hold");
  dlock_info_free(info);
  Options once;
  once.wait(0);
  dlock_lock* next = nullptr;
  EXPECT_EQ(dlock_acquire(other.get(), name.c_str(), once.get(), &next), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find("min_hold"), std::string::npos) << dlock_last_error();
  Options once_shared;
  once_shared.shared().wait(0);
  EXPECT_EQ(dlock_acquire(other.get(), name.c_str(), once_shared.get(), &next), DLOCK_NOT_ACQUIRED);

  dlock_info* broken = nullptr;
  ASSERT_EQ(dlock_break_with(other.get(), name.c_str(), "", DLOCK_BREAK_NOW, &broken), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_closed_ms(broken), 0);
  dlock_info_free(broken);
  EXPECT_TRUE(RuleMarkers(etcd_, name).empty());
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), once.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
}

// A holder that crashed with a lease much shorter than its min hold: the name stays closed
// until acquire + min hold (by the marker, no holder), not the lease's end.
TEST_F(EtcdTest, AMinHoldOutlivesACrashWithAShortLease) {
  const std::string name = "rules-crash";
  Client holder(etcd_->url()), other(etcd_->url());
  Options o;
  o.lease(500).heartbeat(0).min_hold(4000);
  const auto start = Clock::now();
  dlock_lock* crashed = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &crashed), DLOCK_OK) << dlock_last_error();
  // The hold's key goes with its 2 s lease; the marker stands on.
  ASSERT_TRUE(WaitFor([&] { return LeaseOf(name) == "0"; }, 5000ms));
  if (MsSince(start) < 3500) {
    dlock_info* info = nullptr;
    ASSERT_EQ(dlock_inspect(other.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_info_holders(info), 0u);
    EXPECT_STREQ(dlock_info_closed_by(info), "min_hold");
    dlock_info_free(info);
  }
  Options patient;
  patient.wait(10000);
  dlock_lock* next = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), patient.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(MsSince(start), 4000 - 20) << "free before acquire + min hold";
  EXPECT_LT(MsSince(start), 4000 + kSlackMs) << "the marker's end was not heard";
  EXPECT_GT(dlock_lock_fencing_token(next), dlock_lock_fencing_token(crashed));
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(dlock_release(crashed), DLOCK_NOT_HELD);
}

// Shared holders each keep their own lock-delay marker: after both crash, the longest delay
// closes the name; a shared acquire joins shared holds that stand beside their markers.
TEST_F(EtcdTest, SharedHoldersCrashedTheLongestLockDelayStands) {
  const std::string name = "rules-shared";
  Client a(etcd_->url()), b(etcd_->url()), other(etcd_->url());
  Options short_delay, long_delay;
  short_delay.shared().lease(500).heartbeat(0).lock_delay(1000);
  long_delay.shared().lease(500).heartbeat(0).lock_delay(3000);
  dlock_lock* la = nullptr;
  dlock_lock* lb = nullptr;
  const auto start = Clock::now();
  ASSERT_EQ(dlock_acquire(a.get(), name.c_str(), short_delay.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), name.c_str(), long_delay.get(), &lb), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(RuleMarkers(etcd_, name).size(), 2u);
  Options patient;
  patient.wait(15000);
  dlock_lock* next = nullptr;
  ASSERT_EQ(dlock_acquire(other.get(), name.c_str(), patient.get(), &next), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(MsSince(start), 500 + 3000 - 20) << "free before the longer lock-delay ended";
  EXPECT_LT(MsSince(start), 500 + 3000 + 2000 + 2000 + kSlackMs);
  EXPECT_GT(dlock_lock_fencing_token(next), dlock_lock_fencing_token(lb));
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
  EXPECT_EQ(dlock_release(la), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(lb), DLOCK_NOT_HELD);
}

// ---- Release requests (lock_protocol.h, "Release requests") ----


// Where NAME's release requests are put: "dlock:" NUL "request" NUL NAME.
std::string RequestKeyOf(const std::string& name) { return std::string("dlock:\0request\0", 15) + name; }
// Whether key exists, and the lease it hangs on ("0": none).
bool KeyLease(EtcdCluster* etcd, const std::string& key, std::string* lease) {
  auto body = etcd->Post("/v3/kv/range", R"({"key":")" + Base64(key) + R"("})");
  if (!body || body->find("\"kvs\"") == std::string::npos) return false;
  std::smatch m;
  *lease = std::regex_search(*body, m, std::regex(R"re("lease":"(\d+)")re")) ? m[1].str() : "0";
  return true;
}
// A listener's handler on options.
void Listen(Options& o, RequestsHeard* heard) {
  ASSERT_EQ(dlock_options_set_on_release_requested(o.mutable_get(), &RequestsHeard::Fn, heard), DLOCK_OK);
}
// How long a listening holder may take to hear a request: its watch is live one round trip after
// its acquire, and a request reaches it a round trip after it is put.
constexpr auto kHearWithin = std::chrono::milliseconds(kUnderSanitizer ? 2000 + kSlackMs : 2000);

// Asks the holders of name every 200 ms until heard counts one more call, up to limit: true
// once it did.
bool AskUntilHeard(dlock_client* asker, const std::string& name, const char* reason, RequestsHeard& heard,
                   std::chrono::milliseconds limit = kHearWithin) {
  const int before = heard.calls.load();
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    EXPECT_EQ(dlock_request_release(asker, name.c_str(), reason), DLOCK_OK) << dlock_last_error();
    if (WaitFor([&] { return heard.calls.load() > before; }, 200ms)) return true;
  }
  return heard.calls.load() > before;
}

// The holder hears the reason through its watch within a round trip or two, and keeps its lock.
// The request is a key of its own, outside the name's keys, on a lease: it goes by itself.
TEST_F(EtcdTest, AListeningHolderHearsARequestThroughItsWatch) {
  Client holder(etcd_->url()), asker(etcd_->url());
  RequestsHeard heard;
  Options o;
  o.lease(10000);
  Listen(o, &heard);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "asked", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const auto acquired = Clock::now();
  ASSERT_TRUE(AskUntilHeard(asker.get(), "asked", "deploy 7 needs it", heard)) << "never heard";
  EXPECT_LT(MsSince(acquired), kHearWithin.count());
  EXPECT_EQ(heard.name(), "asked");
  EXPECT_EQ(heard.reason(), "deploy 7 needs it");
  EXPECT_EQ(dlock_lock_is_valid(l), 1) << "a request took the lock";

  std::string lease;
  ASSERT_TRUE(KeyLease(etcd_, RequestKeyOf("asked"), &lease)) << "no request key";
  EXPECT_NE(lease, "0") << "the request key would stay forever";
  EXPECT_EQ(CountKeys(etcd_, "dlock:asked", "dlock:asked\x01"), 1) << "the name's range holds the hold alone";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// Every shared holder and every permit holder is asked (no exclusive key: the transaction's
// nested branch finds the holds), and hears it.
TEST_F(EtcdTest, SharedAndPermitHoldersHear) {
  Client a(etcd_->url()), b(etcd_->url()), asker(etcd_->url());
  RequestsHeard heard_a, heard_b;
  Options oa, ob;
  oa.lease(10000).shared();
  ob.lease(10000).shared();
  Listen(oa, &heard_a);
  Listen(ob, &heard_b);
  dlock_lock *la = nullptr, *lb = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "asked-shared", oa.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "asked-shared", ob.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(AskUntilHeard(asker.get(), "asked-shared", "readers out", heard_a));
  ASSERT_TRUE(heard_b.calls.load() > 0 || AskUntilHeard(asker.get(), "asked-shared", "readers out", heard_b));
  EXPECT_EQ(heard_a.reason(), "readers out");
  EXPECT_EQ(heard_b.reason(), "readers out");
  EXPECT_EQ(dlock_release(la), DLOCK_OK);
  EXPECT_EQ(dlock_release(lb), DLOCK_OK);

  RequestsHeard heard_p;
  Options op;
  op.lease(10000).permits(2);
  Listen(op, &heard_p);
  dlock_lock* lp = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "asked-permit", op.get(), &lp), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(AskUntilHeard(asker.get(), "asked-permit", "scale down", heard_p));
  EXPECT_EQ(heard_p.reason(), "scale down");
  EXPECT_EQ(dlock_release(lp), DLOCK_OK);
}

// A free name has nobody to ask: DLOCK_NOT_HELD, and nothing is put. Markers and waiting
// writers' announcements are no holds.
TEST_F(EtcdTest, ARequestForAFreeNameIsNotHeldAndPutsNothing) {
  Client c(etcd_->url());
  EXPECT_EQ(dlock_request_release(c.get(), "asked-never", "anyone?"), DLOCK_NOT_HELD);
  std::string lease;
  EXPECT_FALSE(KeyLease(etcd_, RequestKeyOf("asked-never"), &lease));

  // Released early under a min hold: the marker keeps the name closed, with no holder.
  Options o;
  o.lease(10000).min_hold(5000);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "asked-marker", o.get(), &l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  ASSERT_EQ(CountKeys(etcd_, "dlock:asked-marker", "dlock:asked-marker\x01"), 1) << "the min hold's marker";
  EXPECT_EQ(dlock_request_release(c.get(), "asked-marker", "anyone?"), DLOCK_NOT_HELD);
  EXPECT_FALSE(KeyLease(etcd_, RequestKeyOf("asked-marker"), &lease));
}

// A holder that let go hears nothing of requests made to the name's next holder.
TEST_F(EtcdTest, AHolderThatReleasedHearsNothing) {
  Client first(etcd_->url()), next(etcd_->url()), asker(etcd_->url());
  RequestsHeard heard;
  Options o, plain;
  o.lease(10000);
  Listen(o, &heard);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(first.get(), "asked-gone", o.get(), &l), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(AskUntilHeard(asker.get(), "asked-gone", "first", heard)) << "its watch never became live";
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_request_release(asker.get(), "asked-gone", "nobody"), DLOCK_NOT_HELD);
  dlock_lock* other = nullptr;
  ASSERT_EQ(dlock_acquire(next.get(), "asked-gone", plain.get(), &other), DLOCK_OK) << dlock_last_error();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(dlock_request_release(asker.get(), "asked-gone", "second"), DLOCK_OK) << dlock_last_error();
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(heard.calls.load(), 1) << "a holder that released heard a request made to the next";
  EXPECT_EQ(heard.reason(), "first");
  EXPECT_EQ(dlock_release(other), DLOCK_OK);
}

// A request is no release: a waiter blocked on the name (woken by deletions only) sleeps on,
// and the lock stays with its holder until it lets go; then the waiter is woken at once.
TEST_F(EtcdTest, ARequestWakesNoWaiter) {
  Client holder(etcd_->url()), waiter(etcd_->url()), asker(etcd_->url());
  RequestsHeard heard;
  Options o;
  o.lease(0);
  Listen(o, &heard);
  dlock_lock *l = nullptr, *next = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "asked-waited", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  std::atomic<bool> acquired{false};
  std::thread waiting([&] {
    Options patient;
    patient.wait(20000).retry(15000, 15000);
    EXPECT_EQ(dlock_acquire(waiter.get(), "asked-waited", patient.get(), &next), DLOCK_OK) << dlock_last_error();
    acquired = true;
  });
  // The waiter was refused once: its announcement stands (lock_protocol.h, "Kinds").
  const std::string k = "dlock:asked-waited";
  ASSERT_TRUE(WaitFor([&] { return CountKeys(etcd_, k + '\0' + "w", k + '\0' + "x") == 1; }, 5000ms));
  ASSERT_TRUE(AskUntilHeard(asker.get(), "asked-waited", "let the waiter in", heard));
  for (int i = 0; i < 4; ++i) {  // more puts while the waiter's watch stands
    EXPECT_EQ(dlock_request_release(asker.get(), "asked-waited", "again"), DLOCK_OK) << dlock_last_error();
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_FALSE(acquired.load()) << "a request handed the lock to a waiter";
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(asker.get(), "asked-waited", &info), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_info_holders(info), 1u);
  EXPECT_EQ(dlock_info_fencing_token(info, 0), token) << "the lock changed hands";
  dlock_info_free(info);

  const auto released = Clock::now();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  waiting.join();
  EXPECT_TRUE(acquired.load());
  EXPECT_LT(MsSince(released), 2000) << "the waiter slept through the release";
  EXPECT_EQ(dlock_release(next), DLOCK_OK);
}

// A request is for the holders at the time: a later holder, in the same client (whose watch of
// the request key may still stand) or in another, does not hear one made to an earlier holder;
// a request made to it, it hears.
TEST_F(EtcdTest, ALaterHolderDoesNotHearAnEarlierRequest) {
  Client first(etcd_->url()), second(etcd_->url()), asker(etcd_->url());
  const char* name = "asked-later";
  RequestsHeard heard_a, heard_b, heard_c;
  Options oa, ob, oc;
  oa.lease(10000);
  ob.lease(10000);
  oc.lease(10000);
  Listen(oa, &heard_a);
  Listen(ob, &heard_b);
  Listen(oc, &heard_c);
  dlock_lock *la = nullptr, *lb = nullptr, *lc = nullptr;
  ASSERT_EQ(dlock_acquire(first.get(), name, oa.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(AskUntilHeard(asker.get(), name, "for the first", heard_a));
  ASSERT_EQ(dlock_release(la), DLOCK_OK);

  ASSERT_EQ(dlock_acquire(first.get(), name, ob.get(), &lb), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(1000ms);
  EXPECT_EQ(heard_b.calls.load(), 0) << "the same client's next holder heard an earlier request";
  ASSERT_EQ(dlock_release(lb), DLOCK_OK);

  ASSERT_EQ(dlock_acquire(second.get(), name, oc.get(), &lc), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(1000ms);
  EXPECT_EQ(heard_c.calls.load(), 0) << "another client's next holder heard an earlier request";
  ASSERT_TRUE(AskUntilHeard(asker.get(), name, "for the last", heard_c));
  EXPECT_EQ(heard_c.reason(), "for the last");
  EXPECT_EQ(heard_a.calls.load(), 1);
  EXPECT_EQ(heard_b.calls.load(), 0);
  EXPECT_EQ(dlock_release(lc), DLOCK_OK);
}

TEST(EtcdTlsTest, ClientCertificatesAndTheServerCheck) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  EtcdCluster etcd({.tls = &certs, .client_cert_required = true});
  ASSERT_TRUE(etcd.ready());
  {
    Client c(etcd.url());
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(c.get(), "tls", nullptr, &l), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_release(l), DLOCK_OK);
  }
  const std::string base = "etcd://" + etcd.endpoints() + "?tls=1";
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open((base + "&ca=" + certs.other_ca_cert() + "&cert=" + certs.client_cert() +
                               "&key=" + certs.client_key()).c_str(), &c),
            DLOCK_EAUTH);
  EXPECT_NE(std::string(dlock_last_error()).find("TLS"), std::string::npos) << dlock_last_error();
  EXPECT_NE(dlock_client_open((base + "&ca=" + certs.ca_cert()).c_str(), &c), DLOCK_OK)
      << "no client certificate, yet the cluster let us in";
  EXPECT_EQ(dlock_client_open((base + "&ca=/no/such/ca.pem").c_str(), &c), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("/no/such/ca.pem"), std::string::npos);
}

}  // namespace
}  // namespace dlock_test
