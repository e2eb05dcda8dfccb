// etcd's v3 JSON gateway, as text: the request bodies dlock sends and the answers it reads.
// The gateway speaks protobuf's JSON mapping: keys and values are base64, 64-bit integers are
// strings, fields at their zero value are left out ("succeeded": false, "lease": 0, a PUT
// event's type). Every number read here is clamped before anyone does arithmetic with it.
// Pure functions: no I/O, no exception escapes (fuzz/fuzz_etcd_reply.cc feeds them).
#ifndef DLOCK_ETCD_GATEWAY_H_
#define DLOCK_ETCD_GATEWAY_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/text.h"

namespace dlock::etcd {

using Json = nlohmann::json;


// One key as a range or a watch event shows it.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // 0: absent
  int64_t mod_revision = 0;
  int64_t lease = 0;            // 0: none
};

// What an error answer says: {"error": ..., "message": ..., "code": gRPC code}.
struct GatewayError {
  int code = 0;  // gRPC status code; 0 when the answer was no gateway error
  std::string message;
};

// gRPC codes the backend tells apart.
inline constexpr int kGrpcInvalidArgument = 3;
inline constexpr int kGrpcDeadlineExceeded = 4;
inline constexpr int kGrpcNotFound = 5;
inline constexpr int kGrpcPermissionDenied = 7;
inline constexpr int kGrpcResourceExhausted = 8;
inline constexpr int kGrpcFailedPrecondition = 9;
inline constexpr int kGrpcOutOfRange = 11;
inline constexpr int kGrpcUnavailable = 14;
inline constexpr int kGrpcUnauthenticated = 16;

// Parses an answer's text: an object, or false.
bool ParseObject(std::string_view text, Json* out);
// The error in an answer, if it is one (code 0 otherwise).
GatewayError ReadError(const Json& answer);
// header.revision of an answer (0 when absent), clamped to [0, INT64_MAX].
int64_t ReadRevision(const Json& answer);
// A 64-bit integer field, given as a string or a number, clamped to [lo, hi]; missing or
// unreadable fields read as fallback.
int64_t ReadInt(const Json& object, const char* field, int64_t lo, int64_t hi, int64_t fallback);
// A kvs[] entry or a watch event's kv; false when it is malformed.
bool ReadKeyValue(const Json& kv, KeyValue* out);

// Request bodies.
// If key was created at create_revision (the hold's own incarnation: lock_protocol.h, "Owner
// checks"): puts it again with the lease (unless 0: then with none), keeping its value and
// create revision (extend); puts value into it, keeping its lease (a hold's value); or deletes
// it (release).
std::string IfOwnedMoveTxn(const std::string& key, int64_t create_revision, int64_t lease);
std::string IfOwnedSetTxn(const std::string& key, const std::string& value, int64_t create_revision);
std::string IfOwnedDeleteTxn(const std::string& key, int64_t create_revision);
// Deletes key if it hangs on lease (a key on one of the client's leases that no lock of it
// holds), or if it holds value (an acquire without a lease whose outcome stayed unknown).
std::string IfOnLeaseDeleteTxn(const std::string& key, int64_t lease);
std::string IfValueDeleteTxn(const std::string& key, const std::string& value);
std::string RangeBody(const std::string& key);
// A read of every key in [key, range_end).
std::string RangeBody(const std::string& key, const std::string& range_end);
// A plain put (attached to lease unless 0).
std::string PutBody(const std::string& key, const std::string& value, int64_t lease);
std::string LeaseGrantBody(int64_t ttl_s);
std::string LeaseIdBody(int64_t lease);                 // keepalive, revoke
std::string LeaseTimeToLiveBody(int64_t lease, bool keys);
// A watch of the deletions of the keys in [key, range_end) from now on (progress
// notifications asked for).
std::string WatchDeletesBody(const std::string& key, const std::string& range_end);
// A watch of the puts of key alone (progress notifications asked for): from now on when
// start_revision is 0, else from that revision on (a watch resumed after its stream failed).
std::string WatchPutsBody(const std::string& key, int64_t start_revision);

