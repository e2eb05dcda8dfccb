// Redis Cluster's key -> slot mapping, against the cluster spec's examples and against a real
// cluster-enabled redis-server (CLUSTER KEYSLOT) as the oracle; and how the cluster router reads
// the cluster's answers (slot maps, redirections).
#include "redis/wire/key_slot.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "redis/topology/cluster_map.h"
#include "redis/wire/reply.h"
#include "support/child_process.h"
#include "support/redis_server.h"

namespace {

using dlock::redis::Crc16;
using dlock::redis::KeySlot;

TEST(KeySlotTest, MatchesTheClusterSpec) {
  EXPECT_EQ(Crc16("123456789"), 0x31C3);  // the spec's check value for CRC16-XMODEM
  EXPECT_EQ(KeySlot("somekey"), 11058);
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % 16384);  // empty tag: the whole key
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));           // tag up to the first '}'
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));            // the first tag only
  EXPECT_EQ(KeySlot("foo{bar"), Crc16("foo{bar") % 16384);        // unclosed: the whole key
}

TEST(KeySlotTest, AgreesWithARealServer) {
  // The bus port is given: the default (port + 10000) does not exist for ports above 55535.
  dlock_test::RedisServer redis(
      {"--cluster-enabled", "yes", "--cluster-port", std::to_string(dlock_test::FreeTcpPort())});
  ASSERT_TRUE(redis.running());
  std::vector<std::string> keys = {"", "{", "}", "{}", "{}}", "a{b}c", "{a}{b}", "dlock:{jobs/nightly}"};
  std::mt19937 rng(11);
  const std::string alphabet = "ab{}:/-_0123456789\xc3\xa9";
  for (int i = 0; i < 200; ++i) {
    std::string key;
    for (int n = rng() % 24; n > 0; --n) key += alphabet[rng() % alphabet.size()];
    keys.push_back(key);
    // The keys of one lock, as the Redis backend names them, share one slot.
    dlock::redis::LockKeys lock("dlock:", key.empty() ? "x" + key : key);
    keys.insert(keys.end(), {lock.holder, lock.fence, lock.channel});
  }
  for (const std::string& key : keys) {
    EXPECT_EQ(std::to_string(KeySlot(key)), redis.Cli({"CLUSTER", "KEYSLOT", key})) << key;
  }
}

// A cluster's answers, as the router reads them (cluster_map.h).
redisReply* Read(const std::string& resp) {
  redisReader* reader = redisReaderCreate();
  redisReaderFeed(reader, resp.data(), resp.size());
  void* reply = nullptr;
  EXPECT_EQ(redisReaderGetReply(reader, &reply), REDIS_OK);
  redisReaderFree(reader);
  return static_cast<redisReply*>(reply);
}

TEST(ClusterMapTest, RedirectionsReadAsTheSpecWritesThem) {
  using dlock::redis::NodeAddress;
  using dlock::redis::ParseRedirect;
  using dlock::redis::Redirect;
  const NodeAddress from{"10.0.0.1", 7000};
  dlock::redis::ReplyPtr moved(Read("-MOVED 3999 127.0.0.1:6381\r\n"));
  Redirect r = ParseRedirect(moved.get(), from);
  EXPECT_EQ(r.kind, Redirect::kMoved);
  EXPECT_EQ(r.slot, 3999);
  EXPECT_EQ(r.to.Name(), "127.0.0.1:6381");
  // An empty host is the answering node's; IPv6 splits at the last ':'.
  dlock::redis::ReplyPtr ask(Read("-ASK 12 :6390\r\n"));
  r = ParseRedirect(ask.get(), from);
  EXPECT_EQ(r.kind, Redirect::kAsk);
  EXPECT_EQ(r.to.Name(), "10.0.0.1:6390");
  dlock::redis::ReplyPtr v6(Read("-MOVED 1 ::1:7001\r\n"));
  EXPECT_EQ(ParseRedirect(v6.get(), from).to.Name(), "[::1]:7001");
  dlock::redis::ReplyPtr again(Read("-TRYAGAIN Multiple keys request during rehashing of slot\r\n"));
  EXPECT_EQ(ParseRedirect(again.get(), from).kind, Redirect::kTryAgain);
  dlock::redis::ReplyPtr down(Read("-CLUSTERDOWN The cluster is down\r\n"));
  EXPECT_EQ(ParseRedirect(down.get(), from).kind, Redirect::kClusterDown);
  // What does not read is no redirection: the caller gets the error as it is.
  for (const char* bad : {"-MOVED 16384 127.0.0.1:1\r\n", "-MOVED -1 127.0.0.1:1\r\n",
                          "-MOVED 5 127.0.0.1:0\r\n", "-MOVED 5 127.0.0.1:99999\r\n",
                          "-MOVED 5\r\n", "-MOVED 5 ?:7000\r\n", "-MOVEDX 5 a:1\r\n",
                          "-ERR MOVED 5 a:1\r\n", "+MOVED 5 a:1\r\n", "-MOVED\r\n", "-ASK\r\n",
                          "-MOVED \r\n"}) {
    dlock::redis::ReplyPtr reply(Read(bad));
    EXPECT_EQ(ParseRedirect(reply.get(), from).kind, Redirect::kNone) << bad;
  }
}

