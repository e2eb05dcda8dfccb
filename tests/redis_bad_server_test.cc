// A hostile server, through every reply path (blocking acquire, release, extend, async acquire,
// heartbeats): replies that are not RESP or have the wrong shape, absurd numbers, trickled and
// silent replies. Nothing crashes, nothing spins, every call ends within its documented bound:
//   one blocking call <= connect_timeout_ms + timeout_ms
//   an acquire that waits <= wait_ms + connect_timeout_ms + timeout_ms
// (asserted here with generous slack, so that it holds under sanitizers on busy cores).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "support/fake_redis.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
constexpr auto kSlack = 1500ms;

int64_t MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

struct BadReply {
  const char* what;
  std::string bytes;
  bool fine_for_release;  // a valid answer to release/extend (":1"), so only acquire is bad
};

const BadReply kBadReplies[] = {
    {"junk", "this is not RESP\r\n", false},
    {"bulk length -5", "$-5\r\n", false},
    {"arrays nested deeper than hiredis allows", std::string(10 * 4, ' '), false},  // filled below
    {"RESP3 map", "%1\r\n:1\r\n:1\r\n", false},
    {"nil", "$-1\r\n", false},
    {"null array", "*-1\r\n", false},
    {"token as an integer", "*2\r\n:1\r\n:42\r\n", false},
    {"token overflowing uint64", "*2\r\n:1\r\n$20\r\n99999999999999999999\r\n", false},
    {"empty token", "*2\r\n:1\r\n$0\r\n\r\n", false},
    {"three elements", "*3\r\n:1\r\n:2\r\n:3\r\n", false},
    {"pttl as a string", "*2\r\n:0\r\n$3\r\nabc\r\n", false},
    {"flag 7", "*2\r\n:7\r\n:1\r\n", false},
    {"empty array", "*0\r\n", false},
    {"integer 1", ":1\r\n", true},
    {"integer -7", ":-7\r\n", false},
    {"status OK", "+OK\r\n", false},
    {"array of arrays", "*1\r\n*0\r\n", false},
    {"array claiming 2 billion elements", "*2000000000\r\n", false},  // hiredis would reserve 16 GB
    {"array claiming -5 elements", "*-5\r\n", false},
    {"two replies to one command", "+OK\r\n+OK\r\n", false},  // hiredis async asserted on the 2nd
};

std::string Nested() {
  std::string s;
  for (int i = 0; i < 10; ++i) s += "*1\r\n";
  return s + ":1\r\n";
}

// Answers the handshake like Redis; EVALSHA with a grant while `grant` is set, else `bad`.
class Hostile {
 public:
  explicit Hostile(std::string bad)
      : bad_(std::move(bad)), fake_([this](const std::vector<std::string>& argv) {
          FakeReply r;
          if (FakeRedis::Handshake(argv, &r)) return r;
          if (grant_) return FakeReply{FakeRedis::Acquired(++token_)};
          return FakeReply{bad_};
        }) {}
  FakeRedis& fake() { return fake_; }
  std::atomic<bool> grant_{false};

 private:
  std::string bad_;
  std::atomic<uint64_t> token_{1000};
  FakeRedis fake_;
};

