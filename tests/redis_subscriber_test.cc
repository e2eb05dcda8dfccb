// The pub/sub subscriber against real servers (one redis-server, a 3+3 cluster) and against
// a fake one for the faults a real server cannot make: what its waiters are told, in plain
// (SUBSCRIBE) and sharded (SSUBSCRIBE) mode.
#include "redis/topology/subscriber.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "redis/wire/key_slot.h"
#include "support/fake_redis.h"
#include "support/redis_cluster.h"
#include "support/redis_server.h"

namespace dlock::redis {
// Names the mode in test listings (found by argument-dependent lookup).
void PrintTo(PubSubMode mode, std::ostream* os) {
  *os << (mode == PubSubMode::kSharded ? "sharded" : "plain");
}
}  // namespace dlock::redis

namespace {

using namespace std::chrono_literals;
using dlock::EventLoop;
using dlock::redis::PubSubMode;
using dlock::redis::RedisConfig;
using dlock::redis::Subscriber;
using dlock_test::FakeRedis;
using dlock_test::FakeReply;
using dlock_test::RedisCluster;
using dlock_test::RedisServer;

constexpr auto kLimit = 5000ms;  // for what should happen within milliseconds

// What one waiter was told.
class Waiter : public dlock::ReleaseWatcher {
 public:
  struct Told {
    int live = 0;      // OnWatchReady(true)
    int not_live = 0;  // OnWatchReady(false)
    int released = 0;  // OnReleased()
    bool is_live = false;
  };
  void OnWatchReady(bool live) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++(live ? told_.live : told_.not_live);
    told_.is_live = live;
    cv_.notify_all();
  }
  void OnReleased() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++told_.released;
    cv_.notify_all();
  }
  Told told() {
    std::lock_guard<std::mutex> lock(mu_);
    return told_;
  }
  bool Await(const std::function<bool(const Told&)>& done,
             std::chrono::milliseconds limit = kLimit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return done(told_); });
  }
  bool AwaitLive() {
    return Await([](const Told& t) { return t.is_live; });
  }
  bool AwaitReleases(int n) {
    return Await([n](const Told& t) { return t.released >= n; });
  }
  bool AwaitLost() {
    return Await([](const Told& t) { return t.not_live >= 1 && t.released >= 1; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  Told told_;
};

// What on_misrouted reported.
class MisroutedLog {
 public:
  std::function<void(const std::string&)> Callback(EventLoop** loop) {
    return [this, loop](const std::string& channel) {
      std::lock_guard<std::mutex> lock(mu_);
      channels_.push_back(channel);
      on_loop_thread_ = on_loop_thread_ && *loop != nullptr && (*loop)->InLoopThread();
      cv_.notify_all();
    };
  }
  bool AwaitCalls(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kLimit, [&] { return channels_.size() >= n; });
  }
  std::vector<std::string> channels() {
    std::lock_guard<std::mutex> lock(mu_);
    return channels_;
  }
  bool on_loop_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return on_loop_thread_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> channels_;
  bool on_loop_thread_ = true;
};

// A Subscriber on its own loop thread, shut down and destroyed as a client does it.
class Harness {
 public:
  explicit Harness(const RedisConfig& config, PubSubMode mode = PubSubMode::kPlain,
                   MisroutedLog* misrouted = nullptr) {
    EXPECT_TRUE(EventLoop::Start(&loop_).ok());
    loop_ptr_ = loop_.get();
    subscriber_ = std::make_unique<Subscriber>(
        loop_.get(), config, mode, misrouted ? misrouted->Callback(&loop_ptr_) : nullptr);
  }
  ~Harness() {
    loop_->RunSync([this] { subscriber_->ShutdownOnLoop(); });
    loop_->Stop();
    subscriber_.reset();
  }
  Subscriber* operator->() { return subscriber_.get(); }

 private:
  std::unique_ptr<EventLoop> loop_;
  EventLoop* loop_ptr_ = nullptr;
  std::unique_ptr<Subscriber> subscriber_;
};

RedisConfig Tcp(const std::string& host, int port) {
  RedisConfig config;
  config.host = host;
  config.port = port;
  config.params.connect_timeout_ms = 1000;
  config.params.timeout_ms = 1000;
  return config;
}

int PortOf(const FakeRedis& fake) {
  const std::string address = fake.address();
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// A RESP bulk string.
std::string Bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

std::string ReleaseChannel(const std::string& name) { return "dlock:{" + name + "}:released"; }

class SubscriberTest : public testing::TestWithParam<PubSubMode> {
 protected:
  PubSubMode mode() const { return GetParam(); }
  std::string Publish(const RedisServer& redis, const std::string& channel) {
    const char* publish = mode() == PubSubMode::kSharded ? "SPUBLISH" : "PUBLISH";
    return redis.Cli({publish, channel, "released"});
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, SubscriberTest,
                         testing::Values(PubSubMode::kPlain, PubSubMode::kSharded),
                         [](const testing::TestParamInfo<PubSubMode>& info) {
                           return info.param == PubSubMode::kSharded ? "Sharded" : "Plain";
                         });

TEST_P(SubscriberTest, WakesTheWatchersOfThePublishedChannelOnly) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  Harness sub(Tcp(redis.host(), redis.port()), mode());
  Waiter a, b;
  const std::string channel_a = ReleaseChannel("a"), channel_b = ReleaseChannel("b");
  sub->Watch(channel_a, &a);
  sub->Watch(channel_b, &b);
  ASSERT_TRUE(a.AwaitLive());
  ASSERT_TRUE(b.AwaitLive());
  // Both channels share one connection, whose messages arrive in order: b's own release is
  // b's first wake-up only if a's release did not wake it.
  EXPECT_EQ(Publish(redis, channel_a), "1");
  EXPECT_EQ(Publish(redis, channel_b), "1");
  ASSERT_TRUE(b.AwaitReleases(1));
  EXPECT_EQ(b.told().released, 1);
  EXPECT_EQ(a.told().released, 1);

  // After Unwatch, a hears nothing, though the channel stays subscribed for a while.
  sub->Unwatch(channel_a, &a);
  EXPECT_EQ(Publish(redis, channel_a), "1");
  EXPECT_EQ(Publish(redis, channel_b), "1");
  ASSERT_TRUE(b.AwaitReleases(2));
  EXPECT_EQ(a.told().released, 1);
  EXPECT_EQ(a.told().live, 1);
  EXPECT_EQ(a.told().not_live, 0);
  sub->Unwatch(channel_b, &b);
}

TEST_P(SubscriberTest, AWatcherOfALiveChannelIsToldAtOnce) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  Harness sub(Tcp(redis.host(), redis.port()), mode());
  Waiter first, second;
  const std::string channel = ReleaseChannel("shared");
  sub->Watch(channel, &first);
  ASSERT_TRUE(first.AwaitLive());
  sub->Watch(channel, &second);
  EXPECT_TRUE(second.told().is_live);  // no second SUBSCRIBE to wait for
  EXPECT_EQ(Publish(redis, channel), "1");
  EXPECT_TRUE(first.AwaitReleases(1));
  EXPECT_TRUE(second.AwaitReleases(1));
  sub->Unwatch(channel, &first);
  sub->Unwatch(channel, &second);
}

TEST_P(SubscriberTest, ServerRestartWakesTheWaitersThenResubscribes) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  Harness sub(Tcp(redis.host(), redis.port()), mode());
  Waiter w;
  const std::string channel = ReleaseChannel("restart");
  sub->Watch(channel, &w);
  ASSERT_TRUE(w.AwaitLive());

  redis.Kill();
  ASSERT_TRUE(w.AwaitLost()) << "not told of the lost connection";
  EXPECT_FALSE(w.told().is_live);

  ASSERT_TRUE(redis.Restart());
  ASSERT_TRUE(w.AwaitLive()) << "not subscribed again after the restart";
  const int before = w.told().released;
  EXPECT_EQ(Publish(redis, channel), "1");
  EXPECT_TRUE(w.AwaitReleases(before + 1));
  sub->Unwatch(channel, &w);
}

