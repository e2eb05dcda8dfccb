// DynamoDB answers: any HTTP status with any body, sorted by Api::Interpret as every call's
// answer is, then read the way the lock protocol reads items (attributes, fencing token, the
// map of shared holds and permits, a writer's announcement).
//
// Asserted (a crash otherwise): a body nested deeper than kMaxJsonDepth is refused, naming the
// limit, before it is parsed; no message carries a raw control byte; the server's words in a
// message are capped (its type at 128 bytes, its message at kMaxServerTextBytes, each escaped
// to at most 4 bytes a byte).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/server_text.h"
#include "dynamodb/dynamodb_api.h"
#include "dynamodb/lock_protocol.h"

namespace {

void Require(bool ok) {
  if (!ok) __builtin_trap();
}

}  // namespace

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
    const std::string& message = r.status.message();
    for (unsigned char c : message) Require(c >= 0x20 && c != 0x7f);
    // Our own words (the table's creation advice is the longest) and the server's, capped.
    Require(message.size() <= 1024 + 4 * (128 + dlock::kMaxServerTextBytes) + 3);
    if (!dlock::JsonDepthWithin(response.body)) {
      Require(r.outcome == dlock::dynamodb::Outcome::kFailed &&
              message.find("nested deeper than") != std::string::npos);
    }
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
      // A release request heard with a renewal: its id and reason clamped before any use.
      dlock::dynamodb::ReleaseRequestRecord request;
      if (dlock::dynamodb::ParseReleaseRequest(*it, &request)) {
        Require(!request.id.empty() && request.id.size() <= dlock::dynamodb::kMaxRequestIdBytes &&
                request.reason.size() <= dlock::kMaxReasonBytes);
      }
    }
  }
  return 0;
}
