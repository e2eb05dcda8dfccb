// What only the PostgreSQL backend does, through the public C API against a real PostgreSQL
// (support/postgres_server.h): its behaviour shared with every backend is in conformance/.
// Connections dropped by the server do not drop locks (they are rows, not sessions); a lock
// table dropped by hand is a loss, reported; names and table names that look like SQL are
// stored as they are; a server that hangs (SIGSTOP) cannot hold a call past its bound; tls=1
// checks the server's certificate, and cert= and key= show the client's.
#include <dlock/dlock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/postgres_server.h"
#include "support/tls_certs.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::string Literal(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

struct Lost {
  std::atomic<int> count{0};
  static void Told(const char*, uint64_t, void* arg) { ++static_cast<Lost*>(arg)->count; }
};

class PostgresBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(pg_.running()); }
  void TearDown() override {
    if (client_ != nullptr) dlock_client_close(client_);
    if (options_ != nullptr) dlock_options_free(options_);
  }
  // A client of url (prepared first), and options with lease and heartbeat.
  void Open(const std::string& url, uint64_t lease_ms, uint64_t heartbeat_ms) {
    ASSERT_EQ(dlock_backend_prepare(url.c_str(), 10000), DLOCK_OK) << dlock_last_error();
    ASSERT_EQ(dlock_client_open(url.c_str(), &client_), DLOCK_OK) << dlock_last_error();
    options_ = dlock_options_new();
    dlock_options_set_lease_ms(options_, lease_ms);
    dlock_options_set_heartbeat_ms(options_, heartbeat_ms);
    dlock_options_set_wait_ms(options_, 0);
    dlock_options_set_on_lost(options_, &Lost::Told, &lost_);
  }
  // Holders the server lists for name (rows of holds in table).
  std::string Holds(const std::string& table, const std::string& name) {
    return pg_.Sql("SELECT count(*) FROM " + table + " WHERE name = " + Literal(name) + " AND kind IN ('x', 's', 'p')")
        .value_or("error");
  }

  PostgresServer pg_;
  dlock_client* client_ = nullptr;
  dlock_options* options_ = nullptr;
  Lost lost_;
};

TEST_F(PostgresBackendTest, ADroppedConnectionDropsNoLockAndTheHeartbeatReconnects) {
  // Renewed every 300 ms: valid past the lease only if the renewals found new connections (a
  // busy machine may delay one by up to 2.5 s and still pass).
  Open(pg_.url(), 3000, 300);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "dropped", options_, &l), DLOCK_OK) << dlock_last_error();
  // Every connection of the client, closed by the server, as a restart of a pooler would.
  auto dropped = pg_.Sql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'dlock'");
  ASSERT_TRUE(dropped.has_value());
  EXPECT_NE(*dropped, "0\n") << "no connection of the client was found to drop";
  // Past the lease: only renewals over new connections keep it.
  std::this_thread::sleep_for(3500ms);
  EXPECT_EQ(dlock_lock_is_valid(l), 1) << dlock_lock_lost_cause(l);
  EXPECT_EQ(lost_.count.load(), 0);
  EXPECT_EQ(Holds("dlock_locks", "dropped"), "1\n");
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(Holds("dlock_locks", "dropped"), "0\n");
}

TEST_F(PostgresBackendTest, ALockTableDroppedByHandIsALossReported) {
  const std::string url = pg_.url() + "?table=dropped_by_hand";
  Open(url, 10000, 100);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "gone", options_, &l), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(pg_.Sql("DROP TABLE dropped_by_hand"));
  const auto dropped_at = Clock::now();
  while (lost_.count.load() == 0 && MsSince(dropped_at) < 12000) std::this_thread::sleep_for(10ms);
  const char* cause = dlock_lock_lost_cause(l);
  EXPECT_EQ(lost_.count.load(), 1) << "the loss was not reported (cause: " << (cause ? cause : "none yet") << ")";
  EXPECT_LT(MsSince(dropped_at), 3000) << "found by a renewal, not at the lease's end";
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  ASSERT_NE(dlock_lock_lost_cause(l), nullptr);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  // The next acquire says what to do.
  EXPECT_EQ(dlock_acquire(client_, "gone", options_, &l), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("not prepared"), std::string::npos) << dlock_last_error();
}

