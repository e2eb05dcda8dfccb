// Redis Cluster's key -> slot mapping, against the cluster spec's examples and against a real
// cluster-enabled redis-server (CLUSTER KEYSLOT) as the oracle.
#include "redis/key_slot.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "redis/reply.h"
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
  dlock_test::RedisServer redis({"--cluster-enabled", "yes"});
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

}  // namespace
