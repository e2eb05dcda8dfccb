// Breaking a lock on DynamoDB, against a real dynalite: what the item keeps (the fence, a record
// of each broken token and the reason, a marker that closes the name), the marker lapsing on a
// waiter's own clock as a lease does, a break of more holds than one write takes, and stored
// records that dlock did not write. (What every backend does is in conformance/break_test.cc.)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

long long MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// What dlock_break_with reported.
struct Broke {
  dlock_status status = DLOCK_EINTERNAL;
  std::string error;
  dlock_kind kind = DLOCK_EXCLUSIVE;
  uint32_t permits = 0;
  std::vector<std::string> owners;
  std::vector<uint64_t> tokens;
  std::vector<int64_t> remaining;
  int64_t closed_ms = -1;
  std::string closed_by;
};

class DynamoBreakTest : public DynamoTest {
 protected:
  static Broke Break(dlock_client* c, const std::string& name, const char* reason, uint32_t flags = 0) {
    Broke b;
    dlock_info* info = nullptr;
    b.status = dlock_break_with(c, name.c_str(), reason, flags, &info);
    if (b.status != DLOCK_OK) b.error = dlock_last_error();
    if (info == nullptr) return b;
    b.kind = dlock_info_kind(info);
    b.permits = dlock_info_permits(info);
    for (uint32_t k = 0; k < dlock_info_holders(info); ++k) {
      b.owners.push_back(dlock_info_owner(info, k));
      b.tokens.push_back(dlock_info_fencing_token(info, k));
      b.remaining.push_back(dlock_info_remaining_ms(info, k));
    }
    b.closed_ms = dlock_info_closed_ms(info);
    b.closed_by = dlock_info_closed_by(info);
    dlock_info_free(info);
    return b;
  }
  // dlock_inspect's closed time (-1 when the inspect failed), and holders.
  static int64_t ClosedMs(dlock_client* c, const std::string& name, uint32_t* holders = nullptr,
                          std::string* closed_by = nullptr) {
    dlock_info* info = nullptr;
    if (dlock_inspect(c, name.c_str(), &info) != DLOCK_OK) return -1;
    int64_t ms = dlock_info_closed_ms(info);
    if (holders != nullptr) *holders = dlock_info_holders(info);
    if (closed_by != nullptr) *closed_by = dlock_info_closed_by(info);
    dlock_info_free(info);
    return ms;
  }
  // The tokens of the item's newest break record, and its reason.
  std::vector<uint64_t> RecordedTokens(const std::string& name, std::string* reason = nullptr) {
    nlohmann::json item = Item(name);
    std::vector<uint64_t> tokens;
    if (!item.contains("broken") || item["broken"]["L"].empty()) return tokens;
    const nlohmann::json& newest = item["broken"]["L"][0]["M"];
    for (const auto& t : newest["tokens"]["L"]) tokens.push_back(std::stoull(t["N"].get<std::string>()));
    if (reason != nullptr) *reason = S(newest, "reason");
    return tokens;
  }
  bool Put(const std::string& item_json) {
    return ddb_.Call("PutItem", R"({"TableName":"locks","Item":)" + item_json + "}").status == 200;
  }
};