TEST_P(SubscriberTest, ConnectsOverAUnixSocketAndByHostName) {
  RedisServer redis;
  ASSERT_TRUE(redis.running());
  RedisConfig unix_config = Tcp("", 0);
  unix_config.socket_path = redis.unix_socket();
  Harness over_unix(unix_config, mode());
  Harness by_name(Tcp("localhost", redis.port()), mode());
  Waiter u, n;
  const std::string channel = ReleaseChannel("where");
  over_unix->Watch(channel, &u);
  by_name->Watch(channel, &n);
  ASSERT_TRUE(u.AwaitLive());
  ASSERT_TRUE(n.AwaitLive());
  EXPECT_EQ(Publish(redis, channel), "2");
  EXPECT_TRUE(u.AwaitReleases(1));
  EXPECT_TRUE(n.AwaitReleases(1));
  over_unix->Unwatch(channel, &u);
  by_name->Unwatch(channel, &n);
}

TEST_P(SubscriberTest, AuthenticatesWithAPasswordOrAUserAndPassword) {
  RedisServer redis({"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.running());
  RedisConfig with_password = Tcp(redis.host(), redis.port());
  with_password.password = "s3cret";
  RedisConfig with_user = with_password;
  with_user.user = "default";
  Harness password_only(with_password, mode());
  Harness user_and_password(with_user, mode());
  Waiter p, u;
  const std::string channel = ReleaseChannel("auth");
  password_only->Watch(channel, &p);
  user_and_password->Watch(channel, &u);
  ASSERT_TRUE(p.AwaitLive());
  ASSERT_TRUE(u.AwaitLive());
  EXPECT_EQ(Publish(redis, channel), "2");
  EXPECT_TRUE(p.AwaitReleases(1));
  EXPECT_TRUE(u.AwaitReleases(1));
  password_only->Unwatch(channel, &p);
  user_and_password->Unwatch(channel, &u);
}

TEST_P(SubscriberTest, AWrongOrMissingPasswordIsAFailedWatchNotACrash) {
  RedisServer redis({"--requirepass", "s3cret"});
  ASSERT_TRUE(redis.running());
  RedisConfig wrong = Tcp(redis.host(), redis.port());
  wrong.password = "not-it";
  RedisConfig missing = Tcp(redis.host(), redis.port());
  Harness with_wrong(wrong, mode());
  Harness with_none(missing, mode());
  Waiter w, m;
  const std::string channel = ReleaseChannel("auth");
  with_wrong->Watch(channel, &w);
  with_none->Watch(channel, &m);
  // Told to fall back to retrying, and never live.
  EXPECT_TRUE(w.AwaitLost());
  EXPECT_TRUE(m.AwaitLost());
  EXPECT_EQ(Publish(redis, channel), "0");
  EXPECT_EQ(w.told().live, 0);
  EXPECT_EQ(m.told().live, 0);
  with_wrong->Unwatch(channel, &w);
  with_none->Unwatch(channel, &m);
}

// Both modes at once: the linger is seconds long.
TEST(SubscriberLingerTest, AnIdleChannelIsUnsubscribedAfterLingeringAndCanBeWatchedAgain) {
  struct Case {
    PubSubMode mode;
    std::vector<std::string> publish, count;
  };
  const std::string channel = ReleaseChannel("linger");
  const std::vector<Case> cases = {
      {PubSubMode::kPlain, {"PUBLISH", channel, "x"}, {"PUBSUB", "NUMSUB", channel}},
      {PubSubMode::kSharded, {"SPUBLISH", channel, "x"}, {"PUBSUB", "SHARDNUMSUB", channel}},
  };
  std::vector<std::unique_ptr<RedisServer>> servers;
  std::vector<std::unique_ptr<Harness>> subs;
  std::vector<std::unique_ptr<Waiter>> waiters;
  for (const Case& c : cases) {
    servers.push_back(std::make_unique<RedisServer>());
    ASSERT_TRUE(servers.back()->running());
    const RedisServer& redis = *servers.back();
    subs.push_back(std::make_unique<Harness>(Tcp(redis.host(), redis.port()), c.mode));
    waiters.push_back(std::make_unique<Waiter>());
    (*subs.back())->Watch(channel, waiters.back().get());
    ASSERT_TRUE(waiters.back()->AwaitLive());
  }
  // Each unwatched and asked at once (a lingering channel stays at least 2 s), not after the
  // other server's start, which may take as long on a busy machine.
  for (size_t i = 0; i < cases.size(); ++i) {
    (*subs[i])->Unwatch(channel, waiters[i].get());
    EXPECT_EQ(servers[i]->Cli(cases[i].count), channel + "\n1") << "unsubscribed at once";
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const RedisServer& redis = *servers[i];
    const auto until = std::chrono::steady_clock::now() + 15s;
    while (redis.Cli(cases[i].count) != channel + "\n0" &&
           std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(50ms);
    }
    EXPECT_EQ(redis.Cli(cases[i].count), channel + "\n0") << "never unsubscribed";
    // Subscribed again on the same connection for a new watcher.
    Waiter again;
    (*subs[i])->Watch(channel, &again);
    EXPECT_TRUE(again.AwaitLive());
    EXPECT_EQ(redis.Cli(cases[i].publish), "1");
    EXPECT_TRUE(again.AwaitReleases(1));
    EXPECT_EQ(again.told().not_live, 0);
    (*subs[i])->Unwatch(channel, &again);
    EXPECT_EQ(waiters[i]->told().released, 0);
  }
}

// Replies a real server never sends. Whatever comes, the subscriber survives, tells its
// waiter to fall back to retrying, and tries again on a new connection.
TEST_P(SubscriberTest, ServersThatAnswerGarbageOrNothingNeverCrashIt) {
  const std::string channel = ReleaseChannel("garbage");
  const bool sharded = mode() == PubSubMode::kSharded;
  const std::string confirm = sharded ? "ssubscribe" : "subscribe";
  const std::vector<FakeReply> answers = {
      {"\x01\xffnot resp at all\r\n"},
      {"*2000000000\r\n"},                                          // an absurd array
      {"*3\r\n" + Bulk(confirm) + Bulk("another-channel") + ":1\r\n"},  // not what was asked
      {"*3\r\n" + Bulk(confirm) + ":5\r\n:1\r\n"},                  // channel as an integer
      {"*1\r\n" + Bulk(confirm)},                                   // too short
      {"*3\r\n*1\r\n:1\r\n" + Bulk(channel) + ":1\r\n"},            // nested
      {":1\r\n"},
      {"+OK\r\n"},
      {"*-1\r\n"},
      {"-ERR no\r\n-ERR nobody asked\r\n"},                         // one error too many
      {"*3\r\n" + Bulk(sharded ? "sunsubscribe" : "unsubscribe") + Bulk(channel) + ":0\r\n"},
      {"", 0, /*silent=*/true},                                     // accepts, never answers
      {"", 0, false, /*hang_up=*/true},
  };
  std::vector<std::unique_ptr<FakeRedis>> fakes;
  std::vector<std::unique_ptr<Harness>> subs;
  std::vector<std::unique_ptr<Waiter>> waiters;
  for (const FakeReply& answer : answers) {
    fakes.push_back(std::make_unique<FakeRedis>([answer](const std::vector<std::string>&) {
      return answer;
    }));
    RedisConfig config = Tcp("127.0.0.1", PortOf(*fakes.back()));
    config.params.connect_timeout_ms = 200;
    config.params.timeout_ms = 200;
    subs.push_back(std::make_unique<Harness>(config, mode()));
    waiters.push_back(std::make_unique<Waiter>());
    (*subs.back())->Watch(channel, waiters.back().get());
  }
  const std::string subscribe = sharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  for (size_t i = 0; i < answers.size(); ++i) {
    SCOPED_TRACE("answer #" + std::to_string(i) + ": " + answers[i].bytes);
    // Some answers leave the channel refused (retried after 2 s), the rest the connection
    // dropped (retried after 200 ms): either way the waiter falls back to retrying.
    EXPECT_TRUE(waiters[i]->AwaitLost());
    EXPECT_EQ(waiters[i]->told().live, 0);
    EXPECT_GE(fakes[i]->count(subscribe), 1);
  }
  for (size_t i = 0; i < answers.size(); ++i) (*subs[i])->Unwatch(channel, waiters[i].get());
  subs.clear();  // before the fakes they talk to
}

// A real server's answers, cut into pieces: the reader reassembles them.
TEST_P(SubscriberTest, RepliesTrickledByteByByteAreReassembled) {
  const std::string channel = ReleaseChannel("trickle");
  const bool sharded = mode() == PubSubMode::kSharded;
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply reply;
    if (argv.size() == 2) {
      // The confirmation, then a release message in the same trickle.
      reply.bytes = "*3\r\n" + Bulk(sharded ? "ssubscribe" : "subscribe") + Bulk(argv[1]) +
                    ":1\r\n*3\r\n" + Bulk(sharded ? "smessage" : "message") + Bulk(argv[1]) +
                    Bulk("released");
      reply.trickle_ms = 1;
    }
    return reply;
  });
  RedisConfig config = Tcp("127.0.0.1", PortOf(fake));
  Harness sub(config, mode());
  Waiter w;
  sub->Watch(channel, &w);
  EXPECT_TRUE(w.AwaitLive());
  EXPECT_TRUE(w.AwaitReleases(1));
  EXPECT_EQ(w.told().not_live, 0);
  sub->Unwatch(channel, &w);
}