TEST(ClusterMapTest, SlotMapsAreCheckedBeforeUse) {
  using dlock::redis::ParseClusterSlots;
  using dlock::redis::SlotRange;
  const dlock::redis::NodeAddress asked{"10.0.0.1", 7000};
  std::vector<SlotRange> ranges;
  dlock::redis::ReplyPtr good(Read(
      "*2\r\n*4\r\n:0\r\n:8191\r\n*3\r\n$0\r\n\r\n:7000\r\n$2\r\nid\r\n*2\r\n$9\r\n127.0.0.1\r\n:7003\r\n"
      "*3\r\n:8192\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7001\r\n"));
  ASSERT_TRUE(ParseClusterSlots(good.get(), asked, "node", &ranges).ok());
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].master.Name(), "10.0.0.1:7000");  // empty host: the node asked
  EXPECT_EQ(ranges[1].first, 8192);
  EXPECT_EQ(ranges[1].last, 16383);
  EXPECT_EQ(ranges[1].master.Name(), "127.0.0.1:7001");
  for (const char* bad : {"$2\r\nok\r\n", "*1\r\n:1\r\n",
                          "*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n$1\r\na\r\n:1\r\n",
                          "*1\r\n*3\r\n:9\r\n:8\r\n*2\r\n$1\r\na\r\n:1\r\n",
                          "*1\r\n*3\r\n:0\r\n:1\r\n*2\r\n$1\r\na\r\n:70000\r\n",
                          "*1\r\n*3\r\n:0\r\n:1\r\n*1\r\n$1\r\na\r\n"}) {
    dlock::redis::ReplyPtr reply(Read(bad));
    dlock::Status s = ParseClusterSlots(reply.get(), asked, "node 10.0.0.1:7000", &ranges);
    EXPECT_EQ(s.code(), dlock::Code::kBackendError) << bad;
    EXPECT_NE(s.message().find("node 10.0.0.1:7000"), std::string::npos) << s.message();
  }
}

// A release channel's message: a hand-over to one fair waiter, or anything else (wake all).
TEST(ReplyTest, HandOverMessages) {
  std::string_view waiter;
  uint64_t token = 0;
  ASSERT_TRUE(dlock::redis::ParseHandOver("grant:0123456789abcdef:1732463837123456", &waiter, &token));
  EXPECT_EQ(waiter, "0123456789abcdef");
  EXPECT_EQ(token, 1732463837123456u);
  for (const char* other : {"released", "", "grant:", "grant:id", "grant::5", "grant:id:", "grant:id:0",
                            "grant:id:12x", "grant:id:-1", "grant:id:99999999999999999999", "Grant:id:5"}) {
    EXPECT_FALSE(dlock::redis::ParseHandOver(other, &waiter, &token)) << other;
  }
}

TEST(ReplyTest, ReleaseRequestMessages) {
  std::string id, reason;
  ASSERT_TRUE(dlock::redis::ParseReleaseRequest("request\n0123abcd\ndeploy 42\nneeds it", &id, &reason));
  EXPECT_EQ(id, "0123abcd");
  EXPECT_EQ(reason, "deploy 42\nneeds it");
  ASSERT_TRUE(dlock::redis::ParseReleaseRequest("request\nid\n", &id, &reason));
  EXPECT_EQ(reason, "");
  // A reason longer than any request may carry is cut to the cap.
  ASSERT_TRUE(dlock::redis::ParseReleaseRequest("request\nid\n" + std::string(5000, 'r'), &id, &reason));
  EXPECT_EQ(reason.size(), dlock::kMaxReasonBytes);
  for (const std::string& other : {std::string("released"), std::string("changed"), std::string("request"),
                                   std::string("request\n"), std::string("request\n\nreason"),
                                   std::string("request\nid-without-reason"), "request\n" + std::string(65, 'i') + "\nr",
                                   std::string("Request\nid\nr"), std::string("grant:id:5")}) {
    EXPECT_FALSE(dlock::redis::ParseReleaseRequest(other, &id, &reason)) << other;
  }
}

}  // namespace

