// The embedded scripts are the files in lua/, byte for byte, with the SHA1 Redis will use.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

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

// How a token is issued (acquire.lua's next_token, and release.lua's hand-over): the counter
// takes the clock's value, or counter + 1 when it is not below the clock, and what INCR would
// refuse is refused with the counter as it was.
namespace dlock::redis {
namespace {
namespace next_token {

using token_limit::Eval;

std::vector<std::string> SingleTry(const std::string& name) {
  const LockKeys k("dlock:", name);
  return {k.holder, k.fence, k.holds};
}
uint64_t NowMicros() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

TEST(ScriptsTest, ATokenIsTheClockWhenTheCounterIsBelowIt) {
  dlock_test::RedisServer redis;
  for (const std::string counter : {"", "7", "-5", "0", "1000000000000000"}) {
    SCOPED_TRACE("counter '" + counter + "'");
    redis.Cli({"DEL", "dlock:{n}", "dlock:{n}:fence"});
    if (!counter.empty()) {
      ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", counter}), "OK");
    }
    const uint64_t before = NowMicros();
    const std::string reply = Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o1", "10000", "exclusive", "0"});
    ASSERT_EQ(reply.rfind("1\n", 0), 0u) << reply;
    const std::string token = reply.substr(2);
    EXPECT_EQ(token.size(), 16u) << token;
    EXPECT_GE(std::stoull(token) + 1000000, before) << token;  // the server's clock, give or take
    EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), token);
    // The next one rises, by the clock.
    ASSERT_EQ(redis.Cli({"DEL", "dlock:{n}"}), "1");
    const std::string next = Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o2", "10000", "exclusive", "0"});
    ASSERT_EQ(next.rfind("1\n", 0), 0u) << next;
    EXPECT_GT(std::stoull(next.substr(2)), std::stoull(token));
  }
}

TEST(ScriptsTest, ACounterBehindTheClockLosesAnExpiryGivenByHand) {
  dlock_test::RedisServer redis;
  ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", "1", "PX", "600000"}), "OK");
  const std::string got = Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o1", "10000", "exclusive", "0"});
  ASSERT_EQ(got.rfind("1\n", 0), 0u) << got;
  EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), got.substr(2));
  EXPECT_EQ(redis.Cli({"PTTL", "dlock:{n}:fence"}), "-1") << "the counter still expires";
}

TEST(ScriptsTest, ATokenIsTheCounterPlusOneWhenTheCounterIsAheadOfTheClock) {
  dlock_test::RedisServer redis;
  // Ahead: a clock set back, or a counter from a server with a faster one. An expiry given to
  // the counter by hand goes: were it to expire, tokens would fall back to the clock.
  for (const std::string counter : {"5000000000000000", "9007199254740990"}) {
    SCOPED_TRACE("counter " + counter);
    redis.Cli({"DEL", "dlock:{n}"});
    ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", counter, "PX", "600000"}), "OK");
    const std::string want = std::to_string(std::stoull(counter) + 1);
    EXPECT_EQ(Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o1", "10000", "exclusive", "0"}), "1\n" + want);
    EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), want);
    EXPECT_EQ(redis.Cli({"PTTL", "dlock:{n}:fence"}), "-1") << "the counter still expires";
    // The same through the slow path (a shared hold).
    const LockKeys k("dlock:", "s");
    ASSERT_EQ(redis.Cli({"SET", k.fence, counter}), "OK");
    EXPECT_EQ(Eval(redis, ScriptId::kAcquire, {k.holder, k.fence, k.holds, k.hold_data, k.writer, k.value},
                   {"o1", "10000", "shared", "0", "", "", "1"}),
              "1\n" + want);
    ASSERT_EQ(redis.Cli({"DEL", k.holds, k.hold_data}), "2");
  }
}