TEST(SubscriberShardedTest, AChannelTheServerDropsIsMisroutedAndNotRetriedAtOnce) {
  // What Redis 7 sends to a shard channel's subscribers when the slot moves away.
  const std::string channel = ReleaseChannel("moved");
  FakeRedis fake([&](const std::vector<std::string>& argv) {
    FakeReply reply;
    if (argv.size() == 2) {
      reply.bytes = "*3\r\n" + Bulk("ssubscribe") + Bulk(argv[1]) + ":1\r\n*3\r\n" +
                    Bulk("sunsubscribe") + Bulk(argv[1]) + ":0\r\n";
    }
    return reply;
  });
  MisroutedLog misrouted;
  Harness sub(Tcp("127.0.0.1", PortOf(fake)), PubSubMode::kSharded,
              &misrouted);
  Waiter w;
  sub->Watch(channel, &w);
  ASSERT_TRUE(misrouted.AwaitCalls(1));
  EXPECT_EQ(misrouted.channels(), std::vector<std::string>{channel});
  EXPECT_TRUE(misrouted.on_loop_thread());
  EXPECT_TRUE(w.AwaitLost());
  EXPECT_EQ(w.told().live, 1);
  EXPECT_FALSE(w.told().is_live);
  // Not subscribed again in a loop against the node that dropped it.
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(fake.count("SSUBSCRIBE"), 1);
  EXPECT_EQ(misrouted.channels().size(), 1u);
  sub->Unwatch(channel, &w);
}