TEST_F(PostgresBackendTest, NamesAndTableNamesThatLookLikeSqlAreStoredAsTheyAre) {
  Open(pg_.url() + "?table=we%22ird%3B%20DROP%20TABLE%20x", 10000, 0);
  const std::string quoted_table = "\"we\"\"ird; DROP TABLE x\"";
  for (const std::string name : {"x'); DROP TABLE dlock_locks; --", "\"quoted\"", "$1", "%s %n", "back\\slash",
                                 "new\nline", "\xc3\xa9t\xc3\xa9"}) {
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(client_, name.c_str(), options_, &l), DLOCK_OK) << name << ": " << dlock_last_error();
    EXPECT_EQ(Holds(quoted_table, name), "1\n") << name;
    dlock_info* info = nullptr;
    ASSERT_EQ(dlock_inspect(client_, name.c_str(), &info), DLOCK_OK) << dlock_last_error();
    EXPECT_EQ(dlock_info_holders(info), 1u) << name;
    dlock_info_free(info);
    EXPECT_EQ(dlock_release(l), DLOCK_OK) << name;
    EXPECT_EQ(Holds(quoted_table, name), "0\n") << name;
  }
  EXPECT_EQ(pg_.Sql("SELECT count(*) FROM " + quoted_table + " WHERE hold = ''"), "7\n");
}

TEST_F(PostgresBackendTest, AHungServerHoldsNoCallPastItsBound) {
  Open(pg_.url() + "?timeout_ms=600&connect_timeout_ms=600", 10000, 0);
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "hung", options_, &held), DLOCK_OK) << dlock_last_error();
  pg_.Stop();
  auto t = Clock::now();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client_, "hung-2", options_, &l), DLOCK_EIO);
  EXPECT_LT(MsSince(t), 600 + 1500);
  EXPECT_NE(std::string(dlock_last_error()).find("timeout_ms"), std::string::npos) << dlock_last_error();
  t = Clock::now();
  dlock_info* info = nullptr;
  EXPECT_EQ(dlock_inspect(client_, "hung", &info), DLOCK_EIO);
  EXPECT_LT(MsSince(t), 600 + 1500);
  t = Clock::now();
  EXPECT_EQ(dlock_release(held), DLOCK_EIO);
  EXPECT_LT(MsSince(t), 600 + 1500);
  pg_.Cont();
  // Answering again: a new connection works at once.
  ASSERT_EQ(dlock_acquire(client_, "hung-3", options_, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A closing client releases every lock it still holds in one statement: all of them go, and a
// hung server holds the close for one timeout_ms, not one per lock.
TEST_F(PostgresBackendTest, AClosingClientReleasesEveryLockInOneStatement) {
  constexpr int kLocks = 16;
  Open(pg_.url() + "?timeout_ms=600&connect_timeout_ms=600", 10000, 0);
  for (int round = 0; round < 2; ++round) {
    dlock_client* c = nullptr;
    ASSERT_EQ(dlock_client_open((pg_.url() + "?timeout_ms=600&connect_timeout_ms=600").c_str(), &c), DLOCK_OK)
        << dlock_last_error();
    for (int i = 0; i < kLocks; ++i) {
      dlock_lock* l = nullptr;  // left to the close
      ASSERT_EQ(dlock_acquire(c, ("closing-" + std::to_string(i)).c_str(), options_, &l), DLOCK_OK)
          << dlock_last_error();
    }
    EXPECT_EQ(pg_.Sql("SELECT count(*) FROM dlock_locks WHERE name LIKE 'closing-%' AND kind = 'x'").value_or(""),
              std::to_string(kLocks) + "\n");
    if (round == 1) pg_.Stop();
    const auto t = Clock::now();
    dlock_client_close(c);
    if (round == 0) {
      EXPECT_EQ(pg_.Sql("SELECT count(*) FROM dlock_locks WHERE name LIKE 'closing-%' AND kind = 'x'").value_or(""),
                "0\n")
          << "the close left locks behind";
    } else {
      EXPECT_LT(MsSince(t), 600 + 1500) << "a hung server held the close once per lock";
      pg_.Cont();
    }
  }
}

// PgBouncer in transaction pooling, two server connections shared by every client: locks are
// rows, not sessions, so they hold while the pool hands connections around. LISTEN does not
// work through it: a notification reaches whichever client the pool lends the listening server
// connection to at the time, so a waiter may be woken by chance and otherwise comes in by the
// holder's lease and the jittered retry (docs/postgres.md). Either way, they take turns with
// no overlap.
TEST_F(PostgresBackendTest, LocksHoldThroughPgBouncersTransactionPooling) {
  const int port = pg_.StartPgBouncer(2);
  ASSERT_GT(port, 0);
  const std::string url = "postgres://dlock@127.0.0.1:" + std::to_string(port) + "/dlock";
  Open(url, 3000, 300);
  dlock_client* other = nullptr;
  ASSERT_EQ(dlock_client_open(url.c_str(), &other), DLOCK_OK) << dlock_last_error();
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "pooled", options_, &held), DLOCK_OK) << dlock_last_error();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(other, "pooled", options_, &l), DLOCK_NOT_ACQUIRED);
  std::this_thread::sleep_for(3500ms);  // past the lease: renewed through the pool
  EXPECT_EQ(dlock_lock_is_valid(held), 1) << dlock_lock_lost_cause(held);
  EXPECT_EQ(dlock_acquire(other, "pooled", options_, &l), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_release(held), DLOCK_OK) << dlock_last_error();
  dlock_client_close(other);

  // Three clients take turns on one counter, each waiting for the others.
  constexpr int kClients = 3, kRounds = 4;
  std::atomic<int> inside{0}, overlaps{0}, done{0};
  int counter = 0;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      dlock_client* c = nullptr;
      if (dlock_client_open(url.c_str(), &c) != DLOCK_OK) return;
      dlock_options* o = dlock_options_new();
      dlock_options_set_lease_ms(o, 1500);
      dlock_options_set_wait_ms(o, 20000);
      for (int r = 0; r < kRounds; ++r) {
        dlock_lock* mine = nullptr;
        if (dlock_acquire(c, "pooled-counter", o, &mine) != DLOCK_OK) continue;
        if (inside.fetch_add(1) != 0) ++overlaps;
        const int seen = counter;
        std::this_thread::sleep_for(5ms);
        counter = seen + 1;
        inside.fetch_sub(1);
        if (dlock_release(mine) == DLOCK_OK) ++done;
      }
      dlock_options_free(o);
      dlock_client_close(c);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(done.load(), kClients * kRounds);
  EXPECT_EQ(counter, kClients * kRounds);
}

