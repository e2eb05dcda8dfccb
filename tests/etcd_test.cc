// What only etcd does, against a real 3-node cluster (support/etcd_cluster.h); every behaviour
// a user relies on is in conformance/, and a leader's death in failover_test.cc.
#include <dlock/dlock.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <regex>
#include <string>
#include <thread>
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

// A keepalive answered without a TTL means etcd no longer has the lease: every lock on it is
// lost, and reported.
TEST_F(EtcdTest, ARevokedLeaseIsALostLockReported) {
  Client c(etcd_->url());
  LostRecorder lost;
  Options o;
  o.lease(3000).heartbeat(500).on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "revoked", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const std::string lease = LeaseOf("revoked");
  ASSERT_NE(lease, "0");
  ASSERT_TRUE(etcd_->Post("/v3/lease/revoke", R"({"ID":")" + lease + R"("})").has_value());
  const auto revoked = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return lost.calls.load() > 0; }, 5000ms)) << "never reported";
  EXPECT_LT(MsSince(revoked), 2000) << "found by the next heartbeat, not the local deadline";
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
Options& Permits(Options& o, uint32_t n) {
  EXPECT_EQ(dlock_options_set_permits(o.mutable_get(), n), DLOCK_OK);
  return o;
}

TEST_F(EtcdTest, KindsAreOffered) {
  Client c(etcd_->url());
  EXPECT_EQ(dlock_client_capabilities(c.get()) & (DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS),
            DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS);
}