TEST(ScriptsTest, ACounterThatIsNotAnIntegerIsRefusedAndLeftAsItWas) {
  dlock_test::RedisServer redis;
  // What INCR refuses: not a number, leading zeros or spaces, not a string at all. "0000..." is
  // as long as the clock's value and sorts below it.
  for (const std::string counter : {"abc", "0000000000000001", " 1764000000000000", "1.5", "+7"}) {
    SCOPED_TRACE("counter '" + counter + "'");
    ASSERT_EQ(redis.Cli({"SET", "dlock:{n}:fence", counter}), "OK");
    const std::string reply = Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o1", "10000", "exclusive", "0"});
    EXPECT_EQ(reply.rfind("ERR: ", 0), 0u) << reply;
    EXPECT_EQ(redis.Cli({"GET", "dlock:{n}:fence"}), counter) << "the counter moved";
    EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{n}"}), "0") << "a refused acquire left the key set";
  }
  ASSERT_EQ(redis.Cli({"DEL", "dlock:{n}:fence"}), "1");
  ASSERT_EQ(redis.Cli({"HSET", "dlock:{n}:fence", "a", "b"}), "1");
  const std::string reply = Eval(redis, ScriptId::kAcquire, SingleTry("n"), {"o1", "10000", "exclusive", "0"});
  EXPECT_NE(reply.find("WRONGTYPE"), std::string::npos) << reply;
  EXPECT_EQ(redis.Cli({"HGET", "dlock:{n}:fence", "a"}), "b");
  EXPECT_EQ(redis.Cli({"EXISTS", "dlock:{n}"}), "0");
}

// A fair hand-over (release.lua) issues its token the same way.
TEST(ScriptsTest, AHandOverIssuesTheNextTokenTheSameWay) {
  dlock_test::RedisServer redis;
  const LockKeys k("dlock:", "n");
  const std::string now_ms = std::to_string(NowMicros() / 1000);
  for (const std::string counter : {"", "5000000000000000"}) {
    SCOPED_TRACE("counter '" + counter + "'");
    ASSERT_EQ(redis.Cli({"SET", k.holder, "holder", "PX", "10000"}), "OK");
    if (!counter.empty()) {
      ASSERT_EQ(redis.Cli({"SET", k.fence, counter}), "OK");
    }
    ASSERT_EQ(redis.Cli({"ZADD", k.line, "1", "w1"}), "1");
    ASSERT_EQ(redis.Cli({"HSET", k.line_data, "w1", now_ms + " 10000 10000 waiter"}), "1");
    EXPECT_EQ(Eval(redis, ScriptId::kRelease, {k.holder, k.line, k.fence, k.line_data, k.writer},
                   {"holder", k.channel, "0", "exclusive"}),
              "1");
    EXPECT_EQ(redis.Cli({"GET", k.holder}), "waiter");
    const std::string token = redis.Cli({"GET", k.fence});
    if (counter.empty()) {
      EXPECT_EQ(token.size(), 16u) << token;
    } else {
      EXPECT_EQ(token, "5000000000000001");
    }
    EXPECT_EQ(redis.Cli({"EXISTS", k.line, k.line_data}), "0");
  }
}