TEST(RedisBadServerTest, EveryReplyPathSurvivesEveryMalformedReply) {
  for (const BadReply& bad : kBadReplies) {
    std::string bytes = std::string(bad.what) == "arrays nested deeper than hiredis allows" ? Nested() : bad.bytes;
    SCOPED_TRACE(bad.what);
    Hostile server(bytes);
    Client client(server.fake().url("timeout_ms=1000"));
    ASSERT_NE(client.get(), nullptr);
    const std::string address = server.fake().address();

    // Blocking acquire.
    dlock_lock* l = nullptr;
    dlock_status s = dlock_acquire(client.get(), "x", nullptr, &l);
    EXPECT_TRUE(s == DLOCK_EBACKEND || s == DLOCK_EIO) << dlock_status_str(s);
    EXPECT_EQ(l, nullptr);
    EXPECT_NE(std::string(dlock_last_error()).find(address), std::string::npos) << dlock_last_error();

    // Async acquire, on the client's own thread.
    std::promise<dlock_status> done;
    ASSERT_EQ(dlock_acquire_async(
                  client.get(), "y", nullptr,
                  [](dlock_status st, dlock_lock* lock, void* arg) {
                    if (lock != nullptr) dlock_release(lock);
                    static_cast<std::promise<dlock_status>*>(arg)->set_value(st);
                  },
                  &done),
              DLOCK_OK);
    auto future = done.get_future();
    ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
    dlock_status async_status = future.get();
    EXPECT_TRUE(async_status == DLOCK_EBACKEND || async_status == DLOCK_EIO) << dlock_status_str(async_status);

    // Release and extend of a lock the server granted, then answered badly.
    server.grant_ = true;
    dlock_lock *held = nullptr, *renewed = nullptr;
    ASSERT_EQ(dlock_acquire(client.get(), "held", nullptr, &held), DLOCK_OK) << dlock_last_error();
    LostRecorder lost;
    Options heartbeats;
    heartbeats.lease(600).heartbeat(100).on_lost(LostRecorder::Fn, &lost);
    ASSERT_EQ(dlock_acquire(client.get(), "renewed", heartbeats.get(), &renewed), DLOCK_OK);
    server.grant_ = false;
    if (!bad.fine_for_release) {
      s = dlock_extend(held, 5000);
      EXPECT_TRUE(s == DLOCK_EBACKEND || s == DLOCK_EIO) << dlock_status_str(s);
      s = dlock_release(held);
      EXPECT_TRUE(s == DLOCK_EBACKEND || s == DLOCK_EIO) << dlock_status_str(s);
      // Heartbeats answered badly: the lock is reported lost by its local deadline.
      EXPECT_TRUE(WaitFor([&] { return lost.calls.load() == 1; }, 600ms + kSlack));
      EXPECT_EQ(dlock_lock_is_valid(renewed), 0);
    } else {
      EXPECT_EQ(dlock_release(held), DLOCK_OK);
    }
    dlock_release(renewed);
  }
}

TEST(RedisBadServerTest, AbsurdHolderTtlDoesNotSpin) {
  // A holder "with INT64_MAX ms left" once overflowed the waiting policy into a busy loop.
  for (long long pttl : {LLONG_MAX, LLONG_MAX - 1, -9LL}) {
    SCOPED_TRACE(pttl);
    FakeRedis fake([pttl](const std::vector<std::string>& argv) {
      FakeReply r;
      if (FakeRedis::Handshake(argv, &r)) return r;
      return FakeReply{FakeRedis::HeldFor(pttl)};
    });
    Client client(fake.url());
    Options wait;
    wait.wait(1500).retry(50, 200);
    dlock_lock* l = nullptr;
    EXPECT_EQ(dlock_acquire(client.get(), "busy", wait.get(), &l), DLOCK_NOT_ACQUIRED);
    std::promise<dlock_status> done;
    ASSERT_EQ(dlock_acquire_async(
                  client.get(), "busy", wait.get(),
                  [](dlock_status st, dlock_lock*, void* arg) {
                    static_cast<std::promise<dlock_status>*>(arg)->set_value(st);
                  },
                  &done),
              DLOCK_OK);
    EXPECT_EQ(done.get_future().get(), DLOCK_NOT_ACQUIRED);
    // Two waits of 1.5 s with retries of at most 200 ms: a few dozen attempts, not thousands.
    EXPECT_LT(fake.count("EVALSHA"), 60);
  }
}

TEST(RedisBadServerTest, GarbageOnThePubSubConnectionLeavesWaitersOnTheirRetry) {
  // The subscriber connection is a reply path too: waiters fall back on their jittered retry.
  for (const char* garbage : {"this is not RESP\r\n", "*2000000000\r\n", "*3\r\n:1\r\n:2\r\n:3\r\n"}) {
    SCOPED_TRACE(garbage);
    FakeRedis fake([garbage](const std::vector<std::string>& argv) {
      if (argv[0] == "SUBSCRIBE" || argv[0] == "UNSUBSCRIBE") return FakeReply{garbage};
      FakeReply r;
      if (FakeRedis::Handshake(argv, &r)) return r;
      return FakeReply{FakeRedis::HeldFor(100000)};
    });
    Client client(fake.url());
    // Retries at most 100 ms apart for 2 s: dozens of attempts; three need no quick machine.
    Options wait;
    wait.wait(2000).retry(20, 100);
    dlock_lock* l = nullptr;
    auto start = Clock::now();
    EXPECT_EQ(dlock_acquire(client.get(), "sub", wait.get(), &l), DLOCK_NOT_ACQUIRED) << dlock_last_error();
    EXPECT_LT(MsSince(start), 2000 + kSlack.count());
    EXPECT_GE(fake.count("EVALSHA"), 3) << "the waiter kept trying without its subscription";
  }
}

