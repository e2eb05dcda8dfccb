// What only the DynamoDB backend does, against a real dynalite: the item each lock is (kept on
// release, with its fence), sort keys, prefixes, table creation, its URLs and names. (Acquire,
// release, extend and tokens on every backend are in conformance/.)
#include <chrono>

#include "ddb_test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

class DynamoBasicTest : public DynamoTest {};

TEST_F(DynamoBasicTest, AcquireReleaseKeepsTheItemAndItsFence) {
  Client client(url());
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "job", nullptr, &l), DLOCK_OK) << dlock_last_error();
  uint64_t first = dlock_lock_fencing_token(l);
  nlohmann::json held = Item("job");
  ASSERT_FALSE(held.is_null());
  EXPECT_FALSE(S(held, "owner").empty());
  EXPECT_FALSE(S(held, "recordVersion").empty());
  EXPECT_EQ(N(held, "leaseMs"), 10000u);
  EXPECT_EQ(N(held, "fence"), first);
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();

  nlohmann::json released = Item("job");
  ASSERT_FALSE(released.is_null()) << "release must keep the item (and its fence)";
  EXPECT_FALSE(released.contains("owner"));
  EXPECT_EQ(N(released, "fence"), first);
}

TEST_F(DynamoBasicTest, ExtendChangesTheStoredLease) {
  Client client(url());
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "ext", nullptr, &l), DLOCK_OK);
  std::string rv = S(Item("ext"), "recordVersion");
  ASSERT_EQ(dlock_extend(l, 25000), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(N(Item("ext"), "leaseMs"), 25000u);
  EXPECT_NE(S(Item("ext"), "recordVersion"), rv) << "every write rotates the record version";
  EXPECT_GT(dlock_lock_remaining_ms(l), 20000);
  ASSERT_EQ(dlock_extend(l, 0), DLOCK_OK);
  EXPECT_EQ(N(Item("ext"), "leaseMs"), 0u);
  EXPECT_EQ(dlock_lock_remaining_ms(l), INT64_MAX);
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoBasicTest, OwnerLabelIsStoredBesideTheSecretToken) {
  Client client(url());
  Options opts;
  opts.owner("host-7");
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "labelled", opts.get(), &l), DLOCK_OK);
  std::string owner = S(Item("labelled"), "owner");
  EXPECT_EQ(owner.size(), 32u + 1 + 6) << owner;
  EXPECT_EQ(owner.substr(owner.size() - 7), "|host-7");
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoBasicTest, SortKeyTablesTakePartitionSlashSortNames) {
  ASSERT_TRUE(ddb_.CreateTable("sorted", "pk", "sk"));
  Client client(ddb_.url("sorted", "partition_key=pk&sort_key=sk"));
  dlock_lock *a, *b;
  ASSERT_EQ(dlock_acquire(client.get(), "orders/42", nullptr, &a), DLOCK_OK) << dlock_last_error();
  ASSERT_EQ(dlock_acquire(client.get(), "orders/43/x", nullptr, &b), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(ddb_.GetItem("sorted", R"({"pk":{"S":"dlock:orders"},"sk":{"S":"42"}})").empty());
  EXPECT_FALSE(ddb_.GetItem("sorted", R"({"pk":{"S":"dlock:orders"},"sk":{"S":"43/x"}})").empty());
  dlock_lock* bad;
  EXPECT_EQ(dlock_acquire(client.get(), "no-slash", nullptr, &bad), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("PARTITION/SORT"), std::string::npos);
  EXPECT_EQ(dlock_acquire(client.get(), "/empty-partition", nullptr, &bad), DLOCK_EINVAL);
  EXPECT_EQ(dlock_acquire(client.get(), "empty-sort/", nullptr, &bad), DLOCK_EINVAL);
  EXPECT_EQ(dlock_release(a), DLOCK_OK);
  EXPECT_EQ(dlock_release(b), DLOCK_OK);
}

TEST_F(DynamoBasicTest, EmptyPrefixUsesTheNameAsTheKey) {
  Client client(url("prefix="));
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "raw-name", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_FALSE(ddb_.GetItem("locks", R"({"id":{"S":"raw-name"}})").empty());
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
}

TEST_F(DynamoBasicTest, CreateTableMakesAnActiveTableWithTheUrlsKeySchema) {
  DynaliteServer slow({"--createTableMs", "400"});  // tables stay CREATING for 400 ms
  ASSERT_TRUE(slow.running());
  std::string table_url = slow.url("made_by_dlock", "partition_key=name&sort_key=part");
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(dlock_backend_prepare(table_url.c_str(), 10000), DLOCK_OK) << dlock_last_error();
  EXPECT_GE(ElapsedMs(start), 300) << "it must wait for ACTIVE";
  RawResponse d = slow.Call("DescribeTable", R"({"TableName":"made_by_dlock"})");
  nlohmann::json table = nlohmann::json::parse(d.body)["Table"];
  EXPECT_EQ(table["TableStatus"], "ACTIVE");
  EXPECT_EQ(table["KeySchema"][0]["AttributeName"], "name");
  EXPECT_EQ(table["KeySchema"][0]["KeyType"], "HASH");
  EXPECT_EQ(table["KeySchema"][1]["AttributeName"], "part");
  EXPECT_EQ(table["BillingModeSummary"]["BillingMode"], "PAY_PER_REQUEST");
  // Again, through the older DynamoDB-only name: already there with the same schema is fine;
  // another schema is refused.
  EXPECT_EQ(dlock_dynamodb_create_table(table_url.c_str(), 10000), DLOCK_OK) << dlock_last_error();
  std::string other = slow.url("made_by_dlock", "partition_key=name");
  EXPECT_EQ(dlock_dynamodb_create_table(other.c_str(), 10000), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("key schema"), std::string::npos) << dlock_last_error();
  // And it works as a lock table; its client says what DynamoDB promises.
  Client client(table_url);
  EXPECT_EQ(dlock_client_capabilities(client.get()),
            DLOCK_CAP_FENCING_STRICT | DLOCK_CAP_SHARED | DLOCK_CAP_PERMITS | DLOCK_CAP_BREAK |
                DLOCK_CAP_MIN_HOLD | DLOCK_CAP_LOCK_DELAY | DLOCK_CAP_RELEASE_REQUEST);
  dlock_lock* l;
  ASSERT_EQ(dlock_acquire(client.get(), "a/b", nullptr, &l), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(dlock_release(l), DLOCK_OK);
  EXPECT_EQ(dlock_dynamodb_create_table(nullptr, 0), DLOCK_EINVAL);
  EXPECT_EQ(dlock_dynamodb_create_table("redis://127.0.0.1", 0), DLOCK_EINVAL);
}

TEST_F(DynamoBasicTest, MissingTableSaysHowToCreateIt) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(ddb_.url("no_such_table").c_str(), &c), DLOCK_EBACKEND);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find("no_such_table"), std::string::npos) << error;
  EXPECT_NE(error.find("dlock_backend_prepare"), std::string::npos) << error;
  EXPECT_NE(error.find("dlock prepare"), std::string::npos) << error;
  EXPECT_NE(error.find("aws dynamodb create-table"), std::string::npos) << error;
  EXPECT_EQ(c, nullptr);
}

