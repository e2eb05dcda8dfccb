// Asking a holder to let go (issue 37, dlock_request_release), on every backend and in every
// style: the holder that listens hears the reason once per request, nothing is taken from it,
// it may release from inside its handler, and nobody else hears a request meant for another.
#include <thread>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

using std::chrono::milliseconds;

// etcd's layout=mutex has no release requests (its own tests check the refusal).
class ReleaseRequests : public StyleTest {
  void SetUp() override {
    if ((backend().capabilities & DLOCK_CAP_RELEASE_REQUEST) == 0) GTEST_SKIP() << "no DLOCK_CAP_RELEASE_REQUEST here";
  }
};
class ReleaseRequestsOnce : public BackendTest {
  void SetUp() override {
    if ((backend().capabilities & DLOCK_CAP_RELEASE_REQUEST) == 0) GTEST_SKIP() << "no DLOCK_CAP_RELEASE_REQUEST here";
  }
};

// Asks the holders of name until holder hears it (its subscription, watch or LISTEN becomes
// live one round trip after its acquire; DynamoDB tells it with its next renewal), up to limit.
// *asked: how many requests it sent. A request that crossed the holder's start of listening may
// be heard late, with the next one (PostgreSQL delivers a NOTIFY that raced a LISTEN's commit
// at the listener's next wake-up): the holder hears at most that many, each once.
RequestReport AskUntilHeard(dlock_client* asker, StyledClient* holder, const std::string& name,
                            const char* reason, int* asked = nullptr, milliseconds limit = milliseconds(8000)) {
  const auto until = Clock::now() + limit;
  RequestReport heard;
  int sent = 0;
  while (heard.count == 0 && Clock::now() < until) {
    EXPECT_EQ(dlock_request_release(asker, name.c_str(), reason), DLOCK_OK) << dlock_last_error();
    ++sent;
    heard = holder->AwaitReleaseRequest(milliseconds(300));
  }
  if (asked != nullptr) *asked = sent;
  return heard;
}

// The holder hears the reason, once for one request (Redlock's masters each carry it, and
// DynamoDB's renewals read it again), and keeps the lock: nothing is taken by force. Once it
// releases, the name is free at once.
TEST_P(ReleaseRequests, TheHolderHearsTheReasonOnceAndKeepsTheLock) {
  auto c = Open();
  Client asker(url());
  const std::string name = Name("request");
  Options o;
  o.lease(2000).heartbeat(250).owner("nightly-report");
  c->HearReleaseRequests(o.mutable_get());
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();

  int asked = 0;
  RequestReport heard = AskUntilHeard(asker.get(), c.get(), name, "deploy 4411 needs the schema", &asked);
  ASSERT_GE(heard.count, 1) << "the request never reached the holder";
  ASSERT_LE(heard.count, asked) << "a request was heard more than once";
  EXPECT_EQ(heard.reason, "deploy 4411 needs the schema");

  // Heard once: more renewals and every master's copy add nothing.
  c->Pass(milliseconds(400));
  EXPECT_EQ(c->AwaitReleaseRequest(milliseconds(0)).count, heard.count);
  EXPECT_EQ(dlock_lock_is_valid(l), 1) << "a request took the lock";
  Snapshot held = Inspect(asker.get(), name);
  ASSERT_EQ(held.holders.size(), 1u) << held;
  EXPECT_EQ(held.holders[0].owner, "nightly-report");
  EXPECT_EQ(TryToTake(asker.get(), name).status, DLOCK_NOT_ACQUIRED);

  ASSERT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  EXPECT_EQ(TryToTake(asker.get(), name).status, DLOCK_OK);
}

// A request names no one but the holders of that name at that time: a holder that released
// hears nothing of a request made to the next, and neither does a holder of another name.
TEST_P(ReleaseRequestsOnce, OnlyTheCurrentHolderHears) {
  auto first = StyledClient::Open(Style::kBlocking, url());
  auto second = StyledClient::Open(Style::kBlocking, url());
  Client asker(url());
  const std::string name = Name("request-current"), other = Name("request-other");
  Options o;
  o.lease(2000).heartbeat(250);
  first->HearReleaseRequests(o.mutable_get());
  dlock_lock* gone = nullptr;
  ASSERT_EQ(first->Acquire(name.c_str(), o.get(), &gone), DLOCK_OK) << first->last_error();
  ASSERT_EQ(first->Release(gone), DLOCK_OK) << first->last_error();
  dlock_lock* elsewhere = nullptr;
  ASSERT_EQ(first->Acquire(other.c_str(), o.get(), &elsewhere), DLOCK_OK) << first->last_error();

  Options o2;
  o2.lease(2000).heartbeat(250);
  second->HearReleaseRequests(o2.mutable_get());
  dlock_lock* now = nullptr;
  ASSERT_EQ(second->Acquire(name.c_str(), o2.get(), &now), DLOCK_OK) << second->last_error();
  int asked = 0;
  RequestReport heard = AskUntilHeard(asker.get(), second.get(), name, "for the current one", &asked);
  ASSERT_GE(heard.count, 1);
  ASSERT_LE(heard.count, asked);
  EXPECT_EQ(heard.reason, "for the current one");
  EXPECT_EQ(first->AwaitReleaseRequest(milliseconds(300)).count, 0)
      << "a request for '" << name << "' reached a holder that had let go of it";
  EXPECT_EQ(second->Release(now), DLOCK_OK) << second->last_error();
  EXPECT_EQ(first->Release(elsewhere), DLOCK_OK) << first->last_error();
}