// A blocking and an async acquire against a server that answers every script with bytes;
// both statuses and messages.
struct AcquireOutcome {
  dlock_status blocking = DLOCK_OK, async = DLOCK_OK;
  std::string blocking_error, async_error;
};

AcquireOutcome AcquireBoth(const FakeRedis& fake, const std::string& params) {
  AcquireOutcome out;
  Client client(fake.url(params));
  EXPECT_NE(client.get(), nullptr);
  if (client.get() == nullptr) return out;
  dlock_lock* l = nullptr;
  out.blocking = dlock_acquire(client.get(), "x", nullptr, &l);
  out.blocking_error = dlock_last_error();
  if (l != nullptr) dlock_release(l);
  struct Done {
    std::promise<void> ready;
    dlock_status status = DLOCK_OK;
    std::string error;
  } done;
  EXPECT_EQ(dlock_acquire_async(
                client.get(), "y", nullptr,
                [](dlock_status st, dlock_lock* lock, void* arg) {
                  auto* d = static_cast<Done*>(arg);
                  d->status = st;
                  d->error = st == DLOCK_OK ? "" : dlock_last_error();
                  if (lock != nullptr) dlock_release(lock);
                  d->ready.set_value();
                },
                &done),
            DLOCK_OK);
  EXPECT_EQ(done.ready.get_future().wait_for(30s), std::future_status::ready);
  out.async = done.status;
  out.async_error = done.error;
  return out;
}

TEST(RedisBadServerTest, AnEndlessBulkStringStopsAtTheBufferedBytesLimit) {
  // "$99999999999" and then data, more than the 64 MiB a reader may hold: refused at the limit,
  // not buffered until the timeout (which is long here: the limit must end it first).
  FakeRedis fake([](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    r.bytes = "$99999999999\r\n";
    r.flood = size_t{80} << 20;
    return r;
  });
  AcquireOutcome got = AcquireBoth(fake, "timeout_ms=20000");
  EXPECT_EQ(got.blocking, DLOCK_EBACKEND) << got.blocking_error;
  EXPECT_NE(got.blocking_error.find("64 MiB"), std::string::npos) << got.blocking_error;
  EXPECT_NE(got.blocking_error.find(fake.address()), std::string::npos) << got.blocking_error;
  // On the loop the connection is lost with it: EIO, as for any reply that is not RESP.
  EXPECT_TRUE(got.async == DLOCK_EBACKEND || got.async == DLOCK_EIO) << got.async_error;
  EXPECT_NE(got.async_error.find("64 MiB"), std::string::npos) << got.async_error;
}

TEST(RedisBadServerTest, AStringOverTheStringLimitIsRefused) {
  // A whole bulk string of 17 MiB: under the buffered limit, over the 16 MiB a string may be.
  const size_t len = size_t{17} << 20;
  FakeRedis fake([len](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    r.bytes = "*2\r\n:1\r\n$" + std::to_string(len) + "\r\n" + std::string(len, '7') + "\r\n";
    return r;
  });
  AcquireOutcome got = AcquireBoth(fake, "timeout_ms=20000");
  EXPECT_EQ(got.blocking, DLOCK_EBACKEND) << got.blocking_error;
  EXPECT_NE(got.blocking_error.find("string over 16 MiB"), std::string::npos) << got.blocking_error;
  EXPECT_TRUE(got.async == DLOCK_EBACKEND || got.async == DLOCK_EIO) << got.async_error;
  EXPECT_NE(got.async_error.find("string over 16 MiB"), std::string::npos) << got.async_error;
}

