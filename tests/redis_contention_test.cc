// Concurrent callers on the Redis backend (contention and waiting on every backend are in
// conformance/).
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

class RedisContentionTest : public ::testing::Test {
 protected:
  RedisServer redis_;
};

TEST_F(RedisContentionTest, ThreadsDoNotSerializeOnOneConnection) {
  // Threads calling at once must not queue behind one blocking connection: the server sees
  // several connections from this one client while six threads acquire and release.
  Client client(redis_.url());
  int before = std::stoi(redis_.Cli({"INFO", "clients"}).substr(
      redis_.Cli({"INFO", "clients"}).find("connected_clients:") + 18));
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        dlock_lock* l;
        std::string name = "par-" + std::to_string(t) + "-" + std::to_string(i);
        if (dlock_acquire(client.get(), name.c_str(), nullptr, &l) == DLOCK_OK &&
            dlock_release(l) == DLOCK_OK) {
          ok++;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 600);
  std::string info = redis_.Cli({"INFO", "clients"});
  int after = std::stoi(info.substr(info.find("connected_clients:") + 18));
  EXPECT_GE(after - before, 2) << "concurrent callers should have used several connections";
}

}  // namespace
}  // namespace dlock_test
