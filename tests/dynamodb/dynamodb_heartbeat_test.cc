// Heartbeats the DynamoDB way (each renewal rotates the recordVersion) and a loss a waiter
// cannot cause: the owner overwritten. (Heartbeats and losses on every backend are in
// conformance/.)
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
  opts.lease(1000).heartbeat(100);  // a renewal may come 900 ms late on a busy machine
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "kept", opts.get(), &l), DLOCK_OK);
  // Heartbeats rewrite the record version: five versions seen, however long they take.
  std::set<std::string> versions;
  EXPECT_TRUE(WaitFor(
      [&] {
        versions.insert(S(Item("kept"), "recordVersion"));
        return versions.size() >= 5;
      },
      20000ms))
      << "heartbeats rewrite the record version: " << versions.size() << " seen";
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  // A waiter sees the version change under it and never takes over, over two leases.
  Client other(url());
  Options wait;
  wait.wait(2300).retry(50, 200);
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
  EXPECT_TRUE(WaitFor([&] { return lost.calls.load() == 1; }, 10000ms)) << "on_lost did not fire";
  EXPECT_EQ(lost.token.load(), token);
  EXPECT_FALSE(lost.on_caller_thread.load());
  EXPECT_EQ(dlock_lock_is_valid(l), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);
  EXPECT_EQ(S(Item("stolen"), "owner"), "intruder") << "release must not touch another's lock";
}

}  // namespace
}  // namespace dlock_test