TEST(RedisBadServerTest, ControlBytesInAnErrorReplyAreEscaped) {
  // An error reply carrying terminal escape sequences (a title change, clear screen, a bell):
  // dlock_last_error() shows them as \xNN, never raw.
  FakeRedis fake([](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    return FakeReply{"-ERR \x1b]0;pwned\x07\x1b[2J\x7f gone\r\n"};
  });
  AcquireOutcome got = AcquireBoth(fake, "");
  for (const std::string& e : {got.blocking_error, got.async_error}) {
    SCOPED_TRACE(e);
    EXPECT_NE(e.find("ERR \\x1b]0;pwned\\x07\\x1b[2J\\x7f gone"), std::string::npos);
    for (unsigned char c : e) EXPECT_FALSE(c < 0x20 || c == 0x7f) << "raw control byte " << int(c);
  }
  EXPECT_EQ(got.blocking, DLOCK_EBACKEND);
  EXPECT_EQ(got.async, DLOCK_EBACKEND);
}

// A cluster node whose CLUSTER SLOTS names `masters` distinct masters (one slot each, the
// rest of the slots its own), each with `host`.
std::string ClusterSlots(int masters, const std::string& host, int own_port) {
  std::string bytes = "*" + std::to_string(masters + 1) + "\r\n";
  auto range = [&](int first, int last, const std::string& h, int port) {
    bytes += "*3\r\n:" + std::to_string(first) + "\r\n:" + std::to_string(last) + "\r\n*2\r\n$" +
             std::to_string(h.size()) + "\r\n" + h + "\r\n:" + std::to_string(port) + "\r\n";
  };
  for (int i = 0; i < masters; ++i) range(i, i, host, 10000 + i);
  range(masters, 16383, "127.0.0.1", own_port);
  return bytes;
}

TEST(RedisBadServerTest, AClusterNamingTooManyNodesIsRefusedAtTheNodeLimit) {
  // 1100 masters: over the 1024 node addresses a client connects to. The map is refused whole,
  // with an error naming the limit, before any of those hosts is connected to.
  int port = 0;
  FakeRedis fake([&port](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    if (argv[0] == "CLUSTER") return FakeReply{ClusterSlots(1100, "127.0.0.2", port)};
    return FakeReply{FakeRedis::Acquired(5)};
  });
  port = std::stoi(fake.address().substr(fake.address().rfind(':') + 1));
  dlock_client* c = nullptr;
  const dlock_status s = dlock_client_open(("redis-cluster://" + fake.address()).c_str(), &c);
  const std::string error = dlock_last_error();
  EXPECT_NE(s, DLOCK_OK);
  EXPECT_NE(error.find("1024 node addresses"), std::string::npos) << error;
  dlock_client_close(c);

  // A map within the limit is served.
  FakeRedis fine([&port](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    if (argv[0] == "CLUSTER") return FakeReply{ClusterSlots(3, "127.0.0.2", port)};
    return FakeReply{FakeRedis::Acquired(5)};
  });
  port = std::stoi(fine.address().substr(fine.address().rfind(':') + 1));
  ASSERT_EQ(dlock_client_open(("redis-cluster://" + fine.address()).c_str(), &c), DLOCK_OK) << dlock_last_error();
  dlock_client_close(c);
}

TEST(RedisBadServerTest, AClusterNodeNamingAHostWithControlBytesIsRefused) {
  int port = 0;
  FakeRedis fake([&port](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    if (argv[0] == "CLUSTER") return FakeReply{ClusterSlots(1, "evil\x1b[2J.example", port)};
    return FakeReply{FakeRedis::Acquired(5)};
  });
  port = std::stoi(fake.address().substr(fake.address().rfind(':') + 1));
  dlock_client* c = nullptr;
  EXPECT_NE(dlock_client_open(("redis-cluster://" + fake.address()).c_str(), &c), DLOCK_OK);
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("host name"), std::string::npos) << error;
  for (unsigned char ch : error) EXPECT_FALSE(ch < 0x20 || ch == 0x7f) << "raw control byte " << int(ch);
  dlock_client_close(c);
}