// ----- a real Redis Cluster ---------------------------------------------------------------

class SubscriberClusterTest : public testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new RedisCluster(); }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(cluster_->ready()); }

  static bool IsMaster(int node) {
    return cluster_->node(node).Cli({"ROLE"}).rfind("master", 0) == 0;
  }
  // The master whose slots hold channel: the one node that publishes there without MOVED.
  static int OwnerOf(const std::string& channel) {
    for (int i = 0; i < RedisCluster::kNodes; ++i) {
      if (!IsMaster(i)) continue;
      if (cluster_->node(i).Cli({"SPUBLISH", channel, "probe"}).rfind("ERR", 0) != 0) return i;
    }
    return -1;
  }
  static RedisConfig NodeConfig(int node) {
    return Tcp(cluster_->node(node).host(), cluster_->node(node).port());
  }
  static std::string NodeId(int node) { return cluster_->node(node).Cli({"CLUSTER", "MYID"}); }

  static RedisCluster* cluster_;
};

RedisCluster* SubscriberClusterTest::cluster_ = nullptr;

TEST_F(SubscriberClusterTest, TheOwningNodeWakesShardedWatchers) {
  const std::string channel = ReleaseChannel("cluster-job");
  const int owner = OwnerOf(channel);
  ASSERT_GE(owner, 0);
  MisroutedLog misrouted;
  Harness sub(NodeConfig(owner), PubSubMode::kSharded, &misrouted);
  Waiter w;
  sub->Watch(channel, &w);
  ASSERT_TRUE(w.AwaitLive());
  EXPECT_EQ(cluster_->node(owner).Cli({"SPUBLISH", channel, "released"}), "1");
  EXPECT_TRUE(w.AwaitReleases(1));
  EXPECT_TRUE(misrouted.channels().empty());
  sub->Unwatch(channel, &w);
}

