// What only the Redis backend does (every backend's behaviour is in conformance/): its key layout,
// capabilities, tokens across a restart that lost the data, scripts reloaded, URL options, auth.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

class RedisBasicTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisBasicTest, KeyLayout) {
  ASSERT_TRUE(redis_.running());
  Client client(redis_.url());
  Options opts;
  opts.lease(5000).owner("worker-7");
  dlock_lock* lock = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), "jobs/nightly", opts.get(), &lock), DLOCK_OK) << dlock_last_error();
  // The holder key, with the lease: the secret owner token, then the label.
  std::string holder = redis_.Cli({"GET", "dlock:{jobs/nightly}"});
  EXPECT_EQ(holder.size(), 32u + 1 + 8) << holder;
  EXPECT_EQ(holder.substr(32), "|worker-7");
  int pttl = std::stoi(redis_.Cli({"PTTL", "dlock:{jobs/nightly}"}));
  EXPECT_GT(pttl, 4000);
  EXPECT_EQ(redis_.Cli({"GET", "dlock:{jobs/nightly}:fence"}), std::to_string(dlock_lock_fencing_token(lock)));
  EXPECT_EQ(redis_.Cli({"TTL", "dlock:{jobs/nightly}:fence"}), "-1");  // the counter never expires

  EXPECT_EQ(dlock_release(lock), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{jobs/nightly}"}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{jobs/nightly}:fence"}), "1");
}

TEST_F(RedisBasicTest, CapabilitiesAndPrepare) {
  Client client(redis_.url());
  EXPECT_EQ(dlock_client_capabilities(client.get()),
            DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_NOTIFIES | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS |
                DLOCK_CAP_FAIR | DLOCK_CAP_OBSERVE_PUSH | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST);
  EXPECT_EQ(dlock_client_capabilities(nullptr), 0u);
  // Redis needs nothing prepared: the URL is checked, nothing is written.
  EXPECT_EQ(dlock_backend_prepare(redis_.url().c_str(), 0), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(redis_.Cli({"DBSIZE"}), "0");
  EXPECT_EQ(dlock_backend_prepare((redis_.url() + "?nope=1").c_str(), 0), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("nope"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_backend_prepare("zookeeper://h:1", 0), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("supported: redis://, redis+unix://"), std::string::npos)
      << dlock_last_error();
  EXPECT_EQ(dlock_backend_prepare(redis_.url().c_str(), -2), DLOCK_EINVAL);
  EXPECT_EQ(dlock_backend_prepare(nullptr, 0), DLOCK_EINVAL);
  EXPECT_EQ(dlock_dynamodb_create_table(redis_.url().c_str(), 0), DLOCK_EINVAL);  // ABI alias
}

TEST_F(RedisBasicTest, ErrorBufferVariantsCarryTheMessage) {
  // For FFI runtimes that read the outcome on another thread than the call's.
  char buf[256] = "untouched";
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open_errbuf("redis://127.0.0.1:6379?bogus=1", &c, buf, sizeof buf),
            DLOCK_EINVAL);
  EXPECT_STREQ(buf, dlock_last_error());
  EXPECT_NE(std::string(buf).find("bogus"), std::string::npos) << buf;
  ASSERT_EQ(dlock_client_open_errbuf(redis_.url().c_str(), &c, buf, sizeof buf), DLOCK_OK);
  Client other(redis_.url());
  dlock_lock *mine = nullptr, *theirs = nullptr;
  std::strcpy(buf, "untouched");
  ASSERT_EQ(dlock_acquire_errbuf(c, "eb", nullptr, &mine, buf, sizeof buf), DLOCK_OK);
  EXPECT_STREQ(buf, "untouched");  // left alone on success
  char small[8];
  EXPECT_EQ(dlock_acquire_errbuf(other.get(), "eb", nullptr, &theirs, small, sizeof small),
            DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(std::string(small), std::string(dlock_last_error()).substr(0, 7));  // cut, terminated
  EXPECT_EQ(dlock_acquire_errbuf(other.get(), "eb", nullptr, &theirs, nullptr, 0),
            DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_extend_errbuf(mine, 5000, buf, sizeof buf), DLOCK_OK);
  dlock_client_close(c);
  EXPECT_EQ(dlock_extend_errbuf(mine, 5000, buf, sizeof buf), DLOCK_NOT_HELD);
  EXPECT_NE(std::string(buf).find("closed"), std::string::npos) << buf;
  EXPECT_EQ(dlock_release_errbuf(mine, buf, sizeof buf), DLOCK_NOT_HELD);
  EXPECT_NE(std::string(buf).find("closed"), std::string::npos) << buf;
}

TEST_F(RedisBasicTest, TokensRiseAcrossARestartThatLostAllData) {
  Client a(redis_.url());
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), "r", nullptr, &l), DLOCK_OK);
  uint64_t before = dlock_lock_fencing_token(l);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  redis_.Kill();
  ASSERT_TRUE(redis_.Restart());
  ASSERT_EQ(redis_.Cli({"EXISTS", "dlock:{r}:fence"}), "0");  // the counter is gone
  // The same client reconnects (its pooled connections went stale) and the token still rises.
  ASSERT_EQ(dlock_acquire(a.get(), "r", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(l), before);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
}

