// redlock:// against real, independent redis-servers: what a quorum survives and what it does
// not, and what a failed acquire leaves behind. Everything every backend does is in the
// conformance suite (redlock3, redlock5).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Masters {
  explicit Masters(int n, const std::string& params = "") {
    for (int i = 0; i < n; ++i) servers.push_back(std::make_unique<RedisServer>());
    url = "redlock://";
    for (size_t i = 0; i < servers.size(); ++i) url += (i ? "," : "") + servers[i]->address();
    url += params;
  }
  // The holder key of lock `name` on master i: its owner value, "" when absent.
  std::string Holder(size_t i, const std::string& name) {
    std::string value = servers[i]->Cli({"GET", "dlock:{" + name + "}"});
    return value == "(nil)" ? "" : value;
  }
  std::vector<std::unique_ptr<RedisServer>> servers;
  std::string url;
};

TEST(RedlockTest, OneMasterOfThreeDownIsFineTwoAreEioNamingThemAndHealedItWorksAgain) {
  Masters m(3, "?connect_timeout_ms=500&timeout_ms=500");
  Client c(m.url);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "a", nullptr, &l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();

  m.servers[0]->Kill();
  ASSERT_EQ(dlock_acquire(c.get(), "a", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  EXPECT_NE(m.Holder(1, "a"), "");
  EXPECT_NE(m.Holder(2, "a"), "");
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(m.Holder(1, "a"), "");

  m.servers[1]->Kill();
  const auto start = Clock::now();
  EXPECT_EQ(dlock_acquire(c.get(), "a", nullptr, &l), DLOCK_EIO);
  EXPECT_LT(Clock::now() - start, 500ms + 500ms + 2000ms) << "bounded by the timeouts";
  const std::string error = dlock_last_error();
  EXPECT_NE(error.find("1 of 3 masters granted, 0 refused, 2 failed"), std::string::npos) << error;
  EXPECT_NE(error.find(m.servers[0]->address()), std::string::npos) << error;
  EXPECT_NE(error.find(m.servers[1]->address()), std::string::npos) << error;
  EXPECT_EQ(error.find(m.servers[2]->address()), std::string::npos) << error;
  EXPECT_EQ(m.Holder(2, "a"), "") << "the one grant was given back";

  ASSERT_TRUE(m.servers[0]->Restart());
  ASSERT_TRUE(m.servers[1]->Restart());
  ASSERT_EQ(dlock_acquire(c.get(), "a", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

TEST(RedlockTest, APartialWinIsGivenBackBeforeTheAcquireReturns) {
  Masters m(3);
  // Another owner holds the lock on two masters (as after a lost race); a new acquire wins the
  // third, cannot make a quorum, and must not leave its key there.
  for (size_t i : {0u, 1u}) {
    ASSERT_EQ(m.servers[i]->Cli({"SET", "dlock:{p}", "someone-else", "PX", "60000"}), "OK");
  }
  Client c(m.url);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), "p", nullptr, &l), DLOCK_NOT_ACQUIRED) << dlock_last_error();
  EXPECT_EQ(m.Holder(2, "p"), "") << "the grant on the third master was given back";
  EXPECT_EQ(m.Holder(0, "p"), "someone-else");
  // With the others' hold gone on one of them, a quorum (2 of 3) grants it.
  m.servers[1]->Cli({"DEL", "dlock:{p}"});
  ASSERT_EQ(dlock_acquire(c.get(), "p", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(m.Holder(0, "p"), "someone-else") << "a release touches only its own holds";
}

TEST(RedlockTest, TokensRiseAcrossQuorumsThatShareOneMaster) {
  Masters m(3);
  Client c(m.url);
  // Master 0's counter far ahead (a master whose clock ran ahead, say): the first quorum's
  // token comes from it. Each later round takes another pair of masters (the third refuses:
  // someone else holds it there), so only the token written back to the masters that granted
  // it carries the order on: the next quorum shares one of them.
  const uint64_t ahead = 9000000000000000;  // µs: about 2255 AD, and below 2^53 (Lua numbers)
  ASSERT_EQ(m.servers[0]->Cli({"SET", "dlock:{t}:fence", std::to_string(ahead)}), "OK");
  uint64_t last = 0;
  for (int round = 0; round < 6; ++round) {
    const size_t busy = static_cast<size_t>((round + 2) % 3);  // 2, 0, 1, 2, 0, 1
    ASSERT_EQ(m.servers[busy]->Cli({"SET", "dlock:{t}", "someone-else", "PX", "60000"}), "OK");
    dlock_lock* l = nullptr;
    ASSERT_EQ(dlock_acquire(c.get(), "t", nullptr, &l), DLOCK_OK) << dlock_last_error();
    const uint64_t token = dlock_lock_fencing_token(l);
    EXPECT_GT(token, ahead) << "round " << round;
    EXPECT_GT(token, last) << "round " << round;
    last = token;
    for (size_t i = 0; i < 3; ++i) {
      if (i == busy) continue;
      EXPECT_EQ(m.servers[i]->Cli({"GET", "dlock:{t}:fence"}), std::to_string(token))
          << "the token went back to master " << i << " (round " << round << ")";
    }
    ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
    m.servers[busy]->Cli({"DEL", "dlock:{t}"});
  }
}

TEST(RedlockTest, BadUrlsAreEinvalNamingWhatIsWrong) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open("redlock://127.0.0.1:1,127.0.0.1:2", &c), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("at least 3"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_client_open("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:1", &c), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("twice"), std::string::npos) << dlock_last_error();
  // Semaphores are refused: independent masters cannot bound the holders.
  Masters m(3);
  Client client(m.url);
  EXPECT_EQ(dlock_client_capabilities(client.get()) & (DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_PERMITS | DLOCK_CAP_FAIR),
            0u);
  Options o;
  o.permits(2);
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(client.get(), "s", o.get(), &l), DLOCK_EINVAL);
}

}  // namespace
}  // namespace dlock_test
