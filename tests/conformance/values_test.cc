// Values stored with a hold (dlock_options_set_value, dlock_lock_set_value, dlock_info_value), on
// every backend: what everyone sees with dlock_inspect, written only by the hold's owner, kept
// through renewals and extends, gone with the hold, and carried by a fair hand-over.
#include <string>
#include <thread>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

class Values : public BackendTest {
 protected:
  // Replaces l's value; the status, with the message on failure.
  static dlock_status SetValue(dlock_lock* l, const std::string& v, std::string* error = nullptr) {
    dlock_status s = dlock_lock_set_value(l, v.data(), v.size());
    if (s != DLOCK_OK && error != nullptr) *error = dlock_last_error();
    return s;
  }
  // The one holder's value as dlock_inspect shows it ("(free)" when nobody holds the name).
  static std::string ShownValue(dlock_client* c, const std::string& name) {
    Snapshot snap = Inspect(c, name);
    if (snap.holders.size() != 1) return snap.holders.empty() ? "(free)" : "(several)";
    return snap.holders[0].value;
  }
};

// Every byte value, NUL and 0xff included: values are binary.
std::string EveryByte(size_t n) {
  std::string v(n, '\0');
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<char>((i * 7 + 3) % 256);
  return v;
}

TEST_P(Values, StoredWithTheHoldReplacedByItsOwnerAndGoneWithIt) {
  Client c(url()), other(url());
  const std::string name = Name("leader");
  const std::string first = std::string("10.0.0.7:8080\0and a NUL", 23);
  Options o;
  o.owner("node-7").value(first).lease(600);  // heartbeats every 200 ms keep it
  Hold h(c.get(), name, o.get());
  ASSERT_TRUE(h.held()) << h.error();

  Snapshot snap = Inspect(other.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << snap;
  EXPECT_EQ(snap.holders[0].value, first);
  EXPECT_EQ(snap.holders[0].owner, "node-7");
  EXPECT_EQ(snap.holders[0].token, Shown(h.token()));

  // Renewals keep it (on Redis the value key's expiry follows the hold's; on etcd the key moves
  // leases with its value): after several leases it is still there.
  std::this_thread::sleep_for(1400ms);
  ASSERT_EQ(dlock_lock_is_valid(h.get()), 1);
  EXPECT_EQ(ShownValue(other.get(), name), first) << "the value did not outlive the first lease";

  const std::string second = EveryByte(300);
  std::string error;
  ASSERT_EQ(SetValue(h.get(), second, &error), DLOCK_OK) << error;
  EXPECT_EQ(ShownValue(other.get(), name), second);
  EXPECT_EQ(dlock_lock_fencing_token(h.get()), h.token()) << "a value is no new acquisition";

  // An extend keeps it too, and the new value is what it keeps.
  ASSERT_EQ(dlock_extend(h.get(), 5000), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(ShownValue(other.get(), name), second);

  ASSERT_EQ(SetValue(h.get(), "", &error), DLOCK_OK) << error;  // removed
  snap = Inspect(other.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << "removing the value removed the hold: " << snap;
  EXPECT_EQ(snap.holders[0].value, "");
  ASSERT_EQ(SetValue(h.get(), "back", &error), DLOCK_OK) << error;
  EXPECT_EQ(ShownValue(other.get(), name), "back");

  ASSERT_EQ(h.Release(), DLOCK_OK) << h.error();
  EXPECT_TRUE(Inspect(other.get(), name).free());
  // The next holder, with no value of its own, shows none: nothing of the last one is left.
  Hold next(other.get(), name, nullptr);
  ASSERT_TRUE(next.held()) << next.error();
  EXPECT_EQ(ShownValue(c.get(), name), "");
}

TEST_P(Values, ADeposedHolderCannotWriteItsValue) {
  Client c(url()), other(url());
  const std::string name = Name("deposed");
  Options mine;
  mine.value("old leader").heartbeat(0);
  Hold a(c.get(), name, mine.get());
  ASSERT_TRUE(a.held()) << a.error();

  // Deleted behind its back (as expiry or an operator would), then taken by another.
  ASSERT_TRUE(server().DeleteLock(name));
  Options theirs;
  theirs.value("new leader").wait(10000);
  Hold b(other.get(), name, theirs.get());
  ASSERT_TRUE(b.held()) << b.error();
  EXPECT_GT(b.token(), a.token());

  std::string error;
  EXPECT_EQ(SetValue(a.get(), "I am still the leader", &error), DLOCK_NOT_HELD);
  EXPECT_NE(error.find(name), std::string::npos) << error;
  EXPECT_EQ(dlock_lock_is_valid(a.get()), 0) << "told NOT_HELD, it still thinks it holds the lock";
  Snapshot snap = Inspect(other.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << snap;
  EXPECT_EQ(snap.holders[0].value, "new leader") << "the deposed holder's write landed";
  EXPECT_EQ(snap.holders[0].token, Shown(b.token()));
  EXPECT_EQ(a.Release(), DLOCK_NOT_HELD);
  EXPECT_EQ(ShownValue(other.get(), name), "new leader") << "the deposed holder's release took it";
}

TEST_P(Values, EveryHoldOfAKindKeepsItsOwn) {
  Client c(url()), look(url());
  const uint32_t caps = dlock_client_capabilities(c.get());
  if ((caps & (DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS)) == 0) GTEST_SKIP() << "exclusive holds only";
  for (const bool semaphore : {false, true}) {
    if ((caps & (semaphore ? DLOCK_CAP_PERMITS : DLOCK_CAP_SHARED)) == 0) continue;
    SCOPED_TRACE(semaphore ? "semaphore" : "shared");
    const std::string name = Name(semaphore ? "pool" : "doc");
    Options o1, o2, o3;
    for (Options* o : {&o1, &o2, &o3}) {
      if (semaphore) {
        o->permits(3);
      } else {
        o->shared();
      }
    }
    o1.value("one");
    o2.value(EveryByte(DLOCK_MAX_VALUE_BYTES));
    Hold h1(c.get(), name, o1.get()), h2(c.get(), name, o2.get()), h3(c.get(), name, o3.get());
    ASSERT_TRUE(h1.held() && h2.held() && h3.held()) << h1.error() << h2.error() << h3.error();

    auto value_of = [&](const Snapshot& snap, uint64_t token) -> std::string {
      for (const Holder& holder : snap.holders) {
        if (holder.token == token) return holder.value;
      }
      return "(not listed)";
    };
    Snapshot snap = Inspect(look.get(), name);
    ASSERT_EQ(snap.holders.size(), 3u) << snap;
    EXPECT_EQ(value_of(snap, h1.token()), "one");
    EXPECT_EQ(value_of(snap, h2.token()), EveryByte(DLOCK_MAX_VALUE_BYTES));
    EXPECT_EQ(value_of(snap, h3.token()), "");

    std::string error;
    ASSERT_EQ(SetValue(h3.get(), "three", &error), DLOCK_OK) << error;
    ASSERT_EQ(SetValue(h1.get(), "one again", &error), DLOCK_OK) << error;
    ASSERT_EQ(h2.Release(), DLOCK_OK) << h2.error();
    snap = Inspect(look.get(), name);
    ASSERT_EQ(snap.holders.size(), 2u) << snap;
    EXPECT_EQ(value_of(snap, h1.token()), "one again");
    EXPECT_EQ(value_of(snap, h3.token()), "three");
  }
}

TEST_P(Values, TheLimitAndBadArgumentsAreRefusedAndChangeNothing) {
  Client c(url());
  const std::string name = Name("limits");
  EXPECT_EQ(dlock_limit_value(DLOCK_LIMIT_VALUE_BYTES), uint64_t{DLOCK_MAX_VALUE_BYTES});
  Options o;
  const std::string too_long(DLOCK_MAX_VALUE_BYTES + 1, 'x');
  EXPECT_EQ(dlock_options_set_value(o.mutable_get(), too_long.data(), too_long.size()), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("4096"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(dlock_options_set_value(o.mutable_get(), nullptr, 5), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_value(nullptr, "x", 1), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_value(o.mutable_get(), nullptr, 0), DLOCK_OK);  // none

  o.value("kept");
  Hold h(c.get(), name, o.get());
  ASSERT_TRUE(h.held()) << h.error();
  std::string error;
  EXPECT_EQ(SetValue(h.get(), too_long, &error), DLOCK_EINVAL);
  EXPECT_NE(error.find("4096"), std::string::npos) << error;
  EXPECT_EQ(dlock_lock_set_value(h.get(), nullptr, 3), DLOCK_EINVAL);
  EXPECT_EQ(dlock_lock_set_value(nullptr, "x", 1), DLOCK_EINVAL);
  EXPECT_EQ(ShownValue(c.get(), name), "kept") << "a refused call changed the value";

  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(c.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  size_t len = 99;
  const void* v = dlock_info_value(info, 0, &len);
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(len, 4u);
  EXPECT_STREQ(static_cast<const char*>(v), "kept") << "a value reads as a C string too";
  EXPECT_EQ(dlock_info_value(info, 1, &len), nullptr);
  EXPECT_EQ(len, 0u);
  EXPECT_NE(dlock_info_value(info, 0, nullptr), nullptr);
  dlock_info_free(info);
  EXPECT_EQ(dlock_info_value(nullptr, 0, &len), nullptr);
}

// Backends with DLOCK_CAP_FAIR: a release hands the lock to the first waiter in line, and the
// value stored with it is the waiter's own, not the last holder's.
TEST_P(Values, AFairHandOverCarriesTheWaitersOwnValue) {
  Client holder(url()), waiter(url()), look(url());
  if ((dlock_client_capabilities(holder.get()) & DLOCK_CAP_FAIR) == 0) {
    GTEST_SKIP() << "this backend does not hand its locks over";
  }
  const std::string name = Name("handover");
  Options first;
  first.value("first");
  Hold a(holder.get(), name, first.get());
  ASSERT_TRUE(a.held()) << a.error();
  Hold b;
  std::thread t([&] {
    Options second;
    second.value("second").wait(30000).retry(20000, 30000);  // served by the hand-over, not a retry
    b = Hold(waiter.get(), name, second.get());
  });
  const bool queued = WaitFor([&] { return server().InLine(name) == 1; }, 20000ms);
  EXPECT_TRUE(queued) << "the waiter never took its place in line";
  EXPECT_EQ(a.Release(), DLOCK_OK) << a.error();
  t.join();
  ASSERT_TRUE(b.held()) << b.error();
  Snapshot snap = Inspect(look.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << snap;
  EXPECT_EQ(snap.holders[0].token, Shown(b.token()));
  EXPECT_EQ(snap.holders[0].value, "second");
  // And it is that holder's to replace.
  std::string error;
  EXPECT_EQ(SetValue(b.get(), "second, later", &error), DLOCK_OK) << error;
  EXPECT_EQ(ShownValue(look.get(), name), "second, later");
}

INSTANTIATE_TEST_SUITE_P(Conformance, Values, ::testing::ValuesIn(AllBackends()), BackendTestName);

// dlock_lock_set_value in every style: blocking, _async, _queued, and on the hooks loop.
class StyledValues : public StyleTest {};

TEST_P(StyledValues, ReplacedByItsHolderAndRefusedOnceDeposed) {
  auto c = Open();
  Client look(url());
  const std::string name = Name("styled");
  Options o;
  o.value("first").heartbeat(0);
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_OK) << c->last_error();
  ASSERT_EQ(c->SetValue(l, "second"), DLOCK_OK) << c->last_error();
  Snapshot snap = Inspect(look.get(), name);
  ASSERT_EQ(snap.holders.size(), 1u) << snap;
  EXPECT_EQ(snap.holders[0].value, "second");
  EXPECT_EQ(c->SetValue(l, std::string(DLOCK_MAX_VALUE_BYTES + 1, 'x')), DLOCK_EINVAL);
  ASSERT_TRUE(server().DeleteLock(name));
  EXPECT_EQ(c->SetValue(l, "third"), DLOCK_NOT_HELD);
  EXPECT_NE(c->last_error().find(name), std::string::npos) << c->last_error();
  EXPECT_TRUE(Inspect(look.get(), name).free()) << "a deposed holder's value was written";
  EXPECT_EQ(c->Release(l), DLOCK_NOT_HELD);
}

INSTANTIATE_TEST_SUITE_P(Conformance, StyledValues,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

}  // namespace
}  // namespace dlock_test
