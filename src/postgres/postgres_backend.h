// The PostgreSQL backend (postgres:// and postgresql:// URLs): lock_protocol.h for the protocol,
// schema.sql for the table and its functions, postgres_config.h for the URL.
#ifndef DLOCK_POSTGRES_POSTGRES_BACKEND_H_
#define DLOCK_POSTGRES_POSTGRES_BACKEND_H_

#include <memory>

#include "core/backend.h"
#include "core/url.h"
#include "loop/event_loop.h"

namespace dlock {

Status NewPostgresBackend(const Url& url, EventLoop* loop, std::unique_ptr<Backend>* out);
// Creates the lock table and its functions (schema.sql) if missing, and replaces the functions
// with this version's: safe to run again, and from several processes at once.
Status PreparePostgres(const Url& url, int64_t wait_ms);

}  // namespace dlock

#endif  // DLOCK_POSTGRES_POSTGRES_BACKEND_H_
