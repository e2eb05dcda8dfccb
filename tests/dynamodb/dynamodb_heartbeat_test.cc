// Heartbeats (curl multi on the client's loop) and lost-lock detection.
#include <chrono>
#include <set>
#include <thread>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

class DynamoHeartbeatTest : public DynamoTest {};

TEST_F(DynamoHeartbeatTest, HeartbeatsRotateTheRecordVersionAndKeepTheLock) {
  Client client(url());
  Options opts;
  opts.lease(600);  // heartbeat every 200 ms
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "kept", opts.get(), &l), DLOCK_OK);
  std::set<std::string> versions;
  for (int i = 0; i < 8; ++i) {
    versions.insert(S(Item("kept"), "recordVersion"));
    std::this_thread::sleep_for(250ms);
  }
  EXPECT_GE(versions.size(), 5u) << "heartbeats rewrite the record version";
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  // A waiter sees the version change under it and never takes over.
  Client other(url());
  Options wait;
  wait.wait(1500).retry(50, 200);
  dlock_lock* o;
  EXPECT_EQ(dlock_acquire(other.get(), "kept", wait.get(), &o), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoHeartbeatTest, LostWhenTheItemIsChangedBehindTheHoldersBack) {
  Client client(url());
  LostRecorder lost;
  Options opts;
  opts.lease(900).on_lost(&LostRecorder::Fn, &lost);  // heartbeat every 300 ms
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "stolen", opts.get(), &l), DLOCK_OK);
  uint64_t token = dlock_lock_fencing_token(l);
  RawResponse r = ddb_.Call("UpdateItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:stolen"}},)"
                                          R"("UpdateExpression":"SET #o = :o",)"
                                          R"("ExpressionAttributeNames":{"#o":"owner"},)"
                                          R"("ExpressionAttributeValues":{":o":{"S":"intruder"}}})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(WaitFor([&] { return lost.calls.load() == 1; }, 1500ms)) << "on_lost did not fire";
  EXPECT_EQ(lost.token.load(), token);
  EXPECT_FALSE(lost.on_caller_thread.load());
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  EXPECT_EQ(S(Item("stolen"), "owner"), "intruder") << "release must not touch another's lock";
}

TEST_F(DynamoHeartbeatTest, LostWhenTheItemIsDeletedAndTokensStillRise) {
  Client client(url());
  LostRecorder lost;
  Options opts;
  opts.lease(900).on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "deleted", opts.get(), &l), DLOCK_OK);
  uint64_t token = dlock_lock_fencing_token(l);
  ASSERT_EQ(ddb_.Call("DeleteItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:deleted"}}})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return lost.calls.load() == 1; }, 1500ms));
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  // The counter went with the item; the clock seed keeps the next token above the old one.
  dlock_lock* again;
  ASSERT_EQ(dlock_acquire(client.get(), "deleted", nullptr, &again), DLOCK_OK);
  EXPECT_GT(dlock_lock_fencing_token(again), token);
  EXPECT_EQ(dlock_release(again), DLOCK_OK);
}

TEST_F(DynamoHeartbeatTest, ReleaseOfATakenOverLockIsNotHeld) {
  Client first(url()), second(url());
  Options no_heartbeat;
  no_heartbeat.lease(400).heartbeat(0);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(first.get(), "overtaken", no_heartbeat.get(), &l), DLOCK_OK);
  Options wait;
  wait.wait(5000).retry(50, 200);
  dlock_lock* o;
  ASSERT_EQ(dlock_acquire(second.get(), "overtaken", wait.get(), &o), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(o), dlock_lock_fencing_token(l));
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_extend(l, 1000), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_release(o), DLOCK_OK);
}

TEST_F(DynamoHeartbeatTest, StoppedServerLosesTheLockByItsDeadline) {
  Client client(url("timeout_ms=300&connect_timeout_ms=300"));
  LostRecorder lost;
  Options opts;
  opts.lease(900).on_lost(&LostRecorder::Fn, &lost);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "orphan", opts.get(), &l), DLOCK_OK);
  ddb_.Stop();
  EXPECT_TRUE(WaitFor([&] { return lost.calls.load() == 1; }, 3000ms));
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
}

TEST_F(DynamoHeartbeatTest, ClosingTheClientReleasesItsLocks) {
  dlock_client* c;
  ASSERT_EQ(dlock_client_open(url().c_str(), &c), DLOCK_OK);
  std::vector<dlock_lock*> locks(20);
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(dlock_acquire(c, ("many-" + std::to_string(i)).c_str(), nullptr, &locks[i]), DLOCK_OK);
  }
  dlock_client_close(c);
  for (int i = 0; i < 20; ++i) {
    EXPECT_FALSE(Item("many-" + std::to_string(i)).contains("owner")) << i;
    EXPECT_EQ(dlock_release(locks[i]), DLOCK_NOT_HELD);
  }
}

}  // namespace
}  // namespace dlock_test
