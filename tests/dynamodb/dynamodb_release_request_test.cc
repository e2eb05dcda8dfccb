// Release requests on DynamoDB (dlock_request_release; lock_protocol.h, "Release requests"),
// against a real dynalite: the request is stored on the lock's item with the fence of the time,
// and a listening holder hears it with its next renewal; a later holder does not, a holder
// that does not listen renews as before. (What every backend does is in
// conformance/release_request_test.cc.)
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


// Renewals every 300 ms: a request is heard within that, plus a round trip and the loop's turn.
constexpr uint64_t kHeartbeatMs = 300;
constexpr auto kHearWithin = std::chrono::milliseconds(kHeartbeatMs + (kUnderSanitizer ? 1500 + kSlackMs : 1500));

class DynamoReleaseRequestTest : public DynamoTest {
 protected:
  // Options of a holder that renews every kHeartbeatMs and listens with heard (null: does not).
  static void Holder(Options& o, RequestsHeard* heard) {
    o.lease(3000).heartbeat(kHeartbeatMs);
    if (heard != nullptr) {
      ASSERT_EQ(dlock_options_set_on_release_requested(o.mutable_get(), &RequestsHeard::Fn, heard), DLOCK_OK);
    }
  }
  // The item's releaseRequest fields (null when it has none).
  nlohmann::json Request(const std::string& name) const {
    nlohmann::json item = Item(name);
    return item.is_object() && item.contains("releaseRequest") ? item["releaseRequest"]["M"] : nlohmann::json();
  }
};

// One request, stored on the item with the holder's token as the fence of the time, reaches the
// listening holder at its next renewal, with the reason; it keeps its lock, and hears that
// request once however many renewals read it again.
TEST_F(DynamoReleaseRequestTest, HeardAtTheNextRenewalWithTheReason) {
  Client holder(url()), asker(url());
  RequestsHeard heard;
  Options o;
  Holder(o, &heard);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "asked", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const auto asked = Clock::now();
  ASSERT_EQ(dlock_request_release(asker.get(), "asked", "deploy 7 needs it"), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return heard.calls.load() > 0; }, kHearWithin)) << "not heard at the renewals";
  EXPECT_LT(ElapsedMs(asked), kHearWithin.count());
  EXPECT_EQ(heard.name(), "asked");
  EXPECT_EQ(heard.reason(), "deploy 7 needs it");

  nlohmann::json request = Request("asked");
  ASSERT_TRUE(request.is_object()) << Item("asked").dump();
  EXPECT_EQ(S(request, "id").size(), 32u);
  EXPECT_EQ(S(request, "reason"), "deploy 7 needs it");
  EXPECT_EQ(N(request, "token"), dlock_lock_fencing_token(l));

  std::this_thread::sleep_for(std::chrono::milliseconds(3 * kHeartbeatMs));
  EXPECT_EQ(heard.calls.load(), 1) << "one request, heard at every renewal";
  EXPECT_EQ(dlock_lock_is_valid(l), 1) << "a request took the lock";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// Every shared holder is asked by the one write, and hears it.
TEST_F(DynamoReleaseRequestTest, EverySharedHolderHears) {
  Client a(url()), b(url()), asker(url());
  RequestsHeard heard_a, heard_b;
  Options oa, ob;
  Holder(oa, &heard_a);
  Holder(ob, &heard_b);
  oa.shared();
  ob.shared();
  dlock_lock *la = nullptr, *lb = nullptr;
  ASSERT_EQ(dlock_acquire(a.get(), "asked-shared", oa.get(), &la), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(b.get(), "asked-shared", ob.get(), &lb), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_request_release(asker.get(), "asked-shared", "readers out"), DLOCK_OK) << dlock_last_error();
  EXPECT_TRUE(WaitFor([&] { return heard_a.calls.load() > 0 && heard_b.calls.load() > 0; }, kHearWithin));
  EXPECT_EQ(heard_a.reason(), "readers out");
  EXPECT_EQ(heard_b.reason(), "readers out");
  EXPECT_EQ(dlock_release(la), DLOCK_OK);
  EXPECT_EQ(dlock_release(lb), DLOCK_OK);
}

