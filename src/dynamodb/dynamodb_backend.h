// The DynamoDB backend (dynamodb:// URLs); see lock_protocol.h for the protocol and
// dynamodb_config.h for the URL.
#ifndef DLOCK_DYNAMODB_DYNAMODB_BACKEND_H_
#define DLOCK_DYNAMODB_DYNAMODB_BACKEND_H_

#include <memory>
#include <string>

#include "core/backend.h"
#include "core/url.h"
#include "loop/event_loop.h"

namespace dlock {

Status NewDynamoDbBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);

// Creates the lock table named by a dynamodb:// URL (its key schema from partition_key and
// sort_key, string attributes, on-demand billing) and waits until it is ACTIVE: up to wait_ms,
// or without limit for -1, or not at all for 0. A table that already exists with the same key
// schema is fine; one with another key schema is DLOCK_EINVAL.
// Creates the table the URL names (see dlock_dynamodb_create_table in dlock.h).
Status PrepareDynamoDb(const Url& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_DYNAMODB_DYNAMODB_BACKEND_H_
