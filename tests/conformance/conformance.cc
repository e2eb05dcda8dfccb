#include "conformance/conformance.h"

#include <map>
#include <memory>

namespace dlock_test {
namespace {

// The suite's servers, one per backend, stopped (by pid) when the test program ends. ctest
// runs each test in a process of its own, so there a server serves one test.
class SharedServers : public ::testing::Environment {
 public:
  static SharedServers* instance() {
    static SharedServers* servers = [] {
      auto* s = new SharedServers;
      ::testing::AddGlobalTestEnvironment(s);  // owned by gtest from here
      return s;
    }();
    return servers;
  }
  BackendServer& For(const BackendFactory& backend) {
    std::unique_ptr<BackendServer>& server = servers_[backend.name];
    if (!server || !server->running()) server = backend.start();
    return *server;
  }
  void TearDown() override { servers_.clear(); }

 private:
  std::map<std::string, std::unique_ptr<BackendServer>> servers_;
};

// Registered before main: gtest runs an environment's TearDown only if it was added before
// RUN_ALL_TESTS.
const bool kRegistered = SharedServers::instance() != nullptr;

}  // namespace

BackendServer& SharedServer(const BackendFactory& backend) {
  (void)kRegistered;
  return SharedServers::instance()->For(backend);
}

std::string UniqueName(const std::string& what) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(test ? test->test_suite_name() : "") + "." + (test ? test->name() : "") +
         "/" + what;
}

Snapshot Inspect(dlock_client* c, const std::string& name) {
  Snapshot snap;
  dlock_info* info = nullptr;
  snap.status = dlock_inspect(c, name.c_str(), &info);
  if (snap.status != DLOCK_OK) {
    ADD_FAILURE() << "dlock_inspect(" << name << "): " << dlock_status_str(snap.status) << ": "
                  << dlock_last_error();
    return snap;
  }
  snap.kind = dlock_info_kind(info);
  snap.permits = dlock_info_permits(info);
  for (uint32_t k = 0; k < dlock_info_holders(info); ++k) {
    const char* owner = dlock_info_owner(info, k);
    size_t len = 0;
    const void* value = dlock_info_value(info, k, &len);
    snap.holders.push_back({owner ? owner : "(null)", dlock_info_remaining_ms(info, k),
                            dlock_info_fencing_token(info, k),
                            value ? std::string(static_cast<const char*>(value), len) : "(null)",
                            dlock_info_take(info, k)});
  }
  dlock_info_free(info);
  return snap;
}

std::ostream& operator<<(std::ostream& os, const Snapshot& s) {
  os << dlock_status_str(s.status) << ", " << (s.kind == DLOCK_SHARED ? "shared, " : "")
     << (s.permits ? "semaphore of " + std::to_string(s.permits) + ", " : std::string())
     << s.holders.size() << " holder(s)";
  for (const Holder& h : s.holders) {
    os << " {owner '" << h.owner << "', " << h.remaining_ms << " ms left, token " << h.token;
    if (!h.value.empty()) os << ", value of " << h.value.size() << " bytes";
    os << "}";
  }
  return os;
}

Attempt TryToTake(dlock_client* c, const std::string& name, int64_t wait_ms) {
  Options opts;
  opts.wait(wait_ms);
  Attempt a;
  dlock_lock* l = nullptr;
  a.status = dlock_acquire(c, name.c_str(), opts.get(), &l);
  if (a.status != DLOCK_OK) {
    a.error = dlock_last_error();
    return a;
  }
  a.token = dlock_lock_fencing_token(l);
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  return a;
}

HeldElsewhere::HeldElsewhere(const std::string& url, const std::string& name)
    : client_(url), name_(name) {
  Options o;
  o.owner("held-elsewhere");  // what shows it, where inspect cannot show its token
  EXPECT_EQ(dlock_acquire(client_.get(), name.c_str(), o.get(), &lock_), DLOCK_OK) << dlock_last_error();
  token_ = dlock_lock_fencing_token(lock_);
}

void HeldElsewhere::Release() {
  if (lock_ == nullptr) return;
  EXPECT_EQ(dlock_release(lock_), DLOCK_OK) << dlock_last_error();
  lock_ = nullptr;
}

bool HeldElsewhere::Undisturbed() const {
  Snapshot s = Inspect(client_.get(), name_);
  // A token of 0 is one the backend cannot show (etcd's layout=mutex): then its owner label.
  return lock_ != nullptr && dlock_lock_is_valid(lock_) == 1 && s.holders.size() == 1 &&
         (s.holders[0].token == token_ || (s.holders[0].token == 0 && s.holders[0].owner == "held-elsewhere"));
}

std::string BackendTestName(const ::testing::TestParamInfo<BackendFactory>& info) {
  return info.param.name;
}

std::string StyleTestName(const ::testing::TestParamInfo<std::tuple<BackendFactory, Style>>& info) {
  return std::get<0>(info.param).name + "_" + StyleName(std::get<1>(info.param));
}

}  // namespace dlock_test