// A sentinel naming its master at a host or port of control bytes: refused, with the bytes
// escaped in the message (a terminal never gets them raw).
TEST(RedisBadServerTest, ASentinelNamingAMasterWithControlBytesIsRefusedEscaped) {
  const std::string bad_host = "*2\r\n$16\r\nevil\x1b[2J.example\r\n$4\r\n6379\r\n";
  const std::string bad_port = "*2\r\n$9\r\n127.0.0.1\r\n$6\r\n\x1b[2J63\r\n";
  for (const std::string& answer : {bad_host, bad_port}) {
    FakeRedis fake([&answer](const std::vector<std::string>& argv) {
      FakeReply r;
      if (FakeRedis::Handshake(argv, &r)) return r;
      if (argv[0] == "SENTINEL") return FakeReply{answer};
      return FakeReply{"-ERR unexpected\r\n"};
    });
    dlock_client* c = nullptr;
    EXPECT_NE(dlock_client_open(("redis-sentinel://" + fake.address() + "/m?timeout_ms=2000").c_str(), &c),
              DLOCK_OK);
    const std::string error = dlock_last_error();
    EXPECT_NE(error.find("\\x1b[2J"), std::string::npos) << error;
    for (unsigned char ch : error) EXPECT_FALSE(ch < 0x20 || ch == 0x7f) << "raw control byte " << int(ch);
    dlock_client_close(c);
  }
}

TEST(RedisBadServerTest, TrickledRepliesAreBoundedByTimeoutMs) {
  // Each reply trickled one byte per 100 ms: every read is quick, the whole reply is not.
  std::atomic<bool> trickle_ping{true};
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply r;
    if (argv[0] == "PING" && trickle_ping) return FakeReply{"+PONG\r\n", 100};
    if (FakeRedis::Handshake(argv, &r)) return r;
    return FakeReply{FakeRedis::Acquired(77), 100};  // a valid grant, over 2.5 s
  });
  dlock_client* c = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_client_open(fake.url("timeout_ms=300").c_str(), &c), DLOCK_EIO);
  EXPECT_LT(MsSince(start), 300 + kSlack.count());
  EXPECT_NE(std::string(dlock_last_error()).find("timeout_ms=300"), std::string::npos) << dlock_last_error();

  trickle_ping = false;
  Client client(fake.url("timeout_ms=500"));
  dlock_lock* l = nullptr;
  start = Clock::now();
  EXPECT_EQ(dlock_acquire(client.get(), "t", nullptr, &l), DLOCK_EIO);
  int64_t took = MsSince(start);
  EXPECT_GE(took, 450);
  EXPECT_LT(took, 500 + kSlack.count());
  EXPECT_EQ(l, nullptr);
}

TEST(RedisBadServerTest, HandshakeIsBoundedByConnectTimeoutMs) {
  FakeRedis fake([](const std::vector<std::string>& argv) {
    FakeReply r;
    if (argv[0] == "AUTH") return FakeReply{"+OK\r\n", 100};  // 500 ms in all
    FakeRedis::Handshake(argv, &r);
    return r;
  });
  dlock_client* c = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_client_open(("redis://:pw@" + fake.address() + "?connect_timeout_ms=200&timeout_ms=5000").c_str(), &c),
            DLOCK_EIO);
  EXPECT_LT(MsSince(start), 200 + kSlack.count());
  EXPECT_NE(std::string(dlock_last_error()).find("connect_timeout_ms=200"), std::string::npos) << dlock_last_error();
}

TEST(RedisBadServerTest, SilentServerCostsOneTimeoutPerCall) {
  // Once it cost three (a pooled try, a retry on a fresh connection, a blocking give-back).
  std::atomic<bool> grant{false};
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    if (grant) return FakeReply{FakeRedis::Acquired(5)};
    return FakeReply{"", 0, /*silent=*/true};
  });
  // One timeout is 1.5 s, the bound (C + T) 2 s; with the slack (1.5 s) it stays below three
  // timeouts (4.5 s).
  Client client(fake.url("timeout_ms=1500&connect_timeout_ms=500"));
  dlock_lock* l = nullptr;
  auto start = Clock::now();
  EXPECT_EQ(dlock_acquire(client.get(), "s", nullptr, &l), DLOCK_EIO);
  int64_t took = MsSince(start);
  EXPECT_GE(took, 1450);
  EXPECT_LT(took, 2000 + kSlack.count()) << "more than connect_timeout_ms + timeout_ms";

  grant = true;
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "s2", nullptr, &held), DLOCK_OK) << dlock_last_error();
  grant = false;
  start = Clock::now();
  EXPECT_EQ(dlock_extend(held, 5000), DLOCK_EIO);
  EXPECT_LT(MsSince(start), 2000 + kSlack.count());
  start = Clock::now();
  EXPECT_EQ(dlock_release(held), DLOCK_EIO);
  EXPECT_LT(MsSince(start), 2000 + kSlack.count());
}