// The connections of every client of this database that are (encrypted) or not, as
// "encrypted|plain", from the server's pg_stat_ssl.
std::string TlsCounts(PostgresServer& pg) {
  return pg.Sql("SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) FROM pg_stat_ssl s "
                "JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'dlock'")
      .value_or("error");
}

// tls=1 is sslmode=verify-full: the server's certificate must come from ca= and name the host.
// tls_verify=0 encrypts without checking.
TEST_F(PostgresBackendTest, TlsChecksTheServersCertificate) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  ASSERT_TRUE(pg_.EnableTls(certs.server_cert(), certs.server_key()));
  const std::string url = pg_.url() + "?tls=1&ca=" + certs.ca_cert();
  Open(url, 10000, 0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "over-tls", options_, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(l), 0u);
  EXPECT_EQ(TlsCounts(pg_), "1|0\n") << "the client's connection is not encrypted";
  EXPECT_EQ(Holds("dlock_locks", "over-tls"), "1\n");
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();

  // A server whose certificate another CA issued is refused, and the error says why.
  dlock_client* other = nullptr;
  const std::string wrong_ca = pg_.url() + "?tls=1&ca=" + certs.other_ca_cert();
  EXPECT_EQ(dlock_client_open(wrong_ca.c_str(), &other), DLOCK_EIO);
  EXPECT_NE(std::string(dlock_last_error()).find("certificate verify failed"), std::string::npos) << dlock_last_error();
  // tls_verify=0: encrypted, unchecked.
  const std::string unchecked = wrong_ca + "&tls_verify=0";
  ASSERT_EQ(dlock_client_open(unchecked.c_str(), &other), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(other, "over-tls", options_, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(TlsCounts(pg_), "2|0\n");
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  dlock_client_close(other);
}

// cert= and key= are the client's certificate, for a server that asks for one.
TEST_F(PostgresBackendTest, TlsShowsTheClientsCertificate) {
  TestCertificates certs;
  ASSERT_TRUE(certs.ok());
  ASSERT_TRUE(pg_.EnableTls(certs.server_cert(), certs.server_key(), certs.ca_cert()));
  const std::string url = pg_.url() + "?tls=1&ca=" + certs.ca_cert();
  dlock_client* c = nullptr;
  EXPECT_NE(dlock_client_open(url.c_str(), &c), DLOCK_OK) << "a client with no certificate was let in";
  EXPECT_NE(std::string(dlock_last_error()).find("certificate"), std::string::npos) << dlock_last_error();
  Open(url + "&cert=" + certs.client_cert() + "&key=" + certs.client_key(), 10000, 0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client_, "with-cert", options_, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

}  // namespace
}  // namespace dlock_test
