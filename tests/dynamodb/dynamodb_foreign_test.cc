// Other DynamoDB lock clients on dlock's table: dlock never holds beside their items, nor takes
// them over, nor writes into them. AWS's Java lock client's items are written here as it writes
// them; npm dynamodb-lock-client (bench/dynamodb's) runs for real (docs/dynamodb.md, "Other lock
// clients").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "ddb_test_util.h"
#include "support/child_process.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

class DynamoForeignTest : public DynamoTest {
 protected:
  void Put(const std::string& item_json) {
    RawResponse r = ddb_.Call("PutItem", R"({"TableName":"locks","Item":)" + item_json + "}");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  void Delete(const std::string& name) {
    RawResponse r = ddb_.Call("DeleteItem", R"({"TableName":"locks","Key":{"id":{"S":"dlock:)" + name + R"("}}})");
    ASSERT_EQ(r.status, 200) << r.body;
  }
  // Every acquire dlock makes of `name` is refused, naming the client, and writes nothing.
  void ExpectRefused(const std::string& name, const std::string& client) {
    const nlohmann::json before = Item(name);
    Client c(url());
    Options shared, waiting;
    shared.shared();
    waiting.wait(300).retry(20, 50);  // announces itself as a waiting writer: refused too
    for (const dlock_options* o : {static_cast<const dlock_options*>(nullptr), shared.get(), waiting.get()}) {
      dlock_lock* l = nullptr;
      EXPECT_EQ(dlock_acquire(c.get(), name.c_str(), o, &l), DLOCK_NOT_ACQUIRED)
          << "dlock took another client's item: " << Item(name);
      const std::string message = dlock_last_error();
      EXPECT_NE(message.find("another lock client (" + client), std::string::npos) << message;
    }
    EXPECT_EQ(Item(name), before) << "dlock wrote into another client's item";
  }
};

std::string JavaItem(const std::string& name, const std::vector<std::string>& markers) {
  std::string item = R"({"id":{"S":"dlock:)" + name + R"("})";
  for (const std::string& m : markers) {
    if (m == "ownerName") item += R"(,"ownerName":{"S":"java-host-1"})";
    if (m == "recordVersionNumber") item += R"(,"recordVersionNumber":{"S":"6c3f1d9e-8a7b-4c2d-9e1f-0a1b2c3d4e5f"})";
    if (m == "leaseDuration") item += R"(,"leaseDuration":{"N":"20000"})";
  }
  return item + "}";
}

// An item as AWS's Java lock client writes it: refused, shown by inspect, not broken; once it
// is gone, dlock takes the name. Each marker alone marks the item.
TEST_F(DynamoForeignTest, AJavaLockClientItemIsRefusedAndLeftAsItWas) {
  Put(JavaItem("j", {"ownerName", "recordVersionNumber", "leaseDuration"}));
  ExpectRefused("j", "AWS Java lock client item, owner 'java-host-1'");
  Client c(url());
  dlock_info* info = nullptr;
  ASSERT_EQ(dlock_inspect(c.get(), "j", &info), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_info_holders(info), 1u);
  EXPECT_STREQ(dlock_info_owner(info, 0), "java-host-1 [AWS Java lock client]");
  dlock_info_free(info);
  EXPECT_EQ(dlock_break(c.get(), "j", "stuck"), DLOCK_EBACKEND);
  EXPECT_NE(std::string(dlock_last_error()).find("does not break it"), std::string::npos) << dlock_last_error();
  EXPECT_EQ(Item("j"), nlohmann::json::parse(JavaItem("j", {"ownerName", "recordVersionNumber", "leaseDuration"})));

  for (const char* marker : {"ownerName", "recordVersionNumber", "leaseDuration"}) {
    Put(JavaItem(marker, {marker}));
    ExpectRefused(marker, "AWS Java lock client item");
  }
  Delete("j");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), "j", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

// npm dynamodb-lock-client, FailClosed and FailOpen, on dlock's table and name: while it holds,
// dlock is refused and writes nothing. What follows its release depends on its mode (below).
// dlock's own item stays after a release (its fencing counter must), so that client is refused
// a name dlock has used.
class DynamoLockClientTest : public DynamoForeignTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(DynamoLockClientTest, NeverHoldsBesideDlock) {
  const std::string modules = std::string(DLOCK_SOURCE_DIR) + "/bench/dynamodb/node_modules";
  ASSERT_TRUE(fs::exists(modules + "/dynamodb-lock-client"))
      << "no dynamodb-lock-client in " << modules << ": run scripts/setup (npm ci in bench/dynamodb)";
  const std::string peer_js = std::string(DLOCK_SOURCE_DIR) + "/tests/interop/ddb_lock_client_peer.js";
  const std::string name = GetParam();
  const fs::path release = fs::temp_directory_path() / ("dlock-ddb-peer-" + std::to_string(getpid()) + "-" + name);
  fs::remove(release);
  auto peer = [&] {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{FindOnPath("node", "DLOCK_NODE"), peer_js, ddb_.endpoint(), "locks", "dlock:" + name, name,
                                 release.string()},
        ChildOptions::Env({"NODE_PATH=" + modules, "AWS_SDK_JS_SUPPRESS_MAINTENANCE_MODE_MESSAGE=1"}));
  };
  auto holder = peer();
  ASSERT_TRUE(holder->started()) << holder->error();
  ASSERT_EQ(holder->AwaitLine("RESULT ", 30s), "RESULT HELD") << holder->output();
  ExpectRefused(name, "dynamodb-lock-client item, owner 'node-peer'");

  std::ofstream(release) << "go";
  EXPECT_EQ(holder->Wait(30s), 0) << holder->output();
  EXPECT_NE(holder->output().find("RELEASED"), std::string::npos) << holder->output();
  fs::remove(release);
  if (name == "failopen") {
    // A FailOpen release leaves its item (with a lease of 1 ms: it keeps its fencing token), so
    // the name stays that client's: dlock is still refused, and the client takes it again.
    ExpectRefused(name, "dynamodb-lock-client item");
    auto again = peer();
    ASSERT_EQ(again->AwaitLine("RESULT ", 30s), "RESULT HELD") << again->output();
    std::ofstream(release) << "go";
    EXPECT_EQ(again->Wait(30s), 0) << again->output();
    fs::remove(release);
    return;
  }
  // A FailClosed release deletes its item: dlock takes the name, and then that client is
  // refused.
  Client c(url());
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_acquire(c.get(), name.c_str(), nullptr, &l), DLOCK_OK) << dlock_last_error();
  auto refused = peer();
  EXPECT_EQ(refused->AwaitLine("RESULT ", 30s).rfind("RESULT REFUSED", 0), 0u)
      << "it held beside dlock: " << refused->output();
  EXPECT_EQ(refused->Wait(30s), 0) << refused->output();
  EXPECT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
}

INSTANTIATE_TEST_SUITE_P(Modes, DynamoLockClientTest, ::testing::Values("failclosed", "failopen"));

}  // namespace
}  // namespace dlock_test