TEST_F(DynamoBreakTest, AnExclusiveHoldIsBrokenTheFenceKeptAndTheNameClosedForItsLease) {
  Client holder(url()), breaker(url()), other(url());
  LostRecorder lost;
  Options o;
  o.lease(1500).owner("victim").on_lost(LostRecorder::Fn, &lost);
  dlock_lock* victim;
  ASSERT_EQ(dlock_acquire(holder.get(), "job", o.get(), &victim), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(victim);
  const uint64_t fence = N(Item("job"), "fence");

  Broke b = Break(breaker.get(), "job", "stuck job");
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  ASSERT_EQ(b.owners, std::vector<std::string>{"victim"});
  EXPECT_EQ(b.tokens[0], token);
  EXPECT_GT(b.remaining[0], 1000) << "a lease this client first saw now counts in full";
  EXPECT_LE(b.remaining[0], 1500);
  EXPECT_EQ(b.closed_ms, b.remaining[0]) << "closed for the longest remaining lease";
  EXPECT_EQ(b.closed_by, "broken");

  // The item: no holder, the same fence, the marker, and the record of the broken token.
  nlohmann::json item = Item("job");
  EXPECT_FALSE(item.contains("owner"));
  EXPECT_EQ(N(item, "fence"), fence) << "a break never touches the fencing counter";
  ASSERT_TRUE(item.contains("closed"));
  EXPECT_EQ(S(item["closed"]["M"], "by"), "broken");
  EXPECT_EQ(static_cast<int64_t>(N(item["closed"]["M"], "leaseMs")), b.closed_ms);
  std::string reason;
  EXPECT_EQ(RecordedTokens("job", &reason), std::vector<uint64_t>{token});
  EXPECT_EQ(reason, "stuck job");

  // Closed to everyone, holder-less.
  uint32_t holders = 99;
  std::string closed_by;
  int64_t closed = ClosedMs(other.get(), "job", &holders, &closed_by);
  EXPECT_GT(closed, 0);
  EXPECT_LE(closed, 1500);
  EXPECT_EQ(holders, 0u);
  EXPECT_EQ(closed_by, "broken");
  Options once;
  once.wait(0);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(other.get(), "job", once.get(), &l), DLOCK_NOT_ACQUIRED);
  Options shared_once;
  shared_once.wait(0).shared();
  EXPECT_EQ(dlock_acquire(other.get(), "job", shared_once.get(), &l), DLOCK_NOT_ACQUIRED);

  // The broken holder hears it at its next renewal, with the reason (on_lost comes once the
  // core has looked at the name and settled the cause).
  ASSERT_TRUE(WaitFor([&] { return lost.calls == 1; }, 3000ms));
  const std::string cause = dlock_lock_lost_cause(victim);
  EXPECT_EQ(cause.rfind("broken: ", 0), 0u) << cause;
  EXPECT_NE(cause.find("stuck job"), std::string::npos) << cause;
  EXPECT_EQ(dlock_lock_is_valid(victim), 0);
  EXPECT_EQ(dlock_release(victim), DLOCK_NOT_HELD);

  // Free once the marker lapsed; the next token is above the broken one.
  Options patient;
  patient.wait(5000).retry(20, 100);
  ASSERT_EQ(dlock_acquire(other.get(), "job", patient.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(l), token);
  EXPECT_FALSE(Item("job").contains("closed")) << "the acquire removed the lapsed marker";
  EXPECT_EQ(RecordedTokens("job"), std::vector<uint64_t>{token}) << "records outlive acquires";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoBreakTest, BreakNowFreesSharedHoldsAtOnce) {
  Client readers(url()), breaker(url());
  dlock_lock* held[3];
  uint64_t highest = 0;
  for (auto*& h : held) {
    Options o;
    o.shared().lease(10000);
    ASSERT_EQ(dlock_acquire(readers.get(), "reports", o.get(), &h), DLOCK_OK) << dlock_last_error();
    highest = std::max(highest, dlock_lock_fencing_token(h));
  }
  Broke b = Break(breaker.get(), "reports", nullptr, DLOCK_BREAK_NOW);
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  EXPECT_EQ(b.kind, DLOCK_SHARED);
  EXPECT_EQ(b.tokens.size(), 3u);
  EXPECT_EQ(b.closed_ms, 0);
  EXPECT_EQ(b.closed_by, "");
  nlohmann::json item = Item("reports");
  EXPECT_FALSE(item.contains("closed"));
  EXPECT_TRUE(item["holds"]["M"].empty());
  std::string reason = "?";
  EXPECT_EQ(RecordedTokens("reports", &reason).size(), 3u);
  EXPECT_EQ(reason, "") << "no reason given, none stored";

  Options once;
  once.wait(0);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(breaker.get(), "reports", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_GT(dlock_lock_fencing_token(l), highest);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  for (auto* h : held) EXPECT_EQ(dlock_release(h), DLOCK_NOT_HELD);
}

TEST_F(DynamoBreakTest, AHoldWithoutALeaseLeavesNoMarker) {
  Client holder(url()), breaker(url());
  Options o;
  o.lease(0);
  dlock_lock* forever;
  ASSERT_EQ(dlock_acquire(holder.get(), "fail-closed", o.get(), &forever), DLOCK_OK) << dlock_last_error();
  Broke b = Break(breaker.get(), "fail-closed", "operator");
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  ASSERT_EQ(b.remaining, std::vector<int64_t>{-1});
  EXPECT_EQ(b.closed_ms, 0);
  EXPECT_FALSE(Item("fail-closed").contains("closed"));
  Options once;
  once.wait(0);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(breaker.get(), "fail-closed", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  // Without heartbeats the broken holder hears it at its release.
  EXPECT_EQ(dlock_release(forever), DLOCK_NOT_HELD);
}

TEST_F(DynamoBreakTest, ASecondBreakNowClearsTheMarkerAndABreakOfNothingIsOk) {
  Client holder(url()), breaker(url());
  Broke none = Break(breaker.get(), "nothing", "no one");
  ASSERT_EQ(none.status, DLOCK_OK) << none.error;
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.closed_ms, 0);
  EXPECT_TRUE(Item("nothing").is_null()) << "nothing written for a name never used";

  Options o;
  o.lease(10000);
  dlock_lock* victim;
  ASSERT_EQ(dlock_acquire(holder.get(), "twice", o.get(), &victim), DLOCK_OK) << dlock_last_error();
  Broke first = Break(breaker.get(), "twice", "first");
  ASSERT_EQ(first.status, DLOCK_OK) << first.error;
  EXPECT_GT(first.closed_ms, 9000);
  Broke second = Break(breaker.get(), "twice", "second", DLOCK_BREAK_NOW);
  ASSERT_EQ(second.status, DLOCK_OK) << second.error;
  EXPECT_TRUE(second.tokens.empty());
  EXPECT_EQ(second.closed_ms, 0);
  EXPECT_FALSE(Item("twice").contains("closed"));
  std::string reason;
  EXPECT_EQ(RecordedTokens("twice", &reason), std::vector<uint64_t>{dlock_lock_fencing_token(victim)});
  EXPECT_EQ(reason, "first") << "a break of no hold records nothing";
  Options once;
  once.wait(0);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(breaker.get(), "twice", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(victim), DLOCK_NOT_HELD);
}

// A second break (without now) of a name the first one keeps closed breaks nothing, writes
// nothing, and keeps the name closed for the rest of the first one's time: the holder the first
// one broke may still be working. A break with now then frees the name at once.
TEST_F(DynamoBreakTest, ASecondBreakKeepsWhatIsLeftOfTheFirstsClosedTimeAndNowFreesTheName) {
  Client holder(url()), breaker(url()), other(url());
  Options o;
  o.lease(2500);
  dlock_lock* victim;
  ASSERT_EQ(dlock_acquire(holder.get(), "again", o.get(), &victim), DLOCK_OK) << dlock_last_error();
  Broke first = Break(breaker.get(), "again", "first");
  const auto first_at = Clock::now();
  ASSERT_EQ(first.status, DLOCK_OK) << first.error;
  ASSERT_EQ(first.tokens.size(), 1u);
  EXPECT_GT(first.closed_ms, 2000);
  const nlohmann::json marker = Item("again")["closed"];
  ASSERT_FALSE(marker.is_null());

  std::this_thread::sleep_for(300ms);
  Broke second = Break(breaker.get(), "again", "second");
  const auto second_at = Clock::now();
  ASSERT_EQ(second.status, DLOCK_OK) << second.error;
  EXPECT_TRUE(second.tokens.empty());
  EXPECT_GT(second.closed_ms, 0) << "the second break cleared the first one's marker";
  EXPECT_LE(second.closed_ms, first.closed_ms - 300) << "more than what was left of the first break's time";
  EXPECT_GE(second.closed_ms, first.closed_ms - MsSince(first_at) - 200) << "not what was left of the first break's time";
  EXPECT_EQ(second.closed_by, "broken");
  nlohmann::json item = Item("again");
  EXPECT_EQ(item["closed"], marker) << "the marker stands as it was: waiters keep counting";
  std::string reason;
  EXPECT_EQ(RecordedTokens("again", &reason), std::vector<uint64_t>{dlock_lock_fencing_token(victim)});
  EXPECT_EQ(reason, "first") << "a break of no hold records nothing";

  // Refused until then, even to the breaker that counts the marker from its own write.
  Options once;
  once.wait(0);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(other.get(), "again", once.get(), &l), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_acquire(breaker.get(), "again", once.get(), &l), DLOCK_NOT_ACQUIRED);
  if (second.closed_ms > 400) {
    std::this_thread::sleep_for(std::chrono::milliseconds(second.closed_ms - 400) - (Clock::now() - second_at));
  }
  EXPECT_EQ(dlock_acquire(breaker.get(), "again", once.get(), &l), DLOCK_NOT_ACQUIRED)
      << "opened " << MsSince(second_at) << " ms after the second break, which said " << second.closed_ms;

  Broke now = Break(breaker.get(), "again", "now", DLOCK_BREAK_NOW);
  ASSERT_EQ(now.status, DLOCK_OK) << now.error;
  EXPECT_TRUE(now.tokens.empty());
  EXPECT_EQ(now.closed_ms, 0);
  EXPECT_EQ(now.closed_by, "");
  EXPECT_FALSE(Item("again").contains("closed"));
  ASSERT_EQ(dlock_acquire(other.get(), "again", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(victim), DLOCK_NOT_HELD);
}

TEST_F(DynamoBreakTest, TheMarkerLapsesOnTheWaitersClockUnlessItTrustsWallClocks) {
  Client holder(url()), breaker(url());
  Options o;
  o.lease(3000);
  dlock_lock* victim;
  ASSERT_EQ(dlock_acquire(holder.get(), "clocks", o.get(), &victim), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(Break(breaker.get(), "clocks", "clocks").status, DLOCK_OK);
  // As if the breaker's wall clock had been far behind: the marker reads as long over.
  ASSERT_EQ(ddb_.Call("UpdateItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:clocks"}},)"
                                    R"("UpdateExpression":"SET closed.renewedAtMs = :old",)"
                                    R"("ExpressionAttributeValues":{":old":{"N":"1"}}})")
                .status,
            200);
  Client fresh(url()), trusting(url("trust_local_time=1"));
  EXPECT_EQ(ClosedMs(fresh.get(), "clocks"), 0) << "inspect estimates by the wall clock";
  Options once;
  once.wait(0);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(fresh.get(), "clocks", once.get(), &l), DLOCK_NOT_ACQUIRED)
      << "a waiter that first sees the marker waits its whole time on its own clock";
  ASSERT_EQ(dlock_acquire(trusting.get(), "clocks", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_release(victim), DLOCK_NOT_HELD);
}