TEST_F(SubscriberClusterTest, AMasterWithoutTheSlotReportsTheChannelMisrouted) {
  const std::string channel = ReleaseChannel("cluster-job");
  const int owner = OwnerOf(channel);
  ASSERT_GE(owner, 0);
  int other = -1;
  for (int i = 0; i < RedisCluster::kNodes && other < 0; ++i) {
    if (i != owner && IsMaster(i)) other = i;
  }
  ASSERT_GE(other, 0);
  MisroutedLog misrouted;
  Harness sub(NodeConfig(other), PubSubMode::kSharded, &misrouted);
  Waiter w;
  sub->Watch(channel, &w);
  ASSERT_TRUE(misrouted.AwaitCalls(1)) << "SSUBSCRIBE on a node without the slot not reported";
  EXPECT_EQ(misrouted.channels(), std::vector<std::string>{channel});
  EXPECT_TRUE(misrouted.on_loop_thread());
  EXPECT_TRUE(w.AwaitLost());
  EXPECT_EQ(w.told().live, 0);
  sub->Unwatch(channel, &w);
}

// Redis unsubscribes a shard channel's clients itself when the slot leaves the node.
TEST_F(SubscriberClusterTest, ASlotMovedAwayIsReportedAndTheChannelRetriedLater) {
  const std::string channel = ReleaseChannel("cluster-moving");
  const int owner = OwnerOf(channel);
  ASSERT_GE(owner, 0);
  int other = -1;
  for (int i = 0; i < RedisCluster::kNodes && other < 0; ++i) {
    if (i != owner && IsMaster(i)) other = i;
  }
  ASSERT_GE(other, 0);
  MisroutedLog misrouted;
  Harness sub(NodeConfig(owner), PubSubMode::kSharded, &misrouted);
  Waiter w;
  sub->Watch(channel, &w);
  ASSERT_TRUE(w.AwaitLive());

  const std::string slot = std::to_string(dlock::redis::KeySlot(channel));
  // The owner gives the slot away (it holds no keys), then takes it back.
  ASSERT_EQ(cluster_->node(owner).Cli({"CLUSTER", "SETSLOT", slot, "NODE", NodeId(other)}), "OK");
  EXPECT_TRUE(misrouted.AwaitCalls(1)) << "the server's sunsubscribe was not reported";
  EXPECT_TRUE(w.AwaitLost());
  ASSERT_EQ(cluster_->node(owner).Cli({"CLUSTER", "SETSLOT", slot, "NODE", NodeId(owner)}), "OK");
  EXPECT_TRUE(w.AwaitLive()) << "not subscribed again once the slot was back";
  EXPECT_EQ(cluster_->node(owner).Cli({"SPUBLISH", channel, "released"}), "1");
  EXPECT_TRUE(w.AwaitReleases(2));
  sub->Unwatch(channel, &w);
}

}  // namespace
