// DynamoDB answers: any HTTP status with any body, sorted by Api::Interpret as every call's
// answer is, then read the way the lock protocol reads items (attributes, fencing token, the
// map of shared holds and permits, a writer's announcement).
#include <cstddef>
#include <cstdint>
#include <string>

#include "dynamodb/dynamodb_api.h"
#include "dynamodb/lock_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static dlock::dynamodb::Api* api = [] {
    dlock::dynamodb::DynamoConfig config;
    config.table = "locks";
    config.region = "us-east-1";
    config.endpoint = "http://127.0.0.1:1";
    config.partition_key = "id";
    return new dlock::dynamodb::Api(config, nullptr);
  }();
  static const int kStatuses[] = {200, 400, 403, 404, 413, 500, 503, 0};
  dlock::http::Response response;
  response.status = kStatuses[data[0] % 8];
  response.body.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  for (const char* operation : {"UpdateItem", "GetItem", "DescribeTable"}) {
    dlock::dynamodb::ApiResult r = api->Interpret(operation, dlock::Status::Ok(), response);
    if (r.outcome != dlock::dynamodb::Outcome::kOk && r.outcome != dlock::dynamodb::Outcome::kConditionFailed) continue;
    for (const char* field : {"Attributes", "Item"}) {
      auto it = r.body.find(field);
      if (it == r.body.end()) continue;
      uint64_t token = 0;
      (void)dlock::dynamodb::NumberAttribute(*it, "fence", &token);
      (void)dlock::dynamodb::NumberAttribute(*it, "leaseMs", &token);
      (void)dlock::dynamodb::StringAttribute(*it, "owner");
      // The whole item: exclusive holder, map of holds, permits, writer's announcement.
      dlock::dynamodb::LockItem item;
      dlock::dynamodb::ParseLockItem(*it, &item);
    }
  }
  return 0;
}
