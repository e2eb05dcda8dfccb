// The embedded scripts are the files in lua/, byte for byte, with the SHA1 Redis will use.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "redis/lock_ops.h"
#include "redis/wire/scripts.h"
#include "support/redis_server.h"

namespace dlock::redis {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ScriptsTest, EmbeddedScriptsMatchTheLuaFiles) {
  const std::string dir = DLOCK_SOURCE_DIR "/lua/";
  EXPECT_EQ(GetScript(ScriptId::kAcquire).body, ReadFile(dir + "acquire.lua"));
  EXPECT_EQ(GetScript(ScriptId::kRelease).body, ReadFile(dir + "release.lua"));
  EXPECT_EQ(GetScript(ScriptId::kExtend).body, ReadFile(dir + "extend.lua"));
}

TEST(ScriptsTest, Sha1IsFortyHexDigitsAndDistinct) {
  const auto& a = GetScript(ScriptId::kAcquire).sha1;
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, GetScript(ScriptId::kRelease).sha1);
}

}  // namespace
}  // namespace dlock::redis

// Fencing tokens stay at most 2^53 - 1 (docs/guarantees.md): the scripts compare them as Lua
// numbers (doubles), exact only that far, and a Redlock master that issued a greater one would
// have it written back to every master (fence.lua). Each script that moves the counter refuses
// to move it past the limit, with an error naming it, and writes nothing.
namespace dlock::redis {
namespace {
namespace token_limit {

const std::string kLimit = "9007199254740991";    // 2^53 - 1: the greatest token issued
const std::string kPast = "1152921504606846976";  // 2^60

// EVAL of a script's body (the embedded text, as the library sends it).
std::string Eval(const dlock_test::RedisServer& redis, ScriptId id, std::vector<std::string> keys,
                 std::vector<std::string> args) {
  std::vector<std::string> cmd{"EVAL", GetScript(id).body, std::to_string(keys.size())};
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.insert(cmd.end(), args.begin(), args.end());
  return redis.Cli(cmd);
}
std::vector<std::string> AcquireKeys(const std::string& name) {
  const redis::LockKeys k("dlock:", name);
  return {k.holder, k.fence, k.holds, k.hold_data, k.writer};
}

TEST(ScriptsTest, AcquireRefusesATokenPastTwoToThe53AndWritesNothing) {
  dlock_test::RedisServer redis;
  for (const std::string& counter : {kLimit, kPast}) {
    for (const std::string sort : {"exclusive", "shared"}) {
      SCOPED_TRACE(sort + " with the counter at " + counter);
      ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", counter}), "OK");
      const std::string reply = Eval(redis, ScriptId::kAcquire, AcquireKeys("n"), {"owner1", "10000", sort, "0"});
      EXPECT_EQ(reply.rfind("ERR: ", 0), 0u) << reply;
      EXPECT_NE(reply.find("2^53"), std::string::npos) << reply;
      EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), counter) << "the counter moved";
      EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{n}", "dlock:{n}:holds", "dlock:{n}:holdinfo"}), "0");
    }
  }
  // Below the limit, the last token it can issue is the limit itself.
  ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", "9007199254740990"}), "OK");
  EXPECT_EQ(Eval(redis, ScriptId::kAcquire, AcquireKeys("n"), {"owner1", "10000", "exclusive", "0"}),
            "1\n" + kLimit);
}

TEST(ScriptsTest, FenceRefusesToRaiseTheCounterPastTwoToThe53) {
  dlock_test::RedisServer redis;
  ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", "5"}), "OK");
  const std::string reply =
      Eval(redis, ScriptId::kFence, {"dlock:{n}:fence", "dlock:{n}:holdinfo"}, {kPast, ""});
  EXPECT_EQ(reply.rfind("ERR: ", 0), 0u) << reply;
  EXPECT_NE(reply.find("2^53"), std::string::npos) << reply;
  EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), "5");
  EXPECT_EQ(Eval(redis, ScriptId::kFence, {"dlock:{n}:fence", "dlock:{n}:holdinfo"}, {kLimit, ""}), "1");
  EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), kLimit);
}

// A release that would hand the lock to a fair waiter with a token past the limit hands nothing
// over: it frees the lock and wakes every waiter, whose own attempts then meet the refusal.
TEST(ScriptsTest, ReleaseHandsNothingOverPastTwoToThe53) {
  dlock_test::RedisServer redis;
  const std::string h = "dlock:{n}";
  ASSERT_EQ(redis.Cli({"SET", h, "holder", "PX", "10000"}), "OK");
  ASSERT_EQ(redis.Cli({"SET", h + ":fence", kLimit}), "OK");
  const std::string now_ms = std::to_string(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  ASSERT_EQ(redis.Cli({"ZADD", h + ":line", "1", "w1"}), "1");
  ASSERT_EQ(redis.Cli({"HSET", h + ":linedata", "w1", now_ms + " 10000 10000 waiter"}), "1");
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, {h, h + ":line", h + ":fence", h + ":linedata", h + ":writer"},
                 {"holder", h + ":released", "0", "exclusive"}),
            "1");
  EXPECT_EQ(redis.Cli({"EXISTS", h}), "0") << "handed over: " << redis.Cli({"GET", h});
  EXPECT_EQ(redis.Cli({"GET", h + ":fence"}), kLimit) << "the counter moved";
}

// The client's side of the limit (lock_ops.cc): a token past 2^53 - 1 in a reply, from a
// server that does not run these scripts (hostile, broken, an older dlock's), is refused with an
// error naming the limit; Redlock counts it as a failed vote and never writes it back.
ReplyPtr ReadResp(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  return ReplyPtr(static_cast<redisReply*>(reply));
}

TEST(ScriptsTest, TheClientRefusesATokenPastTwoToThe53) {
  LockRequest request;
  request.name = "n";
  request.owner_value = "owner";
  request.lease_ms = 1000;
  const Op<AcquireAttempt> acquire = AcquireOp("dlock:", request);
  AcquireAttempt attempt;
  Status s = acquire.read(ReadResp("*2\r\n:1\r\n$16\r\n9007199254740992\r\n").get(), "redis h:1", "n", &attempt);
  EXPECT_EQ(s.code(), Code::kBackendError) << s.message();
  EXPECT_NE(s.message().find("2^53"), std::string::npos) << s.message();
  EXPECT_FALSE(attempt.acquired);
  EXPECT_EQ(attempt.fencing_token, 0u);
  s = acquire.read(ReadResp("*2\r\n:1\r\n$16\r\n9007199254740991\r\n").get(), "redis h:1", "n", &attempt);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(attempt.fencing_token, 9007199254740991u);
  // inspect shows such a token as unknown (0), not as a token dlock issued.
  LockInfo info;
  s = InspectOp("dlock:", "n").read(ReadResp("*5\r\n:1\r\n$0\r\n\r\n:1000\r\n$19\r\n1152921504606846976\r\n$0\r\n\r\n").get(),
                                    "redis h:1", "n", &info);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(info.holders.size(), 1u);
  EXPECT_EQ(info.holders[0].fencing_token, 0u);
}

}  // namespace token_limit
}  // namespace
}  // namespace dlock::redis