TEST_F(DynamoBreakTest, MoreHoldsThanOneWriteTakesAreAllBroken) {
  constexpr uint32_t kHolds = 230;  // three writes of at most 100 each
  Client holder(url()), breaker(url());
  std::vector<dlock_lock*> held;
  for (uint32_t i = 0; i < kHolds; ++i) {
    Options o;
    o.permits(kHolds).lease(0);
    dlock_lock* h;
    ASSERT_EQ(dlock_acquire(holder.get(), "pool", o.get(), &h), DLOCK_OK) << i << ": " << dlock_last_error();
    held.push_back(h);
  }
  Broke b = Break(breaker.get(), "pool", "drain");
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  EXPECT_EQ(b.tokens.size(), kHolds);
  EXPECT_EQ(b.permits, kHolds);
  EXPECT_EQ(b.closed_ms, 0) << "holds without a lease: the name is free at once";
  nlohmann::json item = Item("pool");
  EXPECT_TRUE(item["holds"]["M"].empty());
  EXPECT_FALSE(item.contains("closed")) << "the marker that kept it closed between writes is gone";
  // The newest tokens are kept, at most 64.
  size_t recorded = 0;
  for (const auto& record : item["broken"]["L"]) recorded += record["M"]["tokens"]["L"].size();
  EXPECT_EQ(recorded, 64u);
  EXPECT_EQ(RecordedTokens("pool").front(), dlock_lock_fencing_token(held.back()));
  // The newest hold hears "broken"; the oldest, past the records, "deleted".
  EXPECT_EQ(dlock_release(held.back()), DLOCK_NOT_HELD);
  held.pop_back();
  dlock_lock* oldest = held.front();
  EXPECT_EQ(dlock_extend(oldest, 0), DLOCK_NOT_HELD);
  ASSERT_NE(dlock_lock_lost_cause(oldest), nullptr);
  EXPECT_EQ(std::string(dlock_lock_lost_cause(oldest)).find("broken"), std::string::npos)
      << dlock_lock_lost_cause(oldest);
  for (auto* h : held) (void)dlock_release(h);
}