namespace {

// Every key of one lock must share one slot, or Redis Cluster refuses each script (CROSSSLOT).
// The hash tag is "{NAME}" up to NAME's first '}': any name gives the same tag to all of its
// keys, except one that starts with '}', whose tag is empty (each key hashed whole). The
// cluster router refuses those with EINVAL before sending anything (ClusterTest covers it on a
// real cluster).
TEST(KeySlotTest, AllKeysOfALockShareOneSlotUnlessTheNameStartsWithABrace) {
  std::mt19937 rng(30);
  const std::string alphabet = "ab{}:/-_0\xc3\xa9";
  for (int i = 0; i < 2000; ++i) {
    std::string name(1 + rng() % 8, 'a');
    for (char& c : name) c = alphabet[rng() % alphabet.size()];
    const dlock::redis::LockKeys keys("dlock:", name);
    const int slot = KeySlot(keys.holder);
    bool one_slot = true;
    for (const std::string* key : {&keys.fence, &keys.channel, &keys.holds, &keys.hold_data,
                                   &keys.writer, &keys.line, &keys.line_data}) {
      one_slot = one_slot && KeySlot(*key) == slot;
    }
    if (name[0] != '}') {
      EXPECT_TRUE(one_slot) << name;
    }
  }
  const dlock::redis::LockKeys braced("dlock:", "}x");
  EXPECT_NE(KeySlot(braced.holder), KeySlot(braced.fence)) << "the case the router refuses";
}

// The reader's limits (reply.h): a string over 16 MiB is refused when it completes, and no
// reply may take more than 64 MiB on the wire (however it is cut into reads, whatever it holds).
TEST(ReplyTest, ReaderLimitsStringsAndBufferedBytes) {
  using dlock::redis::FeedReader;
  using dlock::redis::GuardReader;
  using dlock::redis::kMaxReplyBytes;
  using dlock::redis::kMaxReplyStringBytes;
  auto read_one = [](const std::string& resp, std::string* error) {
    redisReader* reader = redisReaderCreate();
    GuardReader(reader);
    void* reply = nullptr;
    int rc = FeedReader(reader, resp.data(), resp.size());
    if (rc == REDIS_OK) rc = dlock::redis::TakeReply(reader, &reply);
    *error = rc == REDIS_OK ? "" : dlock::redis::ReaderError(reader);
    if (reply != nullptr) freeReplyObject(reply);
    redisReaderFree(reader);
    return rc == REDIS_OK && reply != nullptr;
  };
  std::string error;
  const std::string value(4096, 'v');  // the largest value dlock stores
  EXPECT_TRUE(read_one("*2\r\n:1\r\n$4096\r\n" + value + "\r\n", &error)) << error;
  const std::string at_cap(kMaxReplyStringBytes, 's');
  EXPECT_TRUE(read_one("$" + std::to_string(at_cap.size()) + "\r\n" + at_cap + "\r\n", &error)) << error;
  const std::string over(kMaxReplyStringBytes + 1, 's');
  EXPECT_FALSE(read_one("$" + std::to_string(over.size()) + "\r\n" + over + "\r\n", &error));
  EXPECT_NE(error.find("string over 16 MiB"), std::string::npos) << error;

  // Fed in pieces, as a connection does: refused once the pending bytes would pass 64 MiB.
  redisReader* reader = redisReaderCreate();
  GuardReader(reader);
  const std::string head = "$99999999999\r\n";
  ASSERT_EQ(FeedReader(reader, head.data(), head.size()), REDIS_OK);
  const std::string chunk(1 << 20, 'x');
  size_t fed = head.size();
  int rc = REDIS_OK;
  void* reply = nullptr;
  while (rc == REDIS_OK && fed < 2 * kMaxReplyBytes) {
    rc = FeedReader(reader, chunk.data(), chunk.size());
    if (rc == REDIS_OK) {
      fed += chunk.size();
      ASSERT_EQ(dlock::redis::TakeReply(reader, &reply), REDIS_OK);
      ASSERT_EQ(reply, nullptr);
    }
  }
  EXPECT_EQ(rc, REDIS_ERR);
  EXPECT_LE(fed, kMaxReplyBytes);
  EXPECT_LE(reader->len, kMaxReplyBytes) << "nothing over the cap is kept";
  EXPECT_NE(dlock::redis::ReaderError(reader).find("64 MiB"), std::string::npos) << dlock::redis::ReaderError(reader);
  redisReaderFree(reader);

  // A reply whose parts each complete (so little stays buffered) counts whole: 20 strings of
  // 4 MiB are refused at 64 MiB. Replies before and after a whole one count on their own.
  reader = redisReaderCreate();
  GuardReader(reader);
  const std::string small = "+OK\r\n";
  for (int i = 0; i < 6; ++i) {  // 6 x 12 MiB in whole replies, 72 MiB in all: fine
    const std::string big(12u << 20, 'b');
    const std::string resp = "$" + std::to_string(big.size()) + "\r\n" + big + "\r\n" + small;
    ASSERT_EQ(FeedReader(reader, resp.data(), resp.size()), REDIS_OK) << i;
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(dlock::redis::TakeReply(reader, &reply), REDIS_OK);
      ASSERT_NE(reply, nullptr);
      freeReplyObject(reply);
    }
  }
  rc = FeedReader(reader, "*20\r\n", 5);
  const std::string part = "$" + std::to_string(4u << 20) + "\r\n" + std::string(4u << 20, 'p') + "\r\n";
  int parts = 0;
  while (rc == REDIS_OK && parts < 20) {
    rc = FeedReader(reader, part.data(), part.size());
    if (rc == REDIS_OK) {
      ++parts;
      ASSERT_EQ(dlock::redis::TakeReply(reader, &reply), REDIS_OK);
      ASSERT_EQ(reply, nullptr) << "the array is not whole yet";
    }
    EXPECT_LE(reader->len - reader->pos, part.size());
  }
  EXPECT_EQ(rc, REDIS_ERR);
  EXPECT_LT(parts, 16) << "64 MiB of 4 MiB strings";
  EXPECT_NE(dlock::redis::ReaderError(reader).find("64 MiB"), std::string::npos);
  redisReaderFree(reader);
}

