// dlock_dynamodb_create_table: CreateTable with the key schema a dynamodb:// URL needs, then
// DescribeTable until the table is ACTIVE.
#include <thread>

#include "dynamodb/credentials.h"
#include "dynamodb/dynamodb_api.h"
#include "dynamodb/dynamodb_backend.h"
#include "dynamodb/transports.h"

namespace dlock {
namespace {

using dynamodb::ApiResult;
using dynamodb::Json;
using dynamodb::Outcome;

constexpr Millis kPollInterval(100);

// "id HASH, sk RANGE" for a KeySchema array; "" when it is not one.
std::string DescribeKeySchema(const Json& schema) {
  std::string out;
  if (!schema.is_array()) return out;
  for (const auto& element : schema) {
    if (!element.is_object() || !element.contains("AttributeName") || !element.contains("KeyType")) continue;
    if (!element["AttributeName"].is_string() || !element["KeyType"].is_string()) continue;
    if (!out.empty()) out += ", ";
    out += element["AttributeName"].get<std::string>() + " " + element["KeyType"].get<std::string>();
  }
  return out;
}

}  // namespace

Status PrepareDynamoDb(const Url& url, int64_t wait_ms) {
  dynamodb::DynamoConfig config;
  Status s = dynamodb::ParseDynamoUrl(url, &config);
  if (!s.ok()) return s;
  dynamodb::CredentialsChain credentials;
  http::BlockingTransport http;
  dynamodb::Api api(config, &credentials);
  dynamodb::HttpCaller transport(&api, &http);
  auto call = [&](const std::string& operation, Json body) {
    ApiResult result;
    dynamodb::CallWithRetries(&transport, &credentials, operation, std::move(body),
                              Now() + Millis(config.params.timeout_ms),
                              [&](ApiResult r) { result = std::move(r); });
    return result;
  };

  Json attributes = Json::array({{{"AttributeName", config.partition_key}, {"AttributeType", "S"}}});
  Json key_schema = Json::array({{{"AttributeName", config.partition_key}, {"KeyType", "HASH"}}});
  if (!config.sort_key.empty()) {
    attributes.push_back({{"AttributeName", config.sort_key}, {"AttributeType", "S"}});
    key_schema.push_back({{"AttributeName", config.sort_key}, {"KeyType", "RANGE"}});
  }
  const std::string wanted = DescribeKeySchema(key_schema);
  ApiResult created = call("CreateTable", Json{{"TableName", config.table},
                                               {"AttributeDefinitions", attributes},
                                               {"KeySchema", key_schema},
                                               {"BillingMode", "PAY_PER_REQUEST"}});
  if (created.outcome != Outcome::kOk && created.error_type != "ResourceInUseException") {
    return created.status.Prefixed("cannot create table '" + config.table + "'");
  }

  const TimePoint until = wait_ms < 0 ? TimePoint::max() : Now() + Millis(wait_ms);
  const Json describe = Json{{"TableName", config.table}};
  while (true) {
    ApiResult described = call("DescribeTable", describe);
    if (described.outcome != Outcome::kOk) {
      // Just created, it may not be visible yet: keep polling within the wait.
      if (described.error_type != "ResourceNotFoundException" || Now() >= until) {
        return described.status.Prefixed("cannot describe table '" + config.table + "'");
      }
    } else {
      const Json table = described.body.value("Table", Json::object());
      std::string have = DescribeKeySchema(table.value("KeySchema", Json()));
      if (have != wanted) {
        return Status::InvalidArgument("table '" + config.table + "' exists with key schema (" +
                                       have + "), but this URL needs (" + wanted +
                                       "): set partition_key= / sort_key= to match, or use another table");
      }
      auto status = table.find("TableStatus");
      if (status != table.end() && status->is_string() && *status == "ACTIVE") return Status::Ok();
      if (wait_ms == 0) return Status::Ok();  // created; the caller does not want to wait
      if (Now() >= until) {
        return Status::IoError("table '" + config.table + "' is not ACTIVE after " +
                               std::to_string(wait_ms) + " ms (status " +
                               (status != table.end() && status->is_string() ? status->get<std::string>()
                                                                             : std::string("unknown")) +
                               ")");
      }
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace dlock