// A failover to a replica whose counter lags behind: the counter set back by hand. The next
// token still rises, through the server clock.
TEST_F(RedisBasicTest, TokensRiseWhenTheCounterIsSetBack) {
  Client a(redis_.url());
  uint64_t last = 0;
  for (const char* counter : {"1", "0", "-5"}) {
    dlock_lock* l;
    ASSERT_EQ(dlock_acquire(a.get(), "back", nullptr, &l), DLOCK_OK) << dlock_last_error();
    EXPECT_GT(dlock_lock_fencing_token(l), last) << "after setting the counter to " << counter;
    last = dlock_lock_fencing_token(l);
    ASSERT_EQ(dlock_release(l), DLOCK_OK);
    ASSERT_EQ(redis_.Cli({"SET", "dlock:{back}:fence", counter}), "OK");
  }
  // Set back to just below the last token, too (a replica only a little behind).
  ASSERT_EQ(redis_.Cli({"SET", "dlock:{back}:fence", std::to_string(last - 1)}), "OK");
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), "back", nullptr, &l), DLOCK_OK);
  EXPECT_GT(dlock_lock_fencing_token(l), last);
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
}

// Two clients (two threads each) race for one name while the counter keeps disappearing (a
// restart that lost it, over and over): the tokens, in the order the holders held, rise.
TEST_F(RedisBasicTest, TokensRiseWhileClientsRaceOnAMissingCounter) {
  constexpr int kEach = kUnderSanitizer ? 40 : 150;
  Client a(redis_.url()), b(redis_.url());
  std::vector<uint64_t> in_order;  // appended by the holder only: the lock orders the appends
  std::atomic<bool> done{false};
  std::thread remover([&] {
    while (!done) {
      redis_.Cli({"DEL", "dlock:{race}:fence"});
      std::this_thread::sleep_for(std::chrono::microseconds(300));
    }
  });
  auto run = [&](dlock_client* c) {
    Options opts;
    opts.wait(20000);
    for (int i = 0; i < kEach; ++i) {
      dlock_lock* l;
      ASSERT_EQ(dlock_acquire(c, "race", opts.get(), &l), DLOCK_OK) << dlock_last_error();
      in_order.push_back(dlock_lock_fencing_token(l));
      ASSERT_EQ(dlock_release(l), DLOCK_OK);
    }
  };
  std::thread t1(run, a.get()), t2(run, a.get()), t3(run, b.get()), t4(run, b.get());
  t1.join(), t2.join(), t3.join(), t4.join();
  done = true;
  remover.join();
  ASSERT_EQ(in_order.size(), 4u * kEach);
  for (size_t i = 1; i < in_order.size(); ++i) {
    ASSERT_GT(in_order[i], in_order[i - 1]) << "hold " << i << " of " << in_order.size();
  }
}

TEST_F(RedisBasicTest, ScriptsAreReloadedAfterScriptFlush) {
  Client a(redis_.url());
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), "s", nullptr, &l), DLOCK_OK);
  ASSERT_EQ(redis_.Cli({"SCRIPT", "FLUSH"}), "OK");
  ASSERT_EQ(dlock_extend(l, 8000), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(redis_.Cli({"SCRIPT", "FLUSH"}), "OK");
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(redis_.Cli({"SCRIPT", "FLUSH"}), "OK");
  ASSERT_EQ(dlock_acquire(a.get(), "s", nullptr, &l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(RedisBasicTest, PrefixAndDatabaseFromTheUrl) {
  Client a(redis_.url() + "/2?prefix=app:");
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), "p", nullptr, &l), DLOCK_OK);
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{p}"}), "0");
  EXPECT_EQ(redis_.Cli({"EXISTS", "app:{p}"}), "0");  // not in db 0
  // Cli talks to db 0; look in db 2 through a MOVE-free check: SELECT is per connection.
  EXPECT_EQ(redis_.Cli({"EVAL", "redis.call('SELECT', 2) return redis.call('EXISTS', KEYS[1])", "1", "app:{p}"}), "1");
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(RedisBasicTest, NamesAreBinarySafeUpTo1024Bytes) {
  Client a(redis_.url());
  std::string name(1024, 'n');
  name[3] = '}';
  name[7] = ' ';
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(redis_.Cli({"EXISTS", "dlock:{" + name + "}"}), "1");
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(RedisBasicTest, AuthWithPasswordAndAclUser) {
  RedisServer secured({"--requirepass", "s3cret"});
  ASSERT_TRUE(secured.running());
  std::string base = "redis://:s3cret@" + secured.address();
  Client a(base);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(a.get(), "auth", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  ASSERT_EQ(secured.Cli({"ACL", "SETUSER", "locker", "on", ">pw2", "~*", "&*", "+@all"}), "OK");
  Client user("redis://locker:pw2@" + secured.address());
  ASSERT_EQ(dlock_acquire(user.get(), "auth", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);

  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(("redis://:wrong@" + secured.address()).c_str(), &c), DLOCK_EAUTH);
  EXPECT_EQ(std::string(dlock_last_error()).find("wrong"), std::string::npos) << "leaks the password";
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(dlock_client_open(secured.url().c_str(), &c), DLOCK_EAUTH);  // no password at all
  EXPECT_NE(std::string(dlock_last_error()).find(secured.address()), std::string::npos) << dlock_last_error();
  // ... and says where the password goes.
  EXPECT_NE(std::string(dlock_last_error()).find("redis://:PASSWORD@host:port"), std::string::npos)
      << dlock_last_error();
}

}  // namespace
}  // namespace dlock_test