TEST(ClusterMapTest, HostsWithControlBytesOrSpacesAreRefused) {
  const dlock::redis::NodeAddress from{"10.0.0.1", 7000};
  dlock::redis::ReplyPtr moved(Read("-MOVED 3999 evil\x1b[2J:6381\r\n"));
  EXPECT_EQ(dlock::redis::ParseRedirect(moved.get(), from).to.port, 0);
  std::vector<dlock::redis::SlotRange> ranges;
  dlock::redis::ReplyPtr slots(Read("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$6\r\nev il.\r\n:7000\r\n"));
  dlock::Status s = dlock::redis::ParseClusterSlots(slots.get(), from, "node", &ranges);
  EXPECT_EQ(s.code(), dlock::Code::kBackendError);
  EXPECT_NE(s.message().find("host name"), std::string::npos) << s.message();
}

// The key layout is a contract with what is already stored (DESIGN.md; a lock taken by an
// older dlock must be seen by a newer one): spelled out here, once, by hand.
TEST(KeysTest, TheLayoutIsTheDocumentedOne) {
  const dlock::redis::LockKeys k("dlock:", "jobs/nightly");
  EXPECT_EQ(k.holder, "dlock:{jobs/nightly}");
  EXPECT_EQ(k.fence, "dlock:{jobs/nightly}:fence");
  EXPECT_EQ(k.channel, "dlock:{jobs/nightly}:released");
  EXPECT_EQ(k.holds, "dlock:{jobs/nightly}:holds");
  EXPECT_EQ(k.hold_data, "dlock:{jobs/nightly}:holdinfo");
  EXPECT_EQ(k.writer, "dlock:{jobs/nightly}:writer");
  EXPECT_EQ(k.line, "dlock:{jobs/nightly}:line");
  EXPECT_EQ(k.line_data, "dlock:{jobs/nightly}:linedata");
  EXPECT_EQ(k.broken, "dlock:{jobs/nightly}:broken");
  EXPECT_EQ(dlock::redis::LockKeys::Channel("app:", "x"), "app:{x}:released");
}