TEST_F(DynamoBasicTest, KeySchemaMismatchIsExplained) {
  dlock_client* c = nullptr;
  EXPECT_EQ(dlock_client_open(url("partition_key=lock_name").c_str(), &c), DLOCK_EBACKEND);
  std::string error = dlock_last_error();
  EXPECT_NE(error.find("partition_key"), std::string::npos) << error;
}

TEST_F(DynamoBasicTest, BadInputsAreRefusedWithClearMessages) {
  struct Case {
    std::string url;
    const char* says;
  };
  std::vector<Case> cases = {
      {url("color=blue"), "unknown URL parameter 'color'"},
      {url("partition_key=owner"), "collides"},
      {url("sort_key=fence"), "collides"},
      {url("partition_key=k&sort_key=k"), "both"},
      {url("trust_local_time=yes"), "trust_local_time"},
      {url("timeout_ms=0"), "timeout_ms"},
      {ddb_.url("ab"), "3 to 255"},
      {ddb_.url("bad!name"), "bad character"},
      {"dynamodb://locks?region=us-east-1&endpoint=ftp://127.0.0.1:1", "http:// or https://"},
      {"dynamodb://locks?region=us-east-1&endpoint=http://127.0.0.1:1/path", "no path"},
      {"dynamodb://user:secret@locks?region=us-east-1", "no user or password"},
      {"dynamodb://locks:8000?region=us-east-1", "one table"},
      {"dynamodb://locks/extra?region=us-east-1", "one table"},
      {"dynamodb://locks?region=us east", "space"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.url);
    dlock_client* client = nullptr;
    EXPECT_EQ(dlock_client_open(c.url.c_str(), &client), DLOCK_EINVAL);
    EXPECT_NE(std::string(dlock_last_error()).find(c.says), std::string::npos) << dlock_last_error();
    EXPECT_EQ(std::string(dlock_last_error()).find("secret"), std::string::npos);
    EXPECT_EQ(client, nullptr);
  }
  unsetenv("AWS_REGION");
  dlock_client* client = nullptr;
  EXPECT_EQ(dlock_client_open("dynamodb://locks", &client), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("region"), std::string::npos);

  Client ok(url());
  dlock_lock* l;
  EXPECT_EQ(dlock_acquire(ok.get(), "bad\xff\xfeutf8", nullptr, &l), DLOCK_EINVAL);
  EXPECT_NE(std::string(dlock_last_error()).find("UTF-8"), std::string::npos);
  Options bad_label;
  bad_label.owner("\xc3(");
  EXPECT_EQ(dlock_acquire(ok.get(), "fine", bad_label.get(), &l), DLOCK_EINVAL);
  EXPECT_TRUE(Item("fine").is_null()) << "a refused acquire leaves nothing behind";
}

}  // namespace
}  // namespace dlock_test
