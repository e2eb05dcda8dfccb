// Bad input gets DLOCK_EINVAL and changes nothing, in every style; what dlock_inspect and
// dlock_client_capabilities report.
#include "conformance/conformance.h"

namespace dlock_test {
namespace {

class BadInput : public StyleTest {};

TEST_P(BadInput, IsRefusedAndChangesNothing) {
  auto c = Open();
  Client other(url());
  const uint32_t caps = dlock_client_capabilities(c->get());
  dlock_lock* l = nullptr;
  // Names: NULL, empty, one byte over the limit.
  std::string too_long = Name("long-");
  too_long.resize(DLOCK_MAX_NAME_BYTES + 1, 'x');
  EXPECT_EQ(c->Acquire(nullptr, nullptr, &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("name"), std::string::npos) << c->last_error();
  EXPECT_EQ(c->Acquire("", nullptr, &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("empty"), std::string::npos) << c->last_error();
  EXPECT_EQ(c->Acquire(too_long.c_str(), nullptr, &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("1024"), std::string::npos) << c->last_error();

  // Options the acquire refuses: a heartbeat not shorter than the lease, a kind of hold the
  // backend does not offer. (A lease under the 10 ms minimum is refused by its setter.)
  const std::string name = Name("refused");
  Options slow_heartbeat, tiny_lease, shared, semaphore;
  slow_heartbeat.lease(1000).heartbeat(1000);
  EXPECT_EQ(dlock_options_set_lease_ms(tiny_lease.mutable_get(), 5), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("lease_ms"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(c->Acquire(name.c_str(), slow_heartbeat.get(), &l), DLOCK_EINVAL);
  EXPECT_NE(c->last_error().find("heartbeat_ms"), std::string::npos) << c->last_error();
  EXPECT_EQ(c->Acquire(name.c_str(), tiny_lease.get(), &l), DLOCK_OK) << "the default lease";
  EXPECT_EQ(c->Release(l), DLOCK_OK);
  l = nullptr;
  ASSERT_EQ(dlock_options_set_kind(shared.mutable_get(), DLOCK_SHARED), DLOCK_OK);
  ASSERT_EQ(dlock_options_set_permits(semaphore.mutable_get(), 2), DLOCK_OK);
  if ((caps & DLOCK_CAP_SHARED) == 0) {
    EXPECT_EQ(c->Acquire(name.c_str(), shared.get(), &l), DLOCK_EINVAL);
  }
  if ((caps & DLOCK_CAP_PERMITS) == 0) {
    EXPECT_EQ(c->Acquire(name.c_str(), semaphore.get(), &l), DLOCK_EINVAL);
  }
  EXPECT_EQ(l, nullptr);
  EXPECT_TRUE(Inspect(other.get(), name).free()) << "a refused acquire left a lock behind";

  // The longest name is fine; refused extends leave its lock held.
  std::string longest = too_long.substr(0, DLOCK_MAX_NAME_BYTES);
  ASSERT_EQ(c->Acquire(longest.c_str(), nullptr, &l), DLOCK_OK) << c->last_error();
  const uint64_t token = dlock_lock_fencing_token(l);
  EXPECT_EQ(c->Extend(l, 5), DLOCK_EINVAL);
  EXPECT_EQ(c->Extend(l, UINT64_MAX), DLOCK_EINVAL);
  EXPECT_EQ(dlock_lock_is_valid(l), 1);
  Snapshot s = Inspect(other.get(), longest);
  ASSERT_EQ(s.holders.size(), 1u) << s;
  EXPECT_EQ(s.holders[0].token, Shown(token));
  EXPECT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  EXPECT_TRUE(Inspect(other.get(), longest).free());

  EXPECT_EQ(c->Extend(nullptr, 1000), DLOCK_EINVAL);
  EXPECT_EQ(c->Release(nullptr), DLOCK_EINVAL);
}

INSTANTIATE_TEST_SUITE_P(Conformance, BadInput,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

class Introspection : public BackendTest {};

TEST_P(Introspection, CapabilitiesAreWhatTheBackendPromises) {
  // What they promise is checked by behaviour: notifications in Waiting (a waiter woken long
  // before its retry), kinds in BadInput (refused unless offered), fencing in Fencing.
  Client client(url());
  EXPECT_EQ(dlock_client_capabilities(client.get()), backend().capabilities);
  EXPECT_EQ(dlock_client_capabilities(nullptr), 0u);
  // Preparing a backend that is ready already is fine, and changes nothing.
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), Name("held").c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_backend_prepare(url().c_str(), 5000), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(Inspect(client.get(), Name("held")).holders.size(), 1u);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

TEST_P(Introspection, InspectOfAFreeNameAnUnlabelledHolderAndBadArguments) {
  Client client(url());
  const std::string name = Name("x");
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(client.get(), name.c_str(), &info), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_info_holders(info), 0u);  // never used: free
  EXPECT_EQ(dlock_info_kind(info), DLOCK_EXCLUSIVE);
  EXPECT_EQ(dlock_info_owner(info, 0), nullptr);  // out of range
  EXPECT_EQ(dlock_info_remaining_ms(info, 0), -1);
  EXPECT_EQ(dlock_info_fencing_token(info, 0), 0u);
  dlock_info_free(info);

  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(client.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  Snapshot s = Inspect(client.get(), name);  // the holder's own client may ask too
  ASSERT_EQ(s.holders.size(), 1u) << s;
  EXPECT_EQ(s.holders[0].owner, "") << "no label was set";
  EXPECT_EQ(s.holders[0].token, Shown(dlock_lock_fencing_token(l)));

  info = nullptr;
  std::string too_long(DLOCK_MAX_NAME_BYTES + 1, 'x');
  EXPECT_EQ(dlock_inspect(nullptr, name.c_str(), &info), DLOCK_EINVAL);
  EXPECT_EQ(dlock_inspect(client.get(), nullptr, &info), DLOCK_EINVAL);
  EXPECT_EQ(dlock_inspect(client.get(), "", &info), DLOCK_EINVAL);
  EXPECT_EQ(dlock_inspect(client.get(), too_long.c_str(), &info), DLOCK_EINVAL);
  EXPECT_EQ(dlock_inspect(client.get(), name.c_str(), nullptr), DLOCK_EINVAL);
  EXPECT_EQ(info, nullptr) << "outputs are written only on success";
  EXPECT_EQ(dlock_info_holders(nullptr), 0u);
  EXPECT_EQ(dlock_info_owner(nullptr, 0), nullptr);
  dlock_info_free(nullptr);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

INSTANTIATE_TEST_SUITE_P(Conformance, Introspection, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