// The break script's answer, the inspect script's wrapper (a marker, break records) and the
// acquire script's refusal by a marker, as the scripts write them, and garbage refused.
TEST(ReplyTest, BreaksMarkersAndRecordsReadAsTheScriptsWriteThem) {
  const std::string id(40, 'a');
  dlock::redis::ReplyPtr broke(Read("*6\r\n$9\r\nexclusive\r\n:1500\r\n$5\r\nweb-7\r\n:1400\r\n"
                                    "$16\r\n1700000000000000\r\n$40\r\n" + id + "\r\n"));
  dlock::BreakResult result;
  ASSERT_TRUE(dlock::redis::ParseBreakReply(broke.get(), "node", &result).ok());
  ASSERT_EQ(result.holders.size(), 1u);
  EXPECT_EQ(result.holders[0].owner, "web-7");
  EXPECT_EQ(result.holders[0].remaining_ms, 1400);
  EXPECT_EQ(result.holders[0].fencing_token, 1700000000000000u);
  EXPECT_EQ(result.holders[0].hold_id, id);
  EXPECT_EQ(result.closed_ms, 1500);
  EXPECT_EQ(result.closed_by, "broken");

  dlock::redis::ReplyPtr wrapped(Read("*5\r\n:-1\r\n*1\r\n:0\r\n:900\r\n$8\r\nmin_hold\r\n"
                                      "*2\r\n$16\r\n1700000000000001\r\n$6\r\nreason\r\n"));
  dlock::LockInfo info;
  ASSERT_TRUE(dlock::redis::ParseInspectReply(wrapped.get(), "node", &info).ok());
  EXPECT_TRUE(info.holders.empty());
  EXPECT_EQ(info.closed_ms, 900);
  EXPECT_EQ(info.closed_by, "min_hold");
  ASSERT_EQ(info.broken.size(), 1u);
  EXPECT_EQ(info.broken[0].fencing_token, 1700000000000001u);
  EXPECT_EQ(info.broken[0].reason, "reason");

  dlock::redis::ReplyPtr closed(Read("*3\r\n:4\r\n:1200\r\n$10\r\nlock_delay\r\n"));
  dlock::AcquireAttempt attempt;
  ASSERT_TRUE(dlock::redis::ParseAcquireReply(closed.get(), "node", "x", &attempt).ok());
  EXPECT_FALSE(attempt.acquired);
  EXPECT_EQ(attempt.holder_ttl_ms, 1200);
  EXPECT_EQ(attempt.closed_by, "lock_delay");

  // A closed-by word dlock never writes, a break answer of the wrong shape, a record's reason
  // past the cap: refused, nothing kept.
  for (const std::string& bad : {std::string("*3\r\n:4\r\n:1200\r\n$10\r\nLOCK\x01" "DELAY\r\n"),
                                 std::string("*3\r\n:4\r\n:1200\r\n:7\r\n")}) {
    dlock::redis::ReplyPtr r(Read(bad));
    dlock::AcquireAttempt a;
    EXPECT_FALSE(dlock::redis::ParseAcquireReply(r.get(), "node", "x", &a).ok()) << bad;
    EXPECT_TRUE(a.closed_by.empty());
  }
  dlock::redis::ReplyPtr short_break(Read("*3\r\n$0\r\n\r\n:0\r\n$1\r\nx\r\n"));
  EXPECT_FALSE(dlock::redis::ParseBreakReply(short_break.get(), "node", &result).ok());
  EXPECT_TRUE(result.holders.empty());
  const std::string long_reason(dlock::kMaxReasonBytes + 1, 'r');
  dlock::redis::ReplyPtr too_long(Read("*5\r\n:-1\r\n*1\r\n:0\r\n:0\r\n$0\r\n\r\n*2\r\n$1\r\n7\r\n$" +
                                       std::to_string(long_reason.size()) +
                                       "\r\n" + long_reason + "\r\n"));
  EXPECT_FALSE(dlock::redis::ParseInspectReply(too_long.get(), "node", &info).ok());
  EXPECT_TRUE(info.broken.empty());
}

}  // namespace