// Every shared holder is asked, and hears it.
TEST_P(ReleaseRequestsOnce, EverySharedHolderHears) {
  Client asker(url());
  if ((dlock_client_capabilities(asker.get()) & DLOCK_CAP_SHARED) == 0) GTEST_SKIP() << "no shared locks";
  auto a = StyledClient::Open(Style::kBlocking, url());
  auto b = StyledClient::Open(Style::kBlocking, url());
  const std::string name = Name("request-shared");
  dlock_lock* la = nullptr;
  dlock_lock* lb = nullptr;
  Options oa, ob;
  oa.lease(2000).heartbeat(250).shared();
  ob.lease(2000).heartbeat(250).shared();
  a->HearReleaseRequests(oa.mutable_get());
  b->HearReleaseRequests(ob.mutable_get());
  ASSERT_EQ(a->Acquire(name.c_str(), oa.get(), &la), DLOCK_OK) << a->last_error();
  ASSERT_EQ(b->Acquire(name.c_str(), ob.get(), &lb), DLOCK_OK) << b->last_error();
  EXPECT_EQ(AskUntilHeard(asker.get(), a.get(), name, "readers out").reason, "readers out");
  EXPECT_EQ(AskUntilHeard(asker.get(), b.get(), name, "readers out").reason, "readers out");
  EXPECT_EQ(a->Release(la), DLOCK_OK);
  EXPECT_EQ(b->Release(lb), DLOCK_OK);
}

// The holder may release from inside its handler; a waiter then gets the lock.
void ReleaseWhenAsked(const char* /*name*/, const char* /*reason*/, void* arg) {
  auto* slot = static_cast<std::atomic<dlock_lock*>*>(arg);
  dlock_lock* l = slot->exchange(nullptr);
  if (l != nullptr) {
    EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  }
}

TEST_P(ReleaseRequestsOnce, AHolderThatLetsGoInItsHandlerHandsOver) {
  Client holder(url()), asker(url());
  const std::string name = Name("request-let-go");
  std::atomic<dlock_lock*> slot{nullptr};
  Options o;
  o.lease(5000).heartbeat(250);
  ASSERT_EQ(dlock_options_set_on_release_requested(o.mutable_get(), &ReleaseWhenAsked, &slot), DLOCK_OK);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  slot = l;
  const auto until = Clock::now() + milliseconds(8000);
  while (slot.load() != nullptr && Clock::now() < until) {
    EXPECT_EQ(dlock_request_release(asker.get(), name.c_str(), "my turn"), DLOCK_OK) << dlock_last_error();
    std::this_thread::sleep_for(milliseconds(200));
  }
  ASSERT_EQ(slot.load(), nullptr) << "the handler never ran";
  // Released, not expired: a one-try acquire succeeds long before the 5 s lease would end.
  EXPECT_EQ(TryToTake(asker.get(), name, 2000).status, DLOCK_OK);
}

// A free name has no one to ask; a holder that does not listen keeps its lock and hears
// nothing; bad input changes nothing.
TEST_P(ReleaseRequestsOnce, AFreeNameADeafHolderAndBadInput) {
  Client c(url());
  EXPECT_NE(dlock_client_capabilities(c.get()) & DLOCK_CAP_RELEASE_REQUEST, 0u);
  const std::string name = Name("request-free");
  EXPECT_EQ(dlock_request_release(c.get(), name.c_str(), "anyone?"), DLOCK_NOT_HELD);
  EXPECT_NE(std::string(dlock_last_error()).find(name), std::string::npos) << dlock_last_error();

  Options o;
  o.lease(2000).heartbeat(250);
  Hold deaf(c.get(), name, o.get());
  ASSERT_TRUE(deaf.held()) << deaf.error();
  EXPECT_EQ(dlock_request_release(c.get(), name.c_str(), nullptr), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_request_release(c.get(), name.c_str(), ""), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(milliseconds(300));
  EXPECT_EQ(dlock_lock_is_valid(deaf.get()), 1);

  const std::string long_reason(1025, 'r');
  EXPECT_EQ(dlock_request_release(c.get(), name.c_str(), long_reason.c_str()), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("reason"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_request_release(c.get(), nullptr, "x"), DLOCK_EINVAL);
  EXPECT_EQ(dlock_request_release(nullptr, name.c_str(), "x"), DLOCK_EINVAL);
  char buf[256] = "";
  EXPECT_EQ(dlock_request_release_errbuf(c.get(), name.c_str(), long_reason.c_str(), buf, sizeof buf),
            DLOCK_EINVAL);
  EXPECT_NE(std::string(buf).find("reason"), std::string::npos) << buf;
  EXPECT_EQ(dlock_options_set_on_release_requested(nullptr, nullptr, nullptr), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_on_release_requested_queued(nullptr, nullptr, 0), DLOCK_EINVAL);
  EXPECT_EQ(deaf.Release(), DLOCK_OK);
}

INSTANTIATE_TEST_SUITE_P(Conformance, ReleaseRequests,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);
INSTANTIATE_TEST_SUITE_P(Conformance, ReleaseRequestsOnce, ::testing::ValuesIn(AllBackends()),
                         BackendTestName);

}  // namespace
}  // namespace dlock_test
