// The examples do what their comments promise, run as a user would run them.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/redis_server.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

// evloop_server (libevent) and libuv_server (libuv, through the hook table) do the same.
void LoopServerWorksReactsToLossAndStaysResponsive(const std::string& program, const std::string& name) {
  RedisServer redis;
  ChildProcess server({program, redis.url(), "3"});
  ASSERT_TRUE(server.started()) << server.error();
  // Once it holds the lock, the lock is lost behind its back.
  const std::string key = "dlock:{" + name + "}";
  const auto give_up = std::chrono::steady_clock::now() + 20s;
  while (redis.Cli({"EXISTS", key}) != "1" && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(5ms);
  }
  redis.Cli({"DEL", key});
  const int code = server.Wait(30s);
  const std::string out = server.output();
  EXPECT_EQ(code, 0) << DescribeExitCode(code) << "\n" << out;
  EXPECT_EQ(Count(out, "acquired, fencing token"), 2u) << out;  // before and after the loss
  EXPECT_EQ(Count(out, "lost " + name), 1u) << out;
  EXPECT_NE(out.find("released: DLOCK_OK"), std::string::npos) << out;
  EXPECT_NE(out.find("locks lost: 1"), std::string::npos) << out;
  EXPECT_EQ(out.find("units of work done: 0,"), std::string::npos) << out;
  EXPECT_EQ(redis.Cli({"EXISTS", key}), "0");
}

TEST(ExamplesTest, EvloopServerWorksReactsToLossAndStaysResponsive) {
  LoopServerWorksReactsToLossAndStaysResponsive(DLOCK_EVLOOP_SERVER, "evloop-server");
}

// It also exits 0 only when uv_loop_close finds nothing left: the closed client let go of
// every handle.
TEST(ExamplesTest, LibuvServerWorksReactsToLossAndStaysResponsive) {
  LoopServerWorksReactsToLossAndStaysResponsive(DLOCK_LIBUV_SERVER, "libuv-server");
}

TEST(ExamplesTest, AtomicIncrementsLoseNoUpdate) {
  RedisServer redis;
  char dir[] = "/tmp/dlock-example-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string counter = std::string(dir) + "/counter";
  std::ofstream(counter) << "0 0\n";
  std::vector<std::unique_ptr<ChildProcess>> runs;
  for (int i = 0; i < 3; ++i) {
    runs.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{DLOCK_ATOMIC_INCREMENTS, redis.url(), counter, "40"}));
  }
  for (auto& run : runs) {
    const int code = run->Wait(60s);
    EXPECT_EQ(code, 0) << DescribeExitCode(code) << "\n" << run->output();
    EXPECT_EQ(Count(run->output(), "40 increments"), 1u) << run->output();
  }
  long value = 0;
  std::ifstream(counter) >> value;
  EXPECT_EQ(value, 120);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlock_test
