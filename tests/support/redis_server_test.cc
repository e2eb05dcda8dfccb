// Tests of the RedisServer helper itself: if these fail, every integration test is suspect.
#include "redis_server.h"

#include <errno.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

namespace dlock_test {
namespace {

bool ProcessExists(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

TEST(RedisServerTest, StartsOnLoopbackAndAnswers) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  EXPECT_GT(redis.port(), 0);
  EXPECT_GT(redis.pid(), 0);
  EXPECT_EQ(redis.host(), "127.0.0.1");
  EXPECT_EQ(redis.address(), "127.0.0.1:" + std::to_string(redis.port()));
  EXPECT_EQ(redis.url(), "redis://127.0.0.1:" + std::to_string(redis.port()));
  EXPECT_EQ(redis.Cli({"PING"}), "PONG");
  // No persistence.
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "save"}), "save\n");
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "appendonly"}), "appendonly\nno");
}

TEST(RedisServerTest, CliRendersEveryReplyType) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  EXPECT_EQ(redis.Cli({"SET", "k", "v a l"}), "OK");
  EXPECT_EQ(redis.Cli({"GET", "k"}), "v a l");
  EXPECT_EQ(redis.Cli({"GET", "missing"}), "(nil)");
  EXPECT_EQ(redis.Cli({"INCR", "n"}), "1");
  EXPECT_EQ(redis.Cli({"INCRBY", "n", "-5"}), "-4");
  EXPECT_EQ(redis.Cli({"RPUSH", "l", "a", "b", "c"}), "3");
  EXPECT_EQ(redis.Cli({"LRANGE", "l", "0", "-1"}), "a\nb\nc");
  EXPECT_EQ(redis.Cli({"LRANGE", "nothing", "0", "-1"}), "");
  EXPECT_EQ(redis.Cli({"INCR", "k"}).rfind("ERR: ERR value is not an integer", 0), 0u)
      << redis.Cli({"INCR", "k"});
  EXPECT_EQ(redis.Cli({"NOSUCHCOMMAND"}).rfind("ERR: ", 0), 0u);
  // Binary-safe arguments (an embedded NUL survives the round trip).
  EXPECT_EQ(redis.Cli({"SET", std::string("a\0b", 3), std::string("x\0y", 3)}), "OK");
  EXPECT_EQ(redis.Cli({"STRLEN", std::string("a\0b", 3)}), "3");
}

TEST(RedisServerTest, ListensOnItsUnixSocket) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  const std::string path = redis.unix_socket();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(path[0], '/');
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
  EXPECT_TRUE(S_ISSOCK(st.st_mode));

  redisContext* c = redisConnectUnix(path.c_str());
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->err, 0) << c->errstr;
  auto* r = static_cast<redisReply*>(redisCommand(c, "SET %s %s", "via", "unix"));
  ASSERT_NE(r, nullptr);
  freeReplyObject(r);
  redisFree(c);
  EXPECT_EQ(redis.Cli({"GET", "via"}), "unix");
}

TEST(RedisServerTest, KillThenRestartOnSamePortWithEmptyData) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  const int port = redis.port();
  const pid_t old_pid = redis.pid();
  ASSERT_EQ(redis.Cli({"SET", "survivor", "1"}), "OK");
  ASSERT_EQ(redis.Cli({"SAVE"}), "OK");  // even an explicit dump must not come back

  redis.Kill();
  EXPECT_FALSE(redis.running());
  EXPECT_FALSE(ProcessExists(old_pid));
  EXPECT_EQ(redis.Cli({"PING"}).rfind("CONNECT FAILED: ", 0), 0u) << redis.Cli({"PING"});

  ASSERT_TRUE(redis.Restart());
  EXPECT_TRUE(redis.running());
  EXPECT_EQ(redis.port(), port);
  EXPECT_NE(redis.pid(), old_pid);
  EXPECT_EQ(redis.Cli({"GET", "survivor"}), "(nil)");
  EXPECT_EQ(redis.Cli({"DBSIZE"}), "0");
}