// An exclusive release names the value key only when its hold has one. When the waiter it
// would hand the lock to stored a value (which goes there), it asks to be called again with it
// ({3}) before it writes anything; lock_ops.cc's ReleaseOp widens the call.
TEST(ScriptsTest, AHandOverOfAValueAsksForTheValueKey) {
  dlock_test::RedisServer redis;
  const LockKeys k("dlock:", "n");
  const std::string now_ms = std::to_string(NowMicros() / 1000);
  ASSERT_EQ(redis.Cli({"SET", k.holder, "holder", "PX", "10000"}), "OK");
  // The first place has run out (dropped on the way); the second is live and has a value.
  ASSERT_EQ(redis.Cli({"ZADD", k.line, "1", "w0", "2", "w1"}), "2");
  ASSERT_EQ(redis.Cli({"HSET", k.line_data, "w0", "1000 10 10000 gone", "w1", now_ms + " 10000 10000 waiter",
                       "w1 v", "its value"}),
            "3");
  const std::vector<std::string> five{k.holder, k.line, k.fence, k.line_data, k.writer};
  const std::vector<std::string> args{"holder", k.channel, "0", "exclusive"};
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, five, args), "3");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "holder") << "written before asking";
  EXPECT_EQ(redis.Cli({"ZCARD", k.line}), "2") << "written before asking";
  EXPECT_EQ(redis.Cli({"EXISTS", k.fence, k.value}), "0") << "written before asking";
  std::vector<std::string> six = five;
  six.push_back(k.value);
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, six, args), "1");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "waiter");
  EXPECT_EQ(redis.Cli({"HGET", k.value, "waiter"}), "its value");
  EXPECT_NE(redis.Cli({"PTTL", k.value}), "-1");
  EXPECT_EQ(redis.Cli({"EXISTS", k.line, k.line_data}), "0");
  // Without a value in line, five keys do: no {3}, and no value key appears.
  ASSERT_EQ(redis.Cli({"DEL", k.value}), "1");
  ASSERT_EQ(redis.Cli({"ZADD", k.line, "1", "w2"}), "1");
  ASSERT_EQ(redis.Cli({"HSET", k.line_data, "w2", now_ms + " 10000 10000 third"}), "1");
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, five, {"waiter", k.channel, "0", "exclusive"}), "1");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "third");
  EXPECT_EQ(redis.Cli({"EXISTS", k.value}), "0");
}

// An exclusive release whose line starts with readers serves them together, up to the first
// writer, as shared holds: it asks for the holds keys first ({3}, nothing written) when it was
// given five keys.
TEST(ScriptsTest, AWritersReleaseServesTheReadersAtTheHeadOfTheLine) {
  dlock_test::RedisServer redis;
  const LockKeys k("dlock:", "n");
  const std::string now_ms = std::to_string(NowMicros() / 1000);
  ASSERT_EQ(redis.Cli({"SET", k.holder, "holder", "PX", "10000"}), "OK");
  ASSERT_EQ(redis.Cli({"ZADD", k.line, "1", "r1", "2", "r2", "3", "w", "4", "r3"}), "4");
  ASSERT_EQ(redis.Cli({"HSET", k.line_data, "r1", now_ms + " 10000 10000 reader1", "r1 s", "1", "r2",
                       now_ms + " 10000 10000 reader2", "r2 s", "1", "w", now_ms + " 10000 10000 writer", "r3",
                       now_ms + " 10000 10000 reader3", "r3 s", "1"}),
            "7");
  const std::vector<std::string> five{k.holder, k.line, k.fence, k.line_data, k.writer};
  const std::vector<std::string> args{"holder", k.channel, "0", "exclusive"};
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, five, args), "3");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "holder") << "written before asking";
  EXPECT_EQ(redis.Cli({"ZCARD", k.line}), "4") << "written before asking";
  EXPECT_EQ(redis.Cli({"EXISTS", k.fence, k.holds}), "0") << "written before asking";
  const std::vector<std::string> all{k.holder, k.line, k.fence, k.line_data, k.writer, k.value, k.holds, k.hold_data};
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, all, args), "1");
  EXPECT_EQ(redis.Cli({"EXISTS", k.holder}), "0");
  EXPECT_EQ(redis.Cli({"ZRANGE", k.holds, "0", "-1"}), "reader1\nreader2");
  EXPECT_EQ(redis.Cli({"HGET", k.hold_data, "~sort"}), "shared");
  const uint64_t t1 = std::stoull(redis.Cli({"HGET", k.hold_data, "reader1"}));
  const uint64_t t2 = std::stoull(redis.Cli({"HGET", k.hold_data, "reader2"}));
  EXPECT_GT(t2, t1) << "each reader its own token";
  EXPECT_NE(redis.Cli({"PTTL", k.holds}), "-1") << "the holds key must end with its holds";
  EXPECT_EQ(redis.Cli({"ZRANGE", k.line, "0", "-1"}), "w\nr3") << "the writer and the reader behind it wait";
  EXPECT_EQ(redis.Cli({"HEXISTS", k.line_data, "r1 s"}), "0");
  // The first reader's release leaves the writer waiting; the last one's hands it the lock.
  const std::vector<std::string> shared{k.holds, k.hold_data, k.value, k.line, k.fence, k.line_data, k.holder, k.writer};
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, shared, {"reader1", k.channel, "0", "hold", "", "0", ""}), "1");
  EXPECT_EQ(redis.Cli({"EXISTS", k.holder}), "0");
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, shared, {"reader2", k.channel, "0", "hold", "", "0", ""}), "1");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "writer");
  EXPECT_GT(std::stoull(redis.Cli({"GET", k.fence})), t2);
  EXPECT_EQ(redis.Cli({"ZRANGE", k.line, "0", "-1"}), "r3");
}