// Building blocks for transactions the fixed bodies above do not cover (the lock kinds').
// A compare on a range [key, range_end) holds when every key in it passes; on an empty range
// it compares a key at its zero values (version 0, create and mod revision 0).
Json CompareCreateEqual(const std::string& key, int64_t create_revision);
// No key in [key, range_end): every version there is 0.
Json CompareRangeEmpty(const std::string& key, const std::string& range_end);
// No key in [key, range_end) was created or changed after revision: mod_revision < revision+1.
Json CompareRangeModAtMost(const std::string& key, const std::string& range_end, int64_t revision);
// key was not created or changed after revision (absent counts as unchanged).
Json CompareModAtMost(const std::string& key, int64_t revision);
// key exists (its version is above 0).
Json CompareExists(const std::string& key);
// Some key lies in [key, range_end): every version there is above 0, which an empty range fails.
Json CompareRangeNotEmpty(const std::string& key, const std::string& range_end);
Json PutRequest(const std::string& key, const std::string& value, int64_t lease);
Json DeleteRequest(const std::string& key);
// Deletes every key in [key, range_end).
Json DeleteRangeRequest(const std::string& key, const std::string& range_end);
Json RangeRequest(const std::string& key, const std::string& range_end);
// The key in [key, range_end) created first (lowest create revision): how etcd's lock recipe
// finds the holder (Go's WithFirstCreate).
Json RangeFirstCreatedRequest(const std::string& key, const std::string& range_end);
// The key in [key, range_end) created last, among those created at max_create_revision or
// before (0: any): a waiter's predecessor in etcd's lock recipe (Go's waitDeletes).
Json RangeLastCreatedRequest(const std::string& key, const std::string& range_end, int64_t max_create_revision);
// The end of the range of every key that starts with prefix (etcd's prefix end: the last byte
// that is not 0xff, plus one; "\0" for a prefix of 0xff bytes only: to the end of the keys).
std::string PrefixEnd(const std::string& prefix);
// A transaction inside a transaction's branch (etcd 3.3 and later): compares are ANDed, so an
// "or" is a branch's nested transaction.
Json TxnRequest(const Json& compare, const Json& success, const Json& failure);
// {"compare": [...], "success": [...], "failure": [...]} (failure left out when empty).
std::string TxnBody(const Json& compare, const Json& success, const Json& failure);

// Answers.
struct TxnAnswer {
  bool succeeded = false;
  int64_t revision = 0;        // header.revision: a successful put's create/mod revision
  std::vector<KeyValue> kvs;   // what a request_range in the branch taken read
};
Status ReadTxn(const Json& answer, TxnAnswer* out);
// The first kv of a range answer (*found false when there is none).
Status ReadRange(const Json& answer, KeyValue* out, bool* found);
// Every kv of a range answer, and the revision it was read at.
Status ReadRangeAll(const Json& answer, std::vector<KeyValue>* out, int64_t* revision);
// A grant: the lease and the TTL the server gave (which may be more than asked).
Status ReadGrant(const Json& answer, int64_t* lease, int64_t* ttl_s);
// A keepalive ({"result": ...}): the TTL after it, 0 when the lease is gone.
Status ReadKeepAlive(const Json& answer, int64_t* ttl_s);
// timetolive: TTL in seconds (-1 when the lease is gone) and, when asked, its keys.
Status ReadTimeToLive(const Json& answer, int64_t* ttl_s, std::vector<std::string>* keys);
// The TTL a lease was granted with (grantedTTL; 0 when the lease is gone or it is missing),
// clamped to [0, kMaxLeaseTtlS].
int64_t ReadGrantedTtl(const Json& answer);

// One message of a watch stream ({"result": ...}).
struct WatchMessage {
  bool created = false;
  bool canceled = false;        // the server ended the watch (compaction, or an error)
  int64_t compact_revision = 0;
  int64_t revision = 0;
  int deletes = 0;              // DELETE events in it
  int events = 0;
  std::vector<KeyValue> puts;   // its PUT events' keys and values (a watch of puts)
  std::vector<std::string> deleted;  // its DELETE events' keys (one unreadable: not listed)
  std::string cancel_reason;
};
Status ReadWatchMessage(const Json& line, WatchMessage* out);
// Reads the whole lines at the front of *buffer (a watch stream's text so far: one JSON
// message a line) into *out and removes them, leaving a partial last line. An error for a line
// that is no watch message (an error answer, garbage) or a partial line over 1 MiB.
Status TakeWatchLines(std::string* buffer, std::vector<WatchMessage>* out);

// Largest lease TTL etcd grants (its MaxLeaseTTL, 9,000,000,000 s), and a sane bound on what
// a server says of a lease's TTL.
inline constexpr int64_t kMaxLeaseTtlS = 9000000000;

}  // namespace dlock::etcd

#endif  // DLOCK_ETCD_GATEWAY_H_
