// The examples do what their comments promise, run as a user would run them.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "support/redis_server.h"

namespace dlock_test {
namespace {

// Runs command, returns its stdout; *status gets the exit status.
std::string RunCommand(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = text.find(what); pos != std::string::npos; pos = text.find(what, pos + 1)) ++n;
  return n;
}

TEST(ExamplesTest, EvloopServerWorksReactsToLossAndStaysResponsive) {
  RedisServer redis;
  std::thread saboteur([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    redis.Cli({"DEL", "dlock:{evloop-server}"});
  });
  int status = 0;
  std::string out = RunCommand(std::string(DLOCK_EVLOOP_SERVER) + " " + redis.url() + " 3", &status);
  saboteur.join();
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(Count(out, "acquired, fencing token"), 2u) << out;  // before and after the loss
  EXPECT_EQ(Count(out, "lost evloop-server"), 1u) << out;
  EXPECT_NE(out.find("released: DLOCK_OK"), std::string::npos) << out;
  EXPECT_NE(out.find("locks lost: 1"), std::string::npos) << out;
  EXPECT_EQ(out.find("units of work done: 0,"), std::string::npos) << out;
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{evloop-server}"}), "0");
}

TEST(ExamplesTest, AtomicIncrementsLoseNoUpdate) {
  RedisServer redis;
  char dir[] = "/tmp/dlock-example-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string counter = std::string(dir) + "/counter";
  std::string cmd = "echo '0 0' > " + counter + " && for i in 1 2 3; do " + DLOCK_ATOMIC_INCREMENTS +
                    " " + redis.url() + " " + counter + " 40 & done; wait; cat " + counter;
  int status = 0;
  std::string out = RunCommand("sh -c \"" + cmd + "\"", &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(Count(out, "40 increments"), 3u) << out;
  EXPECT_NE(out.find("\n120 "), std::string::npos) << out;
  std::system(("rm -rf " + std::string(dir)).c_str());
}

}  // namespace
}  // namespace dlock_test
