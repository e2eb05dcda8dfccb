// dynamodb://TABLE?region=R[&endpoint=URL][&partition_key=NAME][&sort_key=NAME]
//                  [&trust_local_time=1][&tls_verify=0][&prefix=P][&connect_timeout_ms=N]
//                  [&timeout_ms=N]
// and how a lock name maps onto the table's key.
#ifndef DLOCK_DYNAMODB_DYNAMODB_CONFIG_H_
#define DLOCK_DYNAMODB_DYNAMODB_CONFIG_H_

#include <string>

#include "core/status.h"
#include "core/url.h"

namespace dlock::dynamodb {

// The item attributes the lock protocol writes besides the key. A partition_key or sort_key
// equal to one of them is refused.
namespace attr {
inline constexpr char kOwner[] = "owner";                  // S: secret owner token [+ "|label"]
inline constexpr char kRecordVersion[] = "recordVersion";  // S: random, rotated by every write
inline constexpr char kLeaseMs[] = "leaseMs";              // N: lease in ms, 0 = no expiry
inline constexpr char kRenewedAtMs[] = "renewedAtMs";      // N: holder's wall clock at its last write
inline constexpr char kFence[] = "fence";                  // N: last fencing token; never removed
inline constexpr char kData[] = "data";                    // B: the value stored with the hold (absent: none)
// Job rules (lock_protocol.h), beside a hold's lease, at its top level or in its holds entry:
inline constexpr char kMinHoldMs[] = "minHoldMs";      // N: what was left of the min hold at the write
inline constexpr char kLockDelayMs[] = "lockDelayMs";  // N: the lock-delay after its lease
// Shared and semaphore holds (lock_protocol.h):
inline constexpr char kHolds[] = "holds";      // M: owner value -> {recordVersion, leaseMs, renewedAtMs, token[, take]}
inline constexpr char kToken[] = "token";      // N: in a hold: its fencing token
inline constexpr char kTake[] = "take";        // N: in a hold: the permits it took, when more than 1
inline constexpr char kPermits[] = "permits";  // N: the semaphore's size while holds are permits
inline constexpr char kWriter[] = "writer";    // M: a waiting writer {owner, recordVersion, queueMs}
inline constexpr char kQueueMs[] = "queueMs";  // N: in writer: how long it stands unchanged
// Breaks (lock_protocol.h):
inline constexpr char kClosed[] = "closed";  // M: owner-less marker {recordVersion, leaseMs, renewedAtMs, by}
inline constexpr char kBy[] = "by";          // S: in closed: what left it ("broken", "min_hold")
inline constexpr char kBroken[] = "broken";  // L: break records, newest first: {reason, atMs, tokens}
inline constexpr char kReason[] = "reason";  // S: in a break record: the operator's words (absent: none)
inline constexpr char kAtMs[] = "atMs";      // N: in a break record: the breaker's wall clock
inline constexpr char kTokens[] = "tokens";  // L of N: in a break record: the broken holds' tokens
// Release requests (lock_protocol.h):
inline constexpr char kReleaseRequest[] = "releaseRequest";  // M: the last request {id, reason, token}
inline constexpr char kRequestId[] = "id";  // S: in releaseRequest: the request's id (reason: kReason)
}  // namespace attr

// Other lock clients' items (docs/dynamodb.md): an item with any of these attributes is theirs,
// and dlock never writes a hold into it, nor takes it over.
namespace foreign {
// AWS's DynamoDB Lock Client for Java.
inline constexpr char kJavaOwnerName[] = "ownerName";
inline constexpr char kJavaRecordVersion[] = "recordVersionNumber";
inline constexpr char kJavaLeaseDuration[] = "leaseDuration";
// npm dynamodb-lock-client: every item has a guid; FailOpen items a fencingToken too.
inline constexpr char kNodeGuid[] = "guid";
inline constexpr char kNodeFencingToken[] = "fencingToken";
inline constexpr const char* kMarkers[] = {kJavaOwnerName, kJavaRecordVersion, kJavaLeaseDuration, kNodeGuid,
                                           kNodeFencingToken};
}  // namespace foreign

inline constexpr char kDefaultPartitionKey[] = "id";

struct DynamoConfig {
  std::string table;
  std::string region;
  std::string endpoint;     // "https://dynamodb.us-east-1.amazonaws.com" (no trailing slash)
  std::string host_header;  // what is sent and signed as Host: "127.0.0.1:8000"
  std::string partition_key = kDefaultPartitionKey;
  std::string sort_key;     // empty: the table has no sort key
  bool trust_local_time = false;
  bool tls_verify = true;
  CommonParams params;

  // "dynamodb table 'locks' at http://127.0.0.1:8000": how errors name the backend (with
  // tls_verify=0 on https, " (certificate not verified: tls_verify=0)" after it).
  std::string Describe() const;
};

// Reads the URL, then fills what it leaves out from the environment and the shared config
// file: region from AWS_REGION, AWS_DEFAULT_REGION, the profile's region; endpoint from
// AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, the profile's endpoint_url (all skipped when
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true), else the region's public endpoint. Errors never
// show a secret of the URL (UrlError).
Status ParseDynamoUrl(const Url& url, DynamoConfig* out);

// The key values of lock `name` (docs/dynamodb.md, "The table"): without a sort key the partition value is
// prefix + name; with one, the name is "PARTITION/SORT", split at its first '/', and the
// partition value is prefix + PARTITION. Names must be valid UTF-8 (DynamoDB strings are).
Status SplitLockName(const DynamoConfig& config, const std::string& name, std::string* partition,
                     std::string* sort);

// True when text is well-formed UTF-8.
bool IsValidUtf8(const std::string& text);

}  // namespace dlock::dynamodb

#endif  // DLOCK_DYNAMODB_DYNAMODB_CONFIG_H_