TEST_F(DynamoBreakTest, StoredAttributesDlockDidNotWriteAreClearErrors) {
  Client c(url());
  ASSERT_TRUE(Put(R"({"id":{"S":"dlock:odd"},"closed":{"S":"not a marker"}})"));
  Options once;
  once.wait(0);
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(c.get(), "odd", once.get(), &l), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("closed"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(ClosedMs(c.get(), "odd"), -1);
  // A break removes a marker it cannot read.
  Broke b = Break(c.get(), "odd", "repair");
  ASSERT_EQ(b.status, DLOCK_OK) << b.error;
  EXPECT_FALSE(Item("odd").contains("closed"));
  ASSERT_EQ(dlock_acquire(c.get(), "odd", once.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);

  ASSERT_TRUE(Put(R"({"id":{"S":"dlock:odd2"},"broken":{"L":[{"M":{"atMs":{"S":"x"}}}]}})"));
  EXPECT_EQ(ClosedMs(c.get(), "odd2"), -1) << "inspect refuses records it cannot read";
  EXPECT_NE(std::string(dlock_last_error()).find("broken"), std::string::npos) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(c.get(), "odd2", once.get(), &l), DLOCK_OK) << dlock_last_error();
  Broke replaced = Break(c.get(), "odd2", "repair", DLOCK_BREAK_NOW);
  ASSERT_EQ(replaced.status, DLOCK_OK) << replaced.error;
  EXPECT_EQ(RecordedTokens("odd2"), std::vector<uint64_t>{dlock_lock_fencing_token(l)});
  EXPECT_EQ(ClosedMs(c.get(), "odd2"), 0);
  EXPECT_EQ(dlock_release(l), DLOCK_NOT_HELD);

  ASSERT_TRUE(Put(R"({"id":{"S":"dlock:odd3"},"holds":{"S":"not a map"}})"));
  Broke refused = Break(c.get(), "odd3", "repair");
  EXPECT_EQ(refused.status, DLOCK_EBACKEND);
  EXPECT_NE(refused.error.find("holds"), std::string::npos) << refused.error;
}

// A renewal that lands between the break's read and its write refuses the write (the lease
// judged may have changed). Renewing back to back, the holder can win that race every time on
// a slow server (CI saw 19 refusals in a row under ASan): after two refusals the break lets
// renewals pass and closes the name for the whole lease, so it wins in every round.
TEST_F(DynamoBreakTest, ABreakWinsAgainstAHolderRenewingAllTheTime) {
  Client holder(url()), breaker(url());
  for (int round = 0; round < 5; ++round) {
    const std::string name = "busy" + std::to_string(round);
    Options o;
    o.lease(2000).heartbeat(1);
    dlock_lock* busy;
    ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &busy), DLOCK_OK) << dlock_last_error();
    std::this_thread::sleep_for(30ms);
    Broke b = Break(breaker.get(), name, "busy");
    ASSERT_EQ(b.status, DLOCK_OK) << b.error;
    ASSERT_EQ(b.tokens, std::vector<uint64_t>{dlock_lock_fencing_token(busy)});
    EXPECT_GT(b.closed_ms, 1500);
    EXPECT_LE(b.closed_ms, 2000) << "never longer than the lease broken";
    ASSERT_TRUE(WaitFor([&] { return dlock_lock_is_valid(busy) == 0; }, 3000ms));
    EXPECT_EQ(dlock_release(busy), DLOCK_NOT_HELD);
  }
}

}  // namespace
}  // namespace dlock_test
