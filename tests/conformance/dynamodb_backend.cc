// dynamodb://: a dynalite (the npm local DynamoDB), its table made through dlock_backend_prepare
// as a user would.
#include <dlock/dlock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "conformance/backend.h"
#include "support/dynalite_server.h"
#include "support/unread_bytes.h"

namespace dlock_test {
namespace {

// Dummy credentials and no probing of AWS: set before main, so before any thread reads them.
const bool kCredentialsSet = (UseTestCredentials(), true);

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

class DynamoDbServer : public BackendServer {
 public:
  DynamoDbServer() {
    if (ddb_.running()) Prepare();
  }
  bool running() const override { return ddb_.running(); }
  std::string url() const override { return ddb_.url(kTable); }
  std::string UnpreparedUrl() override { return ddb_.url("unprepared_" + std::to_string(++unprepared_)); }
  std::string address() const override { return ddb_.endpoint(); }
  bool DeleteLock(const std::string& name) override {
    RawResponse r = ddb_.Call("DeleteItem", R"({"TableName":")" + std::string(kTable) +
                                                R"(","Key":{"id":{"S":)" + JsonString("dlock:" + name) +
                                                R"(}},"ReturnValues":"ALL_OLD"})");
    return r.status == 200 && r.body.find("\"Attributes\"") != std::string::npos;
  }
  void Kill() override { ddb_.Kill(); }
  bool Restart() override { return ddb_.Restart() && Prepare(); }
  // SIGSTOP: what arrives afterwards waits unread.
  bool HoldAnswers() override {
    if (ddb_.pid() <= 0 || kill(ddb_.pid(), SIGSTOP) != 0) return false;
    const bool stopped = WaitStopped(ddb_.pid());
    unread_at_hold_ = UnreadBytesOnPorts({ddb_.port()});
    return stopped;
  }
  bool RequestHeld() override { return UnreadBytesOnPorts({ddb_.port()}) > unread_at_hold_; }
  void ReleaseAnswers() override {
    if (ddb_.pid() > 0) kill(ddb_.pid(), SIGCONT);
  }

 private:
  static constexpr const char* kTable = "conformance_locks";
  int unprepared_ = 0;
  int64_t unread_at_hold_ = 0;

  bool Prepare() {
    dlock_status s = dlock_backend_prepare(url().c_str(), 10000);
    EXPECT_EQ(s, DLOCK_OK) << "dlock_backend_prepare(" << url() << "): " << dlock_last_error();
    return s == DLOCK_OK;
  }

  DynaliteServer ddb_;
};

}  // namespace

BackendFactory DynamoDbBackend() {
  (void)kCredentialsSet;
  return {"dynamodb", DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS | DLOCK_CAP_BREAK | DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST,
          [] { return std::make_unique<DynamoDbServer>(); }};
}

}  // namespace dlock_test