// A reader whose lease ran out before its release (late: it answers 0, not held) still frees
// the name for the line: the writer waiting for it is served, not left to its retries.
TEST(ScriptsTest, ALateReadersReleaseStillServesTheLine) {
  dlock_test::RedisServer redis;
  const LockKeys k("dlock:", "late");
  const uint64_t now_ms = NowMicros() / 1000;
  ASSERT_EQ(redis.Cli({"ZADD", k.holds, std::to_string(now_ms - 10), "reader"}), "1");
  ASSERT_EQ(redis.Cli({"HSET", k.hold_data, "reader", "5", "~sort", "shared"}), "2");
  ASSERT_EQ(redis.Cli({"ZADD", k.line, "1", "w"}), "1");
  ASSERT_EQ(redis.Cli({"HSET", k.line_data, "w", std::to_string(now_ms) + " 10000 10000 writer"}), "1");
  const std::vector<std::string> shared{k.holds, k.hold_data, k.value, k.line, k.fence, k.line_data, k.holder, k.writer};
  EXPECT_EQ(Eval(redis, ScriptId::kRelease, shared, {"reader", k.channel, "0", "hold", "", "0", ""}), "0");
  EXPECT_EQ(redis.Cli({"GET", k.holder}), "writer");
  EXPECT_EQ(redis.Cli({"EXISTS", k.line}), "0");
}

TEST(ScriptsTest, AnExclusiveReleaseNamesTheValueKeyOnlyWithAValue) {
  const std::string value_key = LockKeys("dlock:", "n").value;
  HoldRef hold{"n", "owner", true, false};
  Op<NoResult> plain = ReleaseOp("dlock:", hold);
  EXPECT_EQ(plain.call.keys.size(), 5u);
  EXPECT_EQ(plain.call.args.size(), 4u);
  ASSERT_NE(plain.widen, nullptr);
  // Widened ({3}: a waiter's value, or shared waiters to serve), every key: the value key, then
  // the holds and the hold data.
  ScriptCall widened = plain.widen(plain.call);
  ASSERT_EQ(widened.keys.size(), 8u);
  EXPECT_EQ(widened.keys[5], value_key);
  EXPECT_EQ(widened.keys[6], LockKeys("dlock:", "n").holds);
  EXPECT_EQ(widened.keys[7], LockKeys("dlock:", "n").hold_data);
  EXPECT_EQ(widened.args, plain.call.args);
  hold.has_value = true;
  Op<NoResult> valued = ReleaseOp("dlock:", hold);
  ASSERT_EQ(valued.call.keys.size(), 6u);
  EXPECT_EQ(valued.call.keys.back(), value_key);
  EXPECT_EQ(valued.call.args.back(), "1");
  // A waiter leaving the line names every key: what was handed to it may be handed on.
  LockRequest request;
  request.name = "n";
  request.owner_value = "owner";
  request.waiter_id = "w1";
  Op<NoResult> leave = LeaveLineOp("dlock:", request);
  ASSERT_EQ(leave.call.keys.size(), 8u);
  EXPECT_EQ(leave.call.keys[5], value_key);
  EXPECT_EQ(leave.call.args, (std::vector<std::string>{"owner", "dlock:{n}:released", "0", "exclusive", "w1", "0"}));
}

}  // namespace next_token