TEST(RedisServerTest, StopThenRestart) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  const int port = redis.port();
  redis.Stop();
  EXPECT_FALSE(redis.running());
  EXPECT_EQ(redis.pid(), -1);
  ASSERT_TRUE(redis.Restart());
  EXPECT_EQ(redis.port(), port);
  EXPECT_EQ(redis.Cli({"PING"}), "PONG");
  // Restart while running stops the old one first.
  const pid_t before = redis.pid();
  ASSERT_TRUE(redis.Restart());
  EXPECT_NE(redis.pid(), before);
  EXPECT_FALSE(ProcessExists(before));
}

TEST(RedisServerTest, ExtraArgsRequirePass) {
  RedisServer redis({"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.running());
  // Cli authenticates with the password it was started with...
  EXPECT_EQ(redis.Cli({"SET", "k", "v"}), "OK");
  EXPECT_EQ(redis.Cli({"GET", "k"}), "v");
  // ...but a connection that does not is refused.
  redisContext* c = redisConnect("127.0.0.1", redis.port());
  ASSERT_NE(c, nullptr);
  ASSERT_EQ(c->err, 0) << c->errstr;
  auto* r = static_cast<redisReply*>(redisCommand(c, "GET k"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
  EXPECT_NE(std::string(r->str).find("NOAUTH"), std::string::npos) << r->str;
  freeReplyObject(r);
  r = static_cast<redisReply*>(redisCommand(c, "AUTH wrong"));
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->type, REDIS_REPLY_ERROR);
  freeReplyObject(r);
  redisFree(c);
}

TEST(RedisServerTest, ExtraArgsReachTheServer) {
  RedisServer redis({"--maxmemory", "10mb", "--databases", "4"});
  ASSERT_TRUE(redis.running());
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "maxmemory"}), "maxmemory\n10485760");
  EXPECT_EQ(redis.Cli({"CONFIG", "GET", "databases"}), "databases\n4");
}

TEST(RedisServerTest, ServersAreIndependent) {
  RedisServer a, b;
  ASSERT_TRUE(a.running());
  ASSERT_TRUE(b.running());
  EXPECT_NE(a.port(), b.port());
  EXPECT_NE(a.unix_socket(), b.unix_socket());
  ASSERT_EQ(a.Cli({"SET", "only-in-a", "1"}), "OK");
  EXPECT_EQ(b.Cli({"EXISTS", "only-in-a"}), "0");
}

TEST(RedisServerTest, DestructorStopsServerAndRemovesDir) {
  pid_t pid;
  std::string dir;
  {
    RedisServer redis;
    ASSERT_TRUE(redis.running());
    pid = redis.pid();
    dir = redis.dir();
    ASSERT_EQ(access(dir.c_str(), F_OK), 0);
  }
  EXPECT_FALSE(ProcessExists(pid));
  EXPECT_NE(access(dir.c_str(), F_OK), 0) << dir << " still exists";
}

TEST(RedisServerTest, ServerDoesNotInheritOurFileDescriptors) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);  // deliberately without O_CLOEXEC
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  close(fds[1]);
  // If redis-server held a copy of the write end, this read would block instead of seeing EOF.
  ASSERT_EQ(fcntl(fds[0], F_SETFL, O_NONBLOCK), 0);
  char byte;
  EXPECT_EQ(read(fds[0], &byte, 1), 0);
  close(fds[0]);
}

TEST(RedisServerTest, CliOnStoppedServerSaysConnectFailed) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  redis.Stop();
  EXPECT_EQ(redis.Cli({"PING"}).rfind("CONNECT FAILED: ", 0), 0u);
}

TEST(FreeTcpPortTest, ReturnsABindablePort) {
  int p = FreeTcpPort();
  EXPECT_GT(p, 0);
  EXPECT_LT(p, 65536);
}

}  // namespace
}  // namespace dlock_test