TEST(RedisBadServerTest, CloseHoldingManyLocksIsBoundedWhenTheServerFallsSilent) {
  // Once it released them one by one, a timeout each: 200 locks, 200 timeouts.
  std::atomic<bool> grant{true};
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r) && grant) return r;
    if (grant) return FakeReply{FakeRedis::Acquired(9)};
    return FakeReply{"", 0, /*silent=*/true};
  });
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open(fake.url("timeout_ms=500&connect_timeout_ms=500").c_str(), &c), DLOCK_OK);
  std::vector<dlock_lock*> held(200, nullptr);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(dlock_acquire(c, ("many" + std::to_string(i)).c_str(), nullptr, &held[i]), DLOCK_OK);
  }
  grant = false;
  auto start = Clock::now();
  dlock_client_close(c);
  // C + T for the pipelined release, and the 3 s close waits for answers to async requests in
  // flight.
  EXPECT_LT(MsSince(start), 500 + 500 + 3000 + kSlack.count());
  for (dlock_lock* l : held) EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);  // frees the handles
}

TEST(RedisBadServerTest, CloseIsBoundedWhenTheServerTricklesEachAnswer) {
  // Each release answered in 400 ms, within timeout_ms: once every answer had its own
  // timeout_ms, so 200 locks took 80 s to close. The pipeline is now one bounded call.
  std::atomic<bool> grant{true};
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply r;
    if (FakeRedis::Handshake(argv, &r)) return r;
    if (grant) return FakeReply{FakeRedis::Acquired(9)};
    return FakeReply{":1\r\n", /*trickle_ms=*/100};
  });
  dlock_client* c = nullptr;
  ASSERT_EQ(dlock_client_open(fake.url("timeout_ms=500&connect_timeout_ms=500").c_str(), &c), DLOCK_OK);
  std::vector<dlock_lock*> held(200, nullptr);
  for (size_t i = 0; i < held.size(); ++i) {
    ASSERT_EQ(dlock_acquire(c, ("slow" + std::to_string(i)).c_str(), nullptr, &held[i]), DLOCK_OK);
  }
  grant = false;
  auto start = Clock::now();
  dlock_client_close(c);
  EXPECT_LT(MsSince(start), 500 + 500 + 3000 + kSlack.count()) << "more than C + T + 3 s";
  for (dlock_lock* l : held) EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

TEST(RedisBadServerTest, WaitIsBoundedWhenTheServerPauses) {
  RedisServer redis;
  Client holder(redis.url());
  dlock_lock* held;
  ASSERT_EQ(dlock_acquire(holder.get(), "p", nullptr, &held), DLOCK_OK);
  Client waiter(redis.url() + "?timeout_ms=1000&connect_timeout_ms=500");
  std::thread pauser([&] {
    std::this_thread::sleep_for(200ms);
    redis.Cli({"CLIENT", "PAUSE", "5000", "ALL"});
  });
  Options wait;
  wait.wait(1000);
  dlock_lock* l = nullptr;
  auto start = Clock::now();
  dlock_status s = dlock_acquire(waiter.get(), "p", wait.get(), &l);
  int64_t took = MsSince(start);
  EXPECT_TRUE(s == DLOCK_NOT_ACQUIRED || s == DLOCK_EIO) << dlock_status_str(s);
  EXPECT_LT(took, 1000 + 500 + 1000 + kSlack.count()) << "more than wait_ms + connect_timeout_ms + timeout_ms";
  pauser.join();
  redis.Cli({"CLIENT", "UNPAUSE"});
  dlock_release(held);
}

}  // namespace
}  // namespace dlock_test