// Job rules of shared holds (acquire.lua's top): kept with each hold until it ends, marked by
// how it ends. Asserted on the scripts, as the library calls them.
namespace job_rules {
using token_limit::Eval;

const LockKeys k("dlock:", "r");
std::vector<std::string> All() { return {k.holder, k.fence, k.holds, k.hold_data, k.writer, k.value}; }
std::string Shared(const dlock_test::RedisServer& redis, const std::string& owner, const std::string& lease,
                   const std::string& min_hold, const std::string& delay) {
  return Eval(redis, ScriptId::kAcquire, All(), {owner, lease, "shared", "0", "", "", "1", min_hold, delay});
}
std::string Exclusive(const dlock_test::RedisServer& redis) {
  return Eval(redis, ScriptId::kAcquire, All(), {"c0", "10000", "exclusive", "0", "", "", "1"});
}
std::string ReleaseShared(const dlock_test::RedisServer& redis, const std::string& owner, const std::string& rules) {
  return Eval(redis, ScriptId::kRelease, {k.holds, k.hold_data, k.value},
              {owner, k.channel, "0", "hold", "", "0", rules});
}

// An acquire given back (it did not happen) leaves none of its rules behind.
TEST(JobRulesScriptsTest, ASharedHoldGivenBackLeavesNoMarker) {
  dlock_test::RedisServer redis;
  ASSERT_EQ(Shared(redis, "a1", "10000", "60000", "60000").rfind("1\n", 0), 0u);
  EXPECT_EQ(ReleaseShared(redis, "a1", "2"), "1");
  EXPECT_EQ(Exclusive(redis).rfind("1\n", 0), 0u) << "closed by an acquire that did not happen";
}

// A shared hold whose lease ran out ended uncleanly: another's clean release, and a waiting
// writer's attempts meanwhile, leave its lock-delay standing.
TEST(JobRulesScriptsTest, AnUncleanSharedEndKeepsItsDelayThroughAnothersCleanRelease) {
  dlock_test::RedisServer redis;
  ASSERT_EQ(Shared(redis, "a1", "200", "0", "60000").rfind("1\n", 0), 0u);
  ASSERT_EQ(Shared(redis, "b1", "10000", "0", "0").rfind("1\n", 0), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(Exclusive(redis).rfind("0\n", 0), 0u) << "b1 still holds";
  EXPECT_EQ(ReleaseShared(redis, "b1", "0"), "1");
  const std::string closed = Exclusive(redis);
  EXPECT_EQ(closed.rfind("4\n", 0), 0u) << closed;
  EXPECT_NE(closed.find("lock_delay"), std::string::npos) << closed;
}

// A release that comes after the lease ran out is refused, and marks the unclean end; a clean
// release marks only what is left of the min hold.
TEST(JobRulesScriptsTest, ALateSharedReleaseMarksItsDelayAndACleanOneOnlyTheMinHold) {
  dlock_test::RedisServer redis;
  ASSERT_EQ(Shared(redis, "a1", "200", "0", "60000").rfind("1\n", 0), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(ReleaseShared(redis, "a1", "1"), "0");
  std::string closed = Exclusive(redis);
  EXPECT_NE(closed.find("lock_delay"), std::string::npos) << closed;

  redis.Cli({"DEL", k.holds, k.hold_data});
  ASSERT_EQ(Shared(redis, "a2", "10000", "60000", "60000").rfind("1\n", 0), 0u);
  EXPECT_EQ(ReleaseShared(redis, "a2", "1"), "1");
  closed = Exclusive(redis);
  EXPECT_NE(closed.find("min_hold"), std::string::npos) << closed;
  EXPECT_NE(redis.Cli({"PTTL", k.holds}), "-1") << "the holds key was left without an expiry";
}

}  // namespace job_rules
}  // namespace
}  // namespace dlock::redis