// A free name has nobody to ask: DLOCK_NOT_HELD, and nothing is written (no item is made, and
// a released name's item gets no request).
TEST_F(DynamoReleaseRequestTest, AFreeNameIsNotHeld) {
  Client c(url());
  EXPECT_EQ(dlock_request_release(c.get(), "asked-never", "anyone?"), DLOCK_NOT_HELD);
  EXPECT_TRUE(Item("asked-never").is_null()) << Item("asked-never").dump();

  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "asked-released", nullptr, &l), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(l), DLOCK_OK);
  Client other(url());  // knows no fence: reads first
  EXPECT_EQ(dlock_request_release(other.get(), "asked-released", "anyone?"), DLOCK_NOT_HELD);
  EXPECT_EQ(dlock_request_release(c.get(), "asked-released", "anyone?"), DLOCK_NOT_HELD);
  EXPECT_TRUE(Item("asked-released").is_object());
  EXPECT_TRUE(Request("asked-released").is_null()) << Item("asked-released").dump();
}

// The request stays on the item, but it names the fence of its time: the name's next holder
// (a greater token) does not hear it, though its renewals read it; a request made to it, it
// hears.
TEST_F(DynamoReleaseRequestTest, ALaterHolderDoesNotHearAnEarlierRequest) {
  Client first(url()), second(url()), asker(url());
  Options plain;
  Holder(plain, nullptr);
  dlock_lock* earlier = nullptr;
  ASSERT_EQ(dlock_acquire(first.get(), "asked-later", plain.get(), &earlier), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_request_release(asker.get(), "asked-later", "for the first"), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_release(earlier), DLOCK_OK);

  RequestsHeard heard;
  Options o;
  Holder(o, &heard);
  dlock_lock* later = nullptr;
  ASSERT_EQ(dlock_acquire(second.get(), "asked-later", o.get(), &later), DLOCK_OK) << dlock_last_error();
  std::this_thread::sleep_for(std::chrono::milliseconds(4 * kHeartbeatMs));
  EXPECT_EQ(S(Request("asked-later"), "reason"), "for the first") << "the earlier request is still there";
  EXPECT_EQ(heard.calls.load(), 0) << "a later holder heard a request made to an earlier one";

  ASSERT_EQ(dlock_request_release(asker.get(), "asked-later", "for the second"), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return heard.calls.load() > 0; }, kHearWithin));
  EXPECT_EQ(heard.reason(), "for the second");
  EXPECT_EQ(dlock_release(later), DLOCK_OK);
}

// A holder that does not listen renews as before, past several leases, and releases: the
// request changes nothing for it.
TEST_F(DynamoReleaseRequestTest, AHolderWithoutAHandlerIsUnaffected) {
  Client holder(url()), asker(url());
  Options o;
  o.lease(1000).heartbeat(200);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "asked-deaf", o.get(), &l), DLOCK_OK) << dlock_last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  ASSERT_EQ(dlock_request_release(asker.get(), "asked-deaf", "please"), DLOCK_OK) << dlock_last_error();
  const std::string version = S(Item("asked-deaf"), "recordVersion");
  std::this_thread::sleep_for(2500ms);
  EXPECT_EQ(dlock_lock_is_valid(l), 1) << "a request cost the holder its lock";
  EXPECT_NE(S(Item("asked-deaf"), "recordVersion"), version) << "the renewals stopped";
  EXPECT_EQ(S(Item("asked-deaf"), "owner").empty(), false);
  EXPECT_EQ(N(Item("asked-deaf"), "fence"), token) << "a request is no acquisition";
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

// A reason of the most bytes a request takes (multi-byte UTF-8 included) arrives as sent; one
// byte more is refused before anything is written.
TEST_F(DynamoReleaseRequestTest, AReasonOf1024BytesArrivesIntact) {
  Client holder(url()), asker(url());
  std::string reason = "rollout 2024-11 of the schema: ";
  while (reason.size() + 2 <= 1024) reason += "\xc3\xa9";  // "é": two bytes each
  reason.resize(1024, '.');
  ASSERT_EQ(reason.size(), 1024u);
  RequestsHeard heard;
  Options o;
  Holder(o, &heard);
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "asked-long", o.get(), &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_request_release(asker.get(), "asked-long", (reason + "x").c_str()), DLOCK_EINVAL);
  EXPECT_TRUE(Request("asked-long").is_null()) << "a refused request was written";
  ASSERT_EQ(dlock_request_release(asker.get(), "asked-long", reason.c_str()), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return heard.calls.load() > 0; }, kHearWithin));
  EXPECT_EQ(heard.reason(), reason);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

}  // namespace
}  // namespace dlock_test