// Three readers at once; inspect lists each with its label, lease and token.
TEST_F(EtcdTest, ThreeSharedHoldersAtOnceAndInspectListsThem) {
  Client a(etcd_->url()), b(etcd_->url()), c(etcd_->url()), look(etcd_->url());
  Options oa, ob, oc;
  Shared(oa).owner("reader-a").lease(10000);
  Shared(ob).owner("reader-b").lease(10000);
  Shared(oc).owner("reader-c").lease(0);
  dlock_lock *la = nullptr, *lb = nullptr, *lc = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "readers", oa.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "readers", ob.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "readers", oc.get(), &lc), DLOCK_OK) << dlock_last_error();
  EXPECT_LT(dlock_lock_fencing_token(la), dlock_lock_fencing_token(lb));
  EXPECT_LT(dlock_lock_fencing_token(lb), dlock_lock_fencing_token(lc));
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(look.get(), "readers", &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_kind(info), DLOCK_SHARED);
  EXPECT_EQ(dlock_info_permits(info), 0u);
  ASSERT_EQ(dlock_info_holders(info), 3u);
  // In acquisition order (by token).
  EXPECT_STREQ(dlock_info_owner(info, 0), "reader-a");
  EXPECT_STREQ(dlock_info_owner(info, 1), "reader-b");
  EXPECT_STREQ(dlock_info_owner(info, 2), "reader-c");
  EXPECT_EQ(dlock_info_fencing_token(info, 0), dlock_lock_fencing_token(la));
  EXPECT_EQ(dlock_info_fencing_token(info, 2), dlock_lock_fencing_token(lc));
  EXPECT_GT(dlock_info_remaining_ms(info, 0), 5000);
  EXPECT_EQ(dlock_info_remaining_ms(info, 2), -1) << "no lease, no expiry";
  dlock_info_free(info);
  // Each hold is released (and extended) on its own.
  EXPECT_EQ(dlock_extend(la, 20000), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_inspect(look.get(), "readers", &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 2u);
  dlock_info_free(info);
  EXPECT_EQ(dlock_release(la), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(lc), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_inspect(look.get(), "readers", &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u);
  dlock_info_free(info);
}

// A writer is refused while readers hold the name, and granted (woken by the last release,
// not a retry) once they are gone; readers are refused while it holds.
TEST_F(EtcdTest, ExclusiveWaitsForEverySharedHold) {
  Client r1(etcd_->url()), r2(etcd_->url()), w(etcd_->url());
  Options shared, once, waiting;
  Shared(shared).lease(10000);
  once.wait(0);
  waiting.wait(20000).retry(5000, 5000);
  dlock_lock *l1 = nullptr, *l2 = nullptr, *lw = nullptr;
  ASSERT_EQ(dlock_acquire(r1.get(), "rw", shared.get(), &l1), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(r2.get(), "rw", shared.get(), &l2), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(w.get(), "rw", once.get(), &lw), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find("ms more"), std::string::npos)
      << "a refusal says how long the readers may hold: " << dlock_last_error();
  std::atomic<bool> done{false};
  dlock_status got = DLOCK_EINTERNAL;
  std::thread writer([&] {
    got = dlock_acquire(w.get(), "rw", waiting.get(), &lw);
    done = true;
  });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(done.load()) << "granted while a reader held";
  const uint64_t reader_token = dlock_lock_fencing_token(l2);  // l2 is freed by its release
  const auto released = Clock::now();
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
  writer.join();
  ASSERT_EQ(got, DLOCK_OK) << dlock_last_error();
  EXPECT_LT(MsSince(released), 2500) << "woken by the release, not its 5 s retry";
  EXPECT_GT(dlock_lock_fencing_token(lw), reader_token) << "tokens rise across kinds";
  Options shared_once;
  Shared(shared_once).wait(0);
  EXPECT_EQ(dlock_acquire(r1.get(), "rw", shared_once.get(), &l1), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_release(lw), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(r1.get(), "rw", shared_once.get(), &l1), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
}

// A waiting writer's announcement stops new readers (no writer starvation); once it acquires,
// the announcement is gone, and after its release readers get in again at once.
TEST_F(EtcdTest, AWaitingWriterStopsNewReaders) {
  Client r1(etcd_->url()), r2(etcd_->url()), w(etcd_->url());
  Options shared, shared_once, waiting;
  Shared(shared).lease(10000);
  Shared(shared_once).wait(0);
  waiting.lease(10000).wait(30000);
  dlock_lock *l1 = nullptr, *l2 = nullptr, *lw = nullptr;
  ASSERT_EQ(dlock_acquire(r1.get(), "starve", shared.get(), &l1), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(r2.get(), "starve", shared_once.get(), &l2), DLOCK_OK) << "no writer yet";
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
  dlock_status got = DLOCK_EINTERNAL;
  std::thread writer([&] { got = dlock_acquire(w.get(), "starve", waiting.get(), &lw); });
  // Once its first attempt was refused, the announcement stands.
  EXPECT_TRUE(WaitFor([&] {
    if (dlock_acquire(r2.get(), "starve", shared_once.get(), &l2) == DLOCK_NOT_ACQUIRED) return true;
    dlock_release(l2);
    return false;
  }, 5000ms)) << "readers still get in while a writer waits";
  const std::string refusal = dlock_last_error();
  EXPECT_NE(refusal.find("ms more"), std::string::npos) << "says how long the announcement may stand: " << refusal;
  // While a reader holds, the announcement stays (the writer refreshes it).
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(dlock_acquire(r2.get(), "starve", shared_once.get(), &l2), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
  writer.join();
  ASSERT_EQ(got, DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(lw), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(r2.get(), "starve", shared_once.get(), &l2), DLOCK_OK)
      << "the writer's announcement outlived its acquire: " << dlock_last_error();
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
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
  EXPECT_LT(MsSince(gave_up), 4000) << "the writer's announcement outlived its wait by far";
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
}

// A semaphore of 2 refuses a third holder; an acquire asking another size, or a lock of a
// name that is a semaphore (and the other way round), is EINVAL saying what the name is.
TEST_F(EtcdTest, SemaphoreCountsAndSortsAreChecked) {
  Client a(etcd_->url()), b(etcd_->url()), c(etcd_->url());
  Options two, three, shared, exclusive, two_waiting;
  Permits(two, 2).wait(0).owner("permit");
  Permits(three, 3).wait(0);
  Shared(shared).wait(0);
  exclusive.wait(0);
  Permits(two_waiting, 2).wait(10000).retry(5000, 5000);
  dlock_lock *l1 = nullptr, *l2 = nullptr, *l3 = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "sem", two.get(), &l1), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "sem", two.get(), &l2), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(c.get(), "sem", two.get(), &l3), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_acquire(c.get(), "sem", three.get(), &l3), DLOCK_EINVAL);
  const std::string mixed = dlock_last_error();
  EXPECT_NE(mixed.find("semaphore of 2 permits"), std::string::npos) << mixed;
  EXPECT_NE(mixed.find("asked for a semaphore of 3 permits"), std::string::npos) << mixed;
  EXPECT_EQ(dlock_acquire(c.get(), "sem", shared.get(), &l3), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("semaphore of 2 permits"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(c.get(), "sem", exclusive.get(), &l3), DLOCK_EINVAL);
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(c.get(), "sem", &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_kind(info), DLOCK_EXCLUSIVE);
  EXPECT_EQ(dlock_info_permits(info), 2u);
  ASSERT_EQ(dlock_info_holders(info), 2u);
  EXPECT_STREQ(dlock_info_owner(info, 1), "permit");
  dlock_info_free(info);
  // A waiter for a permit is woken by a release.
  dlock_status got = DLOCK_EINTERNAL;
  std::thread waiter([&] { got = dlock_acquire(c.get(), "sem", two_waiting.get(), &l3); });
  std::this_thread::sleep_for(500ms);
  const auto released = Clock::now();
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
  waiter.join();
  ASSERT_EQ(got, DLOCK_OK) << dlock_last_error();
  EXPECT_LT(MsSince(released), 2500) << "woken by the release, not its 5 s retry";
  EXPECT_EQ(dlock_release(l2), DLOCK_OK);
  EXPECT_EQ(dlock_release(l3), DLOCK_OK);
  // Free: of any sort again.
  ASSERT_EQ(dlock_acquire(c.get(), "sem", three.get(), &l3), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(a.get(), "sem", exclusive.get(), &l1), DLOCK_EINVAL);
  EXPECT_EQ(dlock_release(l3), DLOCK_OK);
  ASSERT_EQ(dlock_acquire(a.get(), "sem", shared.get(), &l1), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_acquire(c.get(), "sem", three.get(), &l3), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("is a lock"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_release(l1), DLOCK_OK);
}

// Six clients contend for a semaphore of 2: never a third holder at once (the count is
// decided in one transaction against concurrent acquires).
TEST_F(EtcdTest, SemaphoreNeverHasMoreThanItsPermits) {
  constexpr int kClients = 6, kRounds = 8;
  std::atomic<int> inside{0}, most{0}, acquired{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      Client c(etcd_->url());
      Options o;
      Permits(o, 2).lease(5000).wait(30000).retry(10, 50);
      for (int k = 0; k < kRounds; ++k) {
        dlock_lock* l = nullptr;
        if (dlock_acquire(c.get(), "crowded", o.get(), &l) != DLOCK_OK) {
          ADD_FAILURE() << dlock_last_error();
          return;
        }
        const int now = ++inside;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(10ms);
        --inside;
        ++acquired;
        EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(acquired.load(), kClients * kRounds);
  EXPECT_LE(most.load(), 2);
  EXPECT_EQ(most.load(), 2) << "two holders at once never happened";
}

// Every acquisition of a name, of every kind, gets a token above every earlier one.
TEST_F(EtcdTest, TokensRiseAcrossKinds) {
  Client c(etcd_->url());
  Options exclusive, shared, permits;
  Shared(shared);
  Permits(permits, 3);
  uint64_t last = 0;
  for (int round = 0; round < 2; ++round) {
    for (const Options* o : {&exclusive, &shared, &permits, &shared, &exclusive}) {
      dlock_lock* l = nullptr;
      ASSERT_EQ(dlock_acquire(c.get(), "kinds-tokens", o->get(), &l), DLOCK_OK) << dlock_last_error();
      EXPECT_GT(dlock_lock_fencing_token(l), last);
      last = dlock_lock_fencing_token(l);
      EXPECT_EQ(dlock_release(l), DLOCK_OK);
    }
  }
}

// A reader whose client vanished (no heartbeat, no release) frees the name when its lease
// runs out on etcd; a waiting writer gets it then.
TEST_F(EtcdTest, AVanishedReadersHoldExpires) {
  Client gone(etcd_->url()), writer(etcd_->url());
  Options shared, waiting;
  Shared(shared).lease(1000).heartbeat(0);
  waiting.wait(15000);
  dlock_lock* lr = nullptr;
  ASSERT_EQ(dlock_acquire(gone.get(), "vanished", shared.get(), &lr), DLOCK_OK) << dlock_last_error();
  const auto start = Clock::now();
  dlock_lock* lw = nullptr;
  ASSERT_EQ(dlock_acquire(writer.get(), "vanished", waiting.get(), &lw), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(MsSince(start), 900) << "granted before the reader's lease ran out";
  EXPECT_LT(MsSince(start), 6000) << "the lease is ~1 s, rounded up to etcd's whole seconds";
  EXPECT_GT(dlock_lock_fencing_token(lw), dlock_lock_fencing_token(lr));
  EXPECT_EQ(dlock_release(lw), DLOCK_OK);
  EXPECT_EQ(dlock_release(lr), DLOCK_NOT_HELD);
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

// TLS: https to every endpoint, the server checked against ca=, and a client certificate
// where the cluster asks for one.
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
