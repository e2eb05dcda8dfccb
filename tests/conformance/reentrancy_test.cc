// Reentrancy by a context the caller chooses (issue 38, dlock_options_set_reentrant), on every
// backend and in every style: the same client and context re-enter their hold without an
// acquisition, only the last release frees the name, and everyone else contends as before.
#include <thread>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

class Reentrancy : public StyleTest {};
class ReentrancyOnce : public BackendTest {};

// A re-entry returns a handle of its own on the hold, with the hold's token; the name stays
// held until the last handle is released, and is free right after it.
TEST_P(Reentrancy, TheSameContextReentersAndOnlyTheLastReleaseFrees) {
  auto c = Open();
  Client other(url());
  const std::string name = Name("reentrant");
  Options o;
  o.lease(5000);
  ASSERT_EQ(dlock_options_set_reentrant(o.mutable_get(), "request-7f3a"), DLOCK_OK);
  dlock_lock* outer = nullptr;
  dlock_lock* inner = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &outer), DLOCK_OK) << c->last_error();
  ASSERT_EQ(c->Acquire(name.c_str(), o.get(), &inner), DLOCK_OK) << c->last_error();
  ASSERT_NE(inner, outer) << "a re-entry gets a handle of its own";
  EXPECT_EQ(dlock_lock_fencing_token(inner), dlock_lock_fencing_token(outer)) << "a re-entry issued a token";
  EXPECT_EQ(dlock_lock_is_valid(inner), 1);
  EXPECT_EQ(Inspect(other.get(), name).holders.size(), 1u);

  ASSERT_EQ(c->Extend(inner, 6000), DLOCK_OK) << c->last_error();  // extends the hold
  EXPECT_GT(dlock_lock_remaining_ms(outer), 5000);
  ASSERT_EQ(c->Release(inner), DLOCK_OK) << c->last_error();
  EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_NOT_ACQUIRED) << "the first release freed the name";
  EXPECT_EQ(dlock_lock_is_valid(outer), 1);
  ASSERT_EQ(c->Release(outer), DLOCK_OK) << c->last_error();
  EXPECT_EQ(TryToTake(other.get(), name).status, DLOCK_OK) << "the last release did not free the name";
}

// Without a context, or with another one, the same client contends as anyone does.
TEST_P(ReentrancyOnce, AnotherContextOrNoneContends) {
  Client c(url());
  const std::string name = Name("reentrant-other");
  Options mine, theirs, none;
  mine.lease(5000);
  theirs.lease(5000);
  none.lease(5000);
  ASSERT_EQ(dlock_options_set_reentrant(mine.mutable_get(), "task-1"), DLOCK_OK);
  ASSERT_EQ(dlock_options_set_reentrant(theirs.mutable_get(), "task-2"), DLOCK_OK);
  Hold held(c.get(), name, mine.get());
  ASSERT_TRUE(held.held()) << held.error();
  dlock_lock* l = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), theirs.get(), &l), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), none.get(), &l), DLOCK_NOT_ACQUIRED);
  EXPECT_NE(std::string(dlock_last_error()).find("held by this client"), std::string::npos) << dlock_last_error();
  // A context set and then turned off (NULL) is no context.
  ASSERT_EQ(dlock_options_set_reentrant(mine.mutable_get(), nullptr), DLOCK_OK);
  EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), mine.get(), &l), DLOCK_NOT_ACQUIRED);
  EXPECT_EQ(held.Release(), DLOCK_OK);
}

// A re-entry of a hold past its local deadline is NOT_HELD; one that asks another kind is
// EINVAL; bad contexts are EINVAL.
TEST_P(ReentrancyOnce, ALostHoldAnotherKindAndBadContexts) {
  Client c(url());
  const std::string name = Name("reentrant-lost");
  Options o;
  o.lease(300).heartbeat(0);
  ASSERT_EQ(dlock_options_set_reentrant(o.mutable_get(), "job-9"), DLOCK_OK);
  dlock_lock* first = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), o.get(), &first), DLOCK_OK) << dlock_last_error();
  ASSERT_TRUE(WaitFor([&] { return dlock_lock_is_valid(first) == 0; }, std::chrono::milliseconds(3000)));
  dlock_lock* again = nullptr;
  EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), o.get(), &again), DLOCK_NOT_HELD);
  EXPECT_NE(std::string(dlock_last_error()).find("job-9"), std::string::npos) << dlock_last_error();
  const dlock_status released = dlock_release(first);  // the server may or may not have it still
  EXPECT_TRUE(released == DLOCK_OK || released == DLOCK_NOT_HELD) << dlock_status_str(released);

  if ((dlock_client_capabilities(c.get()) & DLOCK_CAP_SHARED) != 0) {
    Options shared;
    shared.lease(5000).shared();
    ASSERT_EQ(dlock_options_set_reentrant(shared.mutable_get(), "job-9"), DLOCK_OK);
    Hold reader(c.get(), Name("reentrant-kind"), shared.get());
    ASSERT_TRUE(reader.held()) << reader.error();
    Options exclusive;
    exclusive.lease(5000);
    ASSERT_EQ(dlock_options_set_reentrant(exclusive.mutable_get(), "job-9"), DLOCK_OK);
    dlock_lock* l = nullptr;
    std::string kind_name = dlock_lock_name(reader.get());
    EXPECT_EQ(dlock_acquire(c.get(), kind_name.c_str(), exclusive.get(), &l), DLOCK_EINVAL);
    EXPECT_NE(std::string(dlock_last_error()).find("shared"), std::string::npos) << dlock_last_error();
    EXPECT_EQ(reader.Release(), DLOCK_OK);
  }

  EXPECT_EQ(dlock_options_set_reentrant(o.mutable_get(), ""), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_reentrant(o.mutable_get(), std::string(257, 'c').c_str()), DLOCK_EINVAL);
  EXPECT_EQ(dlock_options_set_reentrant(o.mutable_get(), std::string(256, 'c').c_str()), DLOCK_OK);
  EXPECT_EQ(dlock_options_set_reentrant(nullptr, "x"), DLOCK_EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Reentrancy,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);
INSTANTIATE_TEST_SUITE_P(Conformance, ReentrancyOnce, ::testing::ValuesIn(AllBackends()),
                         BackendTestName);

}  // namespace
}  // namespace dlock_test
