// The C ABI: argument checks, the exception barrier, and Status -> dlock_status. Nothing else.
#include "dlock/dlock.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "backends/registry.h"
#include "core/client.h"
#include "core/completion_queue.h"
#include "core/options.h"
#include "core/status.h"
#include "core/text.h"
#include "loop/host_reactor.h"

struct dlock_client {
  std::shared_ptr<dlock::Client> impl;
};

struct dlock_lock {
  std::shared_ptr<dlock::Client> client;  // keeps the client's core alive for late releases
  std::shared_ptr<dlock::LockState> state;
  mutable std::string lost_cause;  // dlock_lock_lost_cause's answer, kept until the next call
};

struct dlock_event {
  const dlock::Event* impl;                 // what the accessors read
  std::unique_ptr<dlock::EventCopy> owned;  // a popped event's own copy; null for a hook's
};

struct dlock_metrics {
  std::vector<dlock::MetricFamily> families;
  std::vector<dlock::MetricSample> samples;
  std::vector<size_t> family_of;  // sample -> families index
};

struct dlock_options {
  dlock::AcquireOptions impl;
};

struct dlock_info {
  dlock::LockInfo impl;
};

struct dlock_observer {
  std::shared_ptr<dlock::Client> client;  // keeps the client's core alive until cancelled
  std::shared_ptr<dlock::Observer> impl;
};

struct dlock_queue {
  std::shared_ptr<dlock::CompletionQueue> impl;  // shared with the completions still to come
};

static_assert(DLOCK_MAX_NAME_BYTES == dlock::kMaxNameBytes);
static_assert(DLOCK_MAX_OWNER_BYTES == dlock::kMaxOwnerBytes);
static_assert(DLOCK_MAX_VALUE_BYTES == dlock::kMaxValueBytes);
static_assert(DLOCK_CAP_BREAK == dlock::kCapBreak);
static_assert(DLOCK_CAP_MIN_HOLD == dlock::kCapMinHold);
static_assert(DLOCK_CAP_LOCK_DELAY == dlock::kCapLockDelay);
static_assert(DLOCK_MAX_LOCK_DELAY_MS == dlock::kMaxLockDelayMs);
static_assert(DLOCK_MAX_REASON_BYTES == dlock::kMaxReasonBytes);
static_assert(DLOCK_EXCLUSIVE == static_cast<int>(dlock::LockKind::kExclusive));
static_assert(DLOCK_SHARED == static_cast<int>(dlock::LockKind::kShared));
static_assert(DLOCK_EVENT_LOST == static_cast<int>(dlock::Event::Type::kLost));
static_assert(DLOCK_EVENT_RENEWAL_FAILED == static_cast<int>(dlock::Event::Type::kRenewalFailed));

namespace {

thread_local std::string last_error;

dlock_status Report(const dlock::Status& s) {
  last_error = s.message();
  return static_cast<dlock_status>(s.code());
}

dlock_status Invalid(const char* message) {
  last_error = message;
  return DLOCK_EINVAL;
}

// Runs fn, turning any exception into a status: no exception crosses the C boundary.
template <typename Fn>
dlock_status Guard(Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    last_error = "out of memory";
    return DLOCK_ENOMEM;
  } catch (const std::exception& e) {
    last_error = std::string("internal error: ") + e.what();
    return DLOCK_EINTERNAL;
  } catch (...) {
    last_error = "internal error";
    return DLOCK_EINTERNAL;
  }
}

// The checks dlock_acquire and dlock_acquire_async share; *options is o's or the defaults.
dlock::Status CheckAcquire(const char* name, const dlock_options* o,
                           const dlock::AcquireOptions** options) {
  static const dlock::AcquireOptions kDefaults;
  *options = o != nullptr ? &o->impl : &kDefaults;
  dlock::Status s = dlock::CheckLockName(name);
  return s.ok() ? (*options)->Validate() : s;
}

// The _async and _queued forms differ only in how the outcome is delivered (done): these
// start the operation for both. Argument checks and Guard stay with the callers.
dlock_status StartAcquire(dlock_client* c, const char* name, const dlock_options* o,
                          dlock::CancelKey key,
                          std::function<void(const dlock::Status&, const std::shared_ptr<dlock::Client>&,
                                             std::shared_ptr<dlock::LockState>)> done) {
  if (c == nullptr) return Invalid("client is NULL");
  const dlock::AcquireOptions* options;
  dlock::Status s = CheckAcquire(name, o, &options);
  if (!s.ok()) return Report(s);
  std::shared_ptr<dlock::Client> client = c->impl;
  s = client->AcquireAsync(
      name, *options, key,
      [client, done = std::move(done)](const dlock::Status& result,
                                       std::shared_ptr<dlock::LockState> state) {
        done(result, client, std::move(state));  // state is null unless acquired
      });
  return Report(s);
}

dlock::Status ClosedClient(const dlock::LockState& state) {
  return dlock::Status::NotHeld("lock '" + state.name + "' was released when its client was closed");
}

// Frees l at once; on a closed client answers NOT_HELD at once and never calls done.
dlock_status StartRelease(dlock_lock* l, dlock::StatusCallback done) {
  std::unique_ptr<dlock_lock> owned(l);  // the handle ends here; the state lives on
  if (owned->client->IsClosed()) return Report(ClosedClient(*owned->state));
  owned->client->ReleaseAsync(owned->state, std::move(done));
  return Report(dlock::Status::Ok());
}

dlock_status StartExtend(dlock_lock* l, uint64_t lease_ms, dlock::StatusCallback done) {
  if (l->client->IsClosed()) return Report(ClosedClient(*l->state));
  l->client->ExtendAsync(l->state, lease_ms, std::move(done));
  return Report(dlock::Status::Ok());
}

// Delivers to a queue: the completion callbacks of the _queued forms.
dlock::StatusCallback PushDone(std::shared_ptr<dlock::CompletionQueue> queue, uint64_t tag) {
  return [queue = std::move(queue), tag](const dlock::Status& s) {
    queue->Push(
        {dlock::CompletionQueue::Kind::kDone, tag, s, nullptr, nullptr, nullptr, nullptr, nullptr});
  };
}

}  // namespace

extern "C" {

const char* dlock_status_str(dlock_status s) {
  switch (s) {
    case DLOCK_OK: return "DLOCK_OK";
    case DLOCK_NOT_ACQUIRED: return "DLOCK_NOT_ACQUIRED";
    case DLOCK_NOT_HELD: return "DLOCK_NOT_HELD";
    case DLOCK_EINVAL: return "DLOCK_EINVAL";
    case DLOCK_EIO: return "DLOCK_EIO";
    case DLOCK_EBACKEND: return "DLOCK_EBACKEND";
    case DLOCK_EAUTH: return "DLOCK_EAUTH";
    case DLOCK_ECANCELLED: return "DLOCK_ECANCELLED";
    case DLOCK_ENOMEM: return "DLOCK_ENOMEM";
    case DLOCK_EINTERNAL: return "DLOCK_EINTERNAL";
  }
  return "DLOCK_UNKNOWN";
}

const char* dlock_last_error(void) { return last_error.c_str(); }

#define DLOCK_STR2(x) #x
#define DLOCK_STR(x) DLOCK_STR2(x)
const char* dlock_version(void) {
  return DLOCK_STR(DLOCK_VERSION_MAJOR) "." DLOCK_STR(DLOCK_VERSION_MINOR) "." DLOCK_STR(DLOCK_VERSION_PATCH);
}

dlock_status dlock_client_open(const char* url, dlock_client** out) {
  return Guard([&] {
    if (url == nullptr) return Invalid("url is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    std::shared_ptr<dlock::Client> impl;
    dlock::Status s = dlock::OpenClient(dlock::Secret(url), &impl);
    if (!s.ok()) return Report(s);
    *out = new dlock_client{std::move(impl)};
    return Report(s);
  });
}

void dlock_client_close(dlock_client* c) {
  if (c == nullptr) return;
  (void)Guard([&] {
    c->impl->Close();
    delete c;
    return DLOCK_OK;
  });
}

dlock_options* dlock_options_new(void) { return new (std::nothrow) dlock_options(); }

void dlock_options_free(dlock_options* o) { delete o; }

dlock_status dlock_options_set_lease_ms(dlock_options* o, uint64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckHeldLease(ms);
    if (s.ok()) o->impl.lease_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_heartbeat_ms(dlock_options* o, uint64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckHeartbeat(ms);
    if (s.ok()) o->impl.heartbeat_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_max_hold_ms(dlock_options* o, uint64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckMaxHold(ms);
    if (s.ok()) o->impl.max_hold_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_min_hold_ms(dlock_options* o, uint64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckMinHold(ms);
    if (s.ok()) o->impl.min_hold_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_lock_delay_ms(dlock_options* o, uint64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckLockDelay(ms);
    if (s.ok()) o->impl.lock_delay_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_wait_ms(dlock_options* o, int64_t ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckWait(ms);
    if (s.ok()) o->impl.wait_ms = ms;
    return Report(s);
  });
}

dlock_status dlock_options_set_retry_ms(dlock_options* o, uint64_t min_ms, uint64_t max_ms) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckRetry(min_ms, max_ms);
    if (s.ok()) {
      o->impl.retry_min_ms = min_ms;
      o->impl.retry_max_ms = max_ms;
    }
    return Report(s);
  });
}

dlock_status dlock_options_set_reentrant(dlock_options* o, const char* context) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckReentrantContext(context);
    if (!s.ok()) return Report(s);
    o->impl.reentrant_context = context == nullptr ? "" : context;
    return Report(s);
  });
}

dlock_status dlock_options_set_owner(dlock_options* o, const char* owner) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckOwner(owner);
    if (s.ok()) o->impl.owner = owner == nullptr ? "" : owner;
    return Report(s);
  });
}

dlock_status dlock_options_set_value(dlock_options* o, const void* data, size_t len) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    dlock::Status s = dlock::CheckValue(data, len);
    if (s.ok()) o->impl.value.assign(static_cast<const char*>(data), len);
    return Report(s);
  });
}

dlock_status dlock_options_set_kind(dlock_options* o, dlock_kind kind) {
  if (o == nullptr) return Invalid("options is NULL");
  if (kind != DLOCK_EXCLUSIVE && kind != DLOCK_SHARED) {
    return Invalid("kind must be DLOCK_EXCLUSIVE (0) or DLOCK_SHARED (1)");
  }
  o->impl.kind = static_cast<dlock::LockKind>(kind);
  return DLOCK_OK;
}

dlock_status dlock_options_set_permits(dlock_options* o, uint32_t n) {
  if (o == nullptr) return Invalid("options is NULL");
  o->impl.permits = n;
  return DLOCK_OK;
}

dlock_status dlock_options_set_take(dlock_options* o, uint32_t k) {
  if (o == nullptr) return Invalid("options is NULL");
  if (k == 0) return Invalid("take must be at least 1 permit");
  o->impl.take = k;
  return DLOCK_OK;
}

dlock_status dlock_options_set_fair(dlock_options* o, int fair) {
  if (o == nullptr) return Invalid("options is NULL");
  if (fair != 0 && fair != 1) return Invalid("fair must be 0 or 1");
  o->impl.fair = fair == 1;
  return DLOCK_OK;
}

dlock_status dlock_options_set_on_lost(dlock_options* o, dlock_lost_fn fn, void* arg) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    o->impl.on_lost = nullptr;
    if (fn != nullptr) {
      o->impl.on_lost = [fn, arg](const std::string& name, uint64_t token, const std::string&) {
        fn(name.c_str(), token, arg);
      };
    }
    return Report(dlock::Status::Ok());
  });
}

dlock_status dlock_options_set_on_release_requested(dlock_options* o, dlock_release_requested_fn fn,
                                                    void* arg) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    o->impl.on_release_requested = nullptr;
    if (fn != nullptr) {
      o->impl.on_release_requested = [fn, arg](const std::string& name, uint64_t,
                                               const std::string& reason) {
        fn(name.c_str(), reason.c_str(), arg);
      };
    }
    return Report(dlock::Status::Ok());
  });
}

namespace {
// dlock_acquire and dlock_campaign: the checks, then Client::Acquire or Client::Campaign.
using AcquireFn = dlock::Status (dlock::Client::*)(const std::string&, const dlock::AcquireOptions&,
                                                   std::shared_ptr<dlock::LockState>*);
dlock_status BlockingAcquire(AcquireFn acquire, dlock_client* c, const char* name,
                             const dlock_options* o, dlock_lock** out) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    const dlock::AcquireOptions* options;
    dlock::Status s = CheckAcquire(name, o, &options);
    if (!s.ok()) return Report(s);
    std::shared_ptr<dlock::LockState> state;
    s = (c->impl.get()->*acquire)(name, *options, &state);
    if (!s.ok()) return Report(s);
    *out = new dlock_lock{c->impl, std::move(state), {}};
    return Report(s);
  });
}

// dlock_inspect and dlock_leader: the checks, then Client::Inspect or Client::Leader.
using ReadInfoFn = dlock::Status (dlock::Client::*)(const std::string&, dlock::LockInfo*);
dlock_status ReadInfo(ReadInfoFn read, dlock_client* c, const char* name, dlock_info** out) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    dlock::Status s = dlock::CheckLockName(name);
    if (!s.ok()) return Report(s);
    auto info = std::make_unique<dlock_info>();
    s = (c->impl.get()->*read)(name, &info->impl);
    if (s.ok()) *out = info.release();
    return Report(s);
  });
}
}  // namespace

dlock_status dlock_acquire(dlock_client* c, const char* name, const dlock_options* o,
                           dlock_lock** out) {
  return BlockingAcquire(&dlock::Client::Acquire, c, name, o, out);
}

dlock_status dlock_acquire_many(dlock_client* c, const char* const* names, size_t n,
                                const dlock_options* o, dlock_lock** locks_out) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (n == 0) return Invalid("n is 0: name at least one lock");
    if (names == nullptr) return Invalid("names is NULL");
    if (locks_out == nullptr) return Invalid("locks_out is NULL");
    for (size_t k = 0; k < n; ++k) locks_out[k] = nullptr;
    const dlock::AcquireOptions* options = nullptr;
    std::vector<std::string> wanted;
    wanted.reserve(n);
    for (size_t k = 0; k < n; ++k) {
      dlock::Status s = CheckAcquire(names[k], o, &options);
      if (!s.ok()) return Report(s.Prefixed("names[" + std::to_string(k) + "]"));
      wanted.emplace_back(names[k]);
    }
    std::vector<std::shared_ptr<dlock::LockState>> held;
    dlock::Status s = c->impl->AcquireMany(wanted, *options, &held);
    if (!s.ok()) return Report(s);
    std::vector<std::unique_ptr<dlock_lock>> handles;  // all made before any is handed out
    for (auto& state : held) handles.emplace_back(new dlock_lock{c->impl, std::move(state), {}});
    for (size_t k = 0; k < n; ++k) locks_out[k] = handles[k].release();
    return Report(s);
  });
}

dlock_status dlock_release_many(dlock_lock** locks, size_t n) {
  return Guard([&] {
    if (locks == nullptr && n != 0) return Invalid("locks is NULL");
    std::vector<std::unique_ptr<dlock_lock>> owned;  // freed whatever happens
    std::vector<std::pair<std::shared_ptr<dlock::Client>, std::shared_ptr<dlock::LockState>>> holds;
    for (size_t k = 0; k < n; ++k) {
      if (locks[k] == nullptr) continue;
      owned.emplace_back(locks[k]);
      locks[k] = nullptr;
      holds.emplace_back(owned.back()->client, owned.back()->state);
    }
    return Report(dlock::Client::ReleaseMany(holds));
  });
}

dlock_status dlock_campaign(dlock_client* c, const char* name, const dlock_options* o,
                            dlock_lock** out) {
  return BlockingAcquire(&dlock::Client::Campaign, c, name, o, out);
}

dlock_status dlock_leader(dlock_client* c, const char* name, dlock_info** out) {
  return ReadInfo(&dlock::Client::Leader, c, name, out);
}

namespace {
// The async and queued inspect and leader: the checks, then Client::InspectAsync.
dlock_status StartInspect(dlock_client* c, const char* name, bool leader, bool has_target,
                          dlock::InspectCallback done) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (!has_target) return Invalid(leader ? "leader: done/queue is NULL" : "inspect: done/queue is NULL");
    dlock::Status s = dlock::CheckLockName(name);
    if (!s.ok()) return Report(s);
    return Report(c->impl->InspectAsync(name, leader, std::move(done)));
  });
}

dlock_status InspectAsync(dlock_client* c, const char* name, bool leader, dlock_info_fn done, void* arg) {
  return StartInspect(c, name, leader, done != nullptr, [done, arg](const dlock::Status& s, dlock::LockInfo info) {
    dlock_info* out = nullptr;
    if (s.ok()) {
      try {
        out = new dlock_info{std::move(info)};
      } catch (...) {
        last_error = "out of memory";
        done(DLOCK_ENOMEM, nullptr, arg);
        return;
      }
    }
    last_error = s.message();  // for dlock_last_error() inside done
    done(static_cast<dlock_status>(s.code()), out, arg);
  });
}

dlock_status InspectQueued(dlock_client* c, const char* name, bool leader, dlock_queue* q, uint64_t tag) {
  std::shared_ptr<dlock::CompletionQueue> queue = q != nullptr ? q->impl : nullptr;
  return StartInspect(c, name, leader, q != nullptr, [queue, tag](const dlock::Status& s, dlock::LockInfo info) {
    dlock::CompletionQueue::Entry entry;
    entry.kind = dlock::CompletionQueue::Kind::kDone;
    entry.tag = tag;
    entry.status = s;
    if (s.ok()) entry.info = std::make_shared<dlock::LockInfo>(std::move(info));
    queue->Push(std::move(entry));
  });
}
}  // namespace

dlock_status dlock_inspect_async(dlock_client* c, const char* name, dlock_info_fn done, void* arg) {
  return InspectAsync(c, name, false, done, arg);
}
dlock_status dlock_leader_async(dlock_client* c, const char* name, dlock_info_fn done, void* arg) {
  return InspectAsync(c, name, true, done, arg);
}
dlock_status dlock_inspect_queued(dlock_client* c, const char* name, dlock_queue* q, uint64_t tag) {
  return InspectQueued(c, name, false, q, tag);
}
dlock_status dlock_leader_queued(dlock_client* c, const char* name, dlock_queue* q, uint64_t tag) {
  return InspectQueued(c, name, true, q, tag);
}

namespace {
// dlock_observe and dlock_observe_queued: the checks, then Client::Observe.
dlock_status StartObserver(dlock_client* c, const char* name, bool has_target,
                           dlock::Observer::Report report, dlock_observer** out) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (!has_target) return Invalid("fn (or the queue) is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    dlock::Status s = dlock::CheckLockName(name);
    if (!s.ok()) return Report(s);
    auto observer = std::make_unique<dlock_observer>();
    observer->client = c->impl;
    s = c->impl->Observe(name, std::move(report), &observer->impl);
    if (s.ok()) *out = observer.release();
    return Report(s);
  });
}
}  // namespace

dlock_status dlock_observe(dlock_client* c, const char* name, dlock_observe_fn fn, void* arg,
                           dlock_observer** out) {
  return StartObserver(c, name, fn != nullptr,
                       [fn, arg, shown = std::string(name != nullptr ? name : "")](const dlock::HolderInfo* leader) {
                         if (leader == nullptr) return fn(shown.c_str(), nullptr, arg);
                         dlock_info info;
                         info.impl.holders.push_back(*leader);
                         fn(shown.c_str(), &info, arg);
                       },
                       out);
}

dlock_status dlock_observe_queued(dlock_client* c, const char* name, dlock_queue* q, uint64_t tag,
                                  dlock_observer** out) {
  std::shared_ptr<dlock::CompletionQueue> queue = q != nullptr ? q->impl : nullptr;
  return StartObserver(c, name, q != nullptr,
                       [queue, tag](const dlock::HolderInfo* leader) {
                         dlock::CompletionQueue::Entry entry;
                         entry.kind = dlock::CompletionQueue::Kind::kLeader;
                         entry.tag = tag;
                         if (leader != nullptr) entry.leader = std::make_shared<dlock::HolderInfo>(*leader);
                         queue->Push(std::move(entry));
                       },
                       out);
}

void dlock_observer_cancel(dlock_observer* ob) {
  if (ob == nullptr) return;
  try {
    ob->impl->Cancel();
  } catch (...) {  // out of memory posting the stop: the client's close stops it
  }
  delete ob;
}

dlock_status dlock_release(dlock_lock* l) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    std::unique_ptr<dlock_lock> owned(l);  // freed whatever happens
    return Report(owned->client->Release(owned->state));
  });
}

dlock_status dlock_extend(dlock_lock* l, uint64_t lease_ms) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    return Report(l->client->Extend(l->state, lease_ms));
  });
}

dlock_status dlock_lock_set_value(dlock_lock* l, const void* data, size_t len) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    dlock::Status s = dlock::CheckValue(data, len);
    if (!s.ok()) return Report(s);
    return Report(l->client->SetValue(l->state, std::string(static_cast<const char*>(data), len)));
  });
}

uint64_t dlock_lock_fencing_token(const dlock_lock* l) {
  return l == nullptr ? 0 : l->state->fencing_token;
}

int dlock_lock_is_valid(const dlock_lock* l) { return l != nullptr && l->state->IsValid() ? 1 : 0; }

int64_t dlock_lock_remaining_ms(const dlock_lock* l) {
  return l == nullptr ? 0 : l->state->RemainingMs();
}

uint32_t dlock_lock_attempts(const dlock_lock* l) { return l == nullptr ? 0 : l->state->attempts; }

const char* dlock_lock_name(const dlock_lock* l) {
  return l == nullptr ? nullptr : l->state->name.c_str();
}

dlock_status dlock_client_open_evbase(const char* url, struct event_base* base, dlock_client** out) {
  return Guard([&] {
    if (url == nullptr) return Invalid("url is NULL");
    if (base == nullptr) return Invalid("event_base is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    std::shared_ptr<dlock::Client> impl;
    dlock::Status s = dlock::OpenClientOnBase(dlock::Secret(url), base, &impl);
    if (!s.ok()) return Report(s);
    *out = new dlock_client{std::move(impl)};
    return Report(s);
  });
}

namespace {

// The caller's hook table, as the loop seam sees it.
class HooksLoop : public dlock::HostLoop {
 public:
  HooksLoop(const dlock_loop_hooks& hooks, void* ctx) : hooks_(hooks), ctx_(ctx) {}
  void WatchFd(dlock::HostReactor* reactor, int fd, bool read, bool write, void** slot) override {
    const uint32_t events = (read ? DLOCK_LOOP_READ : 0u) | (write ? DLOCK_LOOP_WRITE : 0u);
    hooks_.watch_fd(ctx_, reinterpret_cast<dlock_loop*>(reactor), fd, events, slot);
  }
  void SetTimer(dlock::HostReactor* reactor, int64_t ms) override {
    hooks_.set_timer(ctx_, reinterpret_cast<dlock_loop*>(reactor), ms);
  }
  void Cleanup() override {
    if (opened_ && hooks_.cleanup != nullptr) hooks_.cleanup(ctx_);
  }
  void MarkOpened() { opened_ = true; }

 private:
  dlock_loop_hooks hooks_;
  void* ctx_;
  bool opened_ = false;  // a failed open does not call cleanup
};

dlock::HostReactor* ReactorOf(dlock_loop* loop) { return reinterpret_cast<dlock::HostReactor*>(loop); }

}  // namespace

dlock_status dlock_client_open_hooks(const char* url, const dlock_loop_hooks* hooks,
                                     void* loop_ctx, dlock_client** out) {
  return Guard([&] {
    if (url == nullptr) return Invalid("url is NULL");
    if (hooks == nullptr) return Invalid("hooks is NULL");
    if (hooks->watch_fd == nullptr) return Invalid("hooks->watch_fd is NULL");
    if (hooks->set_timer == nullptr) return Invalid("hooks->set_timer is NULL");
    if (out == nullptr) return Invalid("out is NULL");
    auto loop = std::make_unique<HooksLoop>(*hooks, loop_ctx);
    HooksLoop* seen = loop.get();
    std::shared_ptr<dlock::Client> impl;
    dlock::Status s = dlock::OpenClientOnHost(dlock::Secret(url), std::move(loop), &impl);
    if (!s.ok()) return Report(s);
    seen->MarkOpened();
    *out = new dlock_client{std::move(impl)};
    return Report(s);
  });
}

void dlock_loop_fd_ready(dlock_loop* loop, int fd, uint32_t events) {
  if (loop == nullptr) return;
  Guard([&] {
    ReactorOf(loop)->FdReady(fd, (events & DLOCK_LOOP_READ) != 0, (events & DLOCK_LOOP_WRITE) != 0);
    return DLOCK_OK;
  });
}

void dlock_loop_timer_fired(dlock_loop* loop) {
  if (loop == nullptr) return;
  Guard([&] {
    ReactorOf(loop)->TimerFired();
    return DLOCK_OK;
  });
}

dlock_status dlock_acquire_async(dlock_client* c, const char* name, const dlock_options* o,
                                 dlock_acquire_fn done, void* arg) {
  return Guard([&] {
    if (done == nullptr) return Invalid("done callback is NULL");
    return StartAcquire(c, name, o, {nullptr, reinterpret_cast<uintptr_t>(arg)},
                        [done, arg](const dlock::Status& result,
                                    const std::shared_ptr<dlock::Client>& client,
                                    std::shared_ptr<dlock::LockState> state) {
                          dlock_lock* lock =
                              state != nullptr ? new dlock_lock{client, std::move(state), {}} : nullptr;
                          last_error = result.message();  // readable from inside done
                          done(static_cast<dlock_status>(result.code()), lock, arg);
                        });
  });
}

dlock_status dlock_acquire_cancel(dlock_client* c, void* arg) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (!c->impl->CancelAcquire({nullptr, reinterpret_cast<uintptr_t>(arg)})) {
      return Invalid("no acquire with that arg is pending");
    }
    return Report(dlock::Status::Ok());
  });
}

dlock_status dlock_release_async(dlock_lock* l, dlock_done_fn done, void* arg) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    return StartRelease(l, [done, arg](const dlock::Status& s) {
      last_error = s.message();
      if (done != nullptr) done(static_cast<dlock_status>(s.code()), arg);
    });
  });
}

dlock_status dlock_extend_async(dlock_lock* l, uint64_t lease_ms, dlock_done_fn done, void* arg) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    return StartExtend(l, lease_ms, [done, arg](const dlock::Status& s) {
      last_error = s.message();
      if (done != nullptr) done(static_cast<dlock_status>(s.code()), arg);
    });
  });
}

namespace {
dlock_status StartSetValue(dlock_lock* l, const void* data, size_t len, dlock::StatusCallback done) {
  dlock::Status s = dlock::CheckValue(data, len);
  if (!s.ok()) return Report(s);
  if (l->client->IsClosed()) return Report(ClosedClient(*l->state));
  l->client->SetValueAsync(l->state, std::string(static_cast<const char*>(data), len), std::move(done));
  return Report(dlock::Status::Ok());
}
}  // namespace

dlock_status dlock_lock_set_value_async(dlock_lock* l, const void* data, size_t len, dlock_done_fn done,
                                        void* arg) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    return StartSetValue(l, data, len, [done, arg](const dlock::Status& s) {
      last_error = s.message();
      if (done != nullptr) done(static_cast<dlock_status>(s.code()), arg);
    });
  });
}

dlock_status dlock_queue_new(dlock_queue** out) {
  return Guard([&] {
    if (out == nullptr) return Invalid("out is NULL");
    std::shared_ptr<dlock::CompletionQueue> impl;
    dlock::Status s = dlock::CompletionQueue::Create(&impl);
    if (!s.ok()) return Report(s);
    *out = new dlock_queue{std::move(impl)};
    return Report(s);
  });
}

void dlock_queue_free(dlock_queue* q) {
  if (q == nullptr) return;
  (void)Guard([&] {
    q->impl->Shutdown();
    delete q;
    return DLOCK_OK;
  });
}

int dlock_queue_fd(const dlock_queue* q) { return q == nullptr ? -1 : q->impl->fd(); }

int dlock_queue_fd_dup(const dlock_queue* q) {
  if (q == nullptr) {
    last_error = "queue is NULL";
    return -1;
  }
  int fd = -1;
  dlock::Status s = q->impl->DupFd(&fd);
  if (!s.ok()) {
    Report(s);
    return -1;
  }
  return fd;
}

int dlock_queue_pop(dlock_queue* q, uint64_t* tag, dlock_status* status, dlock_lock** lock) {
  return dlock_queue_pop_event(q, tag, status, lock, nullptr, nullptr);
}

int dlock_queue_pop_leader(dlock_queue* q, uint64_t* tag, dlock_status* status, dlock_lock** lock,
                           dlock_info** leader) {
  return dlock_queue_pop_event(q, tag, status, lock, leader, nullptr);
}

int dlock_queue_pop_event(dlock_queue* q, uint64_t* tag, dlock_status* status, dlock_lock** lock,
                          dlock_info** leader, dlock_event** event) {
  if (leader != nullptr) *leader = nullptr;
  if (event != nullptr) *event = nullptr;
  if (q == nullptr) {
    last_error = "queue is NULL";
    return -1;
  }
  int kind = DLOCK_QUEUE_EMPTY;
  dlock_status result = Guard([&] {
    dlock::CompletionQueue::Entry entry;
    if (!q->impl->Pop(&entry)) return DLOCK_OK;
    // Everything handed out is made first, then published: out of memory half way would
    // otherwise leave a lock handed out with an error returned.
    std::unique_ptr<dlock_lock> out_lock;
    std::unique_ptr<dlock_info> out_leader;
    std::unique_ptr<dlock_event> out_event;
    try {
      if (lock != nullptr && entry.lock != nullptr) out_lock.reset(new dlock_lock{entry.client, entry.lock, {}});
      if (leader != nullptr && entry.leader != nullptr) {
        out_leader = std::make_unique<dlock_info>();
        out_leader->impl.holders.push_back(*entry.leader);
      } else if (leader != nullptr && entry.info != nullptr) {
        out_leader.reset(new dlock_info{*entry.info});
      }
      if (event != nullptr && entry.event != nullptr) out_event = std::make_unique<dlock_event>();
    } catch (...) {
      dlock::CompletionQueue::GiveBack(entry);  // its lock is released in the background
      throw;
    }
    kind = static_cast<int>(entry.kind);
    if (tag != nullptr) *tag = entry.tag;
    if (lock != nullptr) {
      *lock = out_lock.release();
    } else {
      dlock::CompletionQueue::GiveBack(entry);  // nobody takes it
    }
    if (leader != nullptr) *leader = out_leader.release();
    if (out_event != nullptr) {  // else the copy is dropped with the entry
      out_event->impl = &entry.event->event;
      out_event->owned = std::move(entry.event);
      *event = out_event.release();
    }
    return Report(entry.status);
  });
  if (status != nullptr) *status = result;
  return kind;
}

dlock_status dlock_acquire_queued(dlock_client* c, const char* name, const dlock_options* o,
                                  dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (q == nullptr) return Invalid("queue is NULL");
    std::shared_ptr<dlock::CompletionQueue> queue = q->impl;
    return StartAcquire(c, name, o, {queue.get(), tag},
                        [queue, tag](const dlock::Status& result,
                                     const std::shared_ptr<dlock::Client>& client,
                                     std::shared_ptr<dlock::LockState> state) {
                          queue->Push({dlock::CompletionQueue::Kind::kDone, tag, result,
                                       state != nullptr ? client : nullptr, std::move(state), nullptr,
                                       nullptr, nullptr});
                        });
  });
}

dlock_status dlock_acquire_cancel_queued(dlock_client* c, dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (q == nullptr) return Invalid("queue is NULL");
    if (!c->impl->CancelAcquire({q->impl.get(), tag})) {
      return Invalid("no acquire with that queue and tag is pending");
    }
    return Report(dlock::Status::Ok());
  });
}

dlock_status dlock_release_queued(dlock_lock* l, dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    if (q == nullptr) return Invalid("queue is NULL");
    return StartRelease(l, PushDone(q->impl, tag));
  });
}

dlock_status dlock_extend_queued(dlock_lock* l, uint64_t lease_ms, dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    if (q == nullptr) return Invalid("queue is NULL");
    return StartExtend(l, lease_ms, PushDone(q->impl, tag));
  });
}

dlock_status dlock_lock_set_value_queued(dlock_lock* l, const void* data, size_t len, dlock_queue* q,
                                         uint64_t tag) {
  return Guard([&] {
    if (l == nullptr) return Invalid("lock is NULL");
    if (q == nullptr) return Invalid("queue is NULL");
    return StartSetValue(l, data, len, PushDone(q->impl, tag));
  });
}

dlock_status dlock_options_set_on_lost_queued(dlock_options* o, dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    o->impl.on_lost = nullptr;
    if (q != nullptr) {
      o->impl.on_lost = [queue = q->impl, tag](const std::string& name, uint64_t token,
                                               const std::string& reason) {
        // Named: one options object (one tag) may serve many locks.
        std::string message = "lock '" + name + "' (fencing token " + std::to_string(token) +
                              ") was lost";
        if (!reason.empty()) message += ": " + reason;
        queue->Push({dlock::CompletionQueue::Kind::kLost, tag,
                     dlock::Status::NotHeld(std::move(message)), nullptr, nullptr, nullptr, nullptr,
                     nullptr});
      };
    }
    return Report(dlock::Status::Ok());
  });
}

dlock_status dlock_options_set_on_release_requested_queued(dlock_options* o, dlock_queue* q,
                                                           uint64_t tag) {
  return Guard([&] {
    if (o == nullptr) return Invalid("options is NULL");
    o->impl.on_release_requested = nullptr;
    if (q != nullptr) {
      o->impl.on_release_requested = [queue = q->impl, tag](const std::string&, uint64_t,
                                                            const std::string& reason) {
        // The reason is the entry's message: dlock_last_error() after the pop.
        queue->Push({dlock::CompletionQueue::Kind::kReleaseRequested, tag,
                     dlock::Status(dlock::Code::kOk, reason), nullptr, nullptr, nullptr, nullptr,
                     nullptr});
      };
    }
    return Report(dlock::Status::Ok());
  });
}

namespace {
dlock_status CopyError(dlock_status s, char* buf, size_t len) {
  if (s != DLOCK_OK && buf != nullptr && len > 0) {
    size_t n = std::min(last_error.size(), len - 1);
    std::memcpy(buf, last_error.data(), n);
    buf[n] = '\0';
  }
  return s;
}
}  // namespace

dlock_status dlock_client_open_errbuf(const char* url, dlock_client** out, char* buf, size_t len) {
  return CopyError(dlock_client_open(url, out), buf, len);
}

dlock_status dlock_acquire_errbuf(dlock_client* c, const char* name, const dlock_options* o,
                                  dlock_lock** out, char* buf, size_t len) {
  return CopyError(dlock_acquire(c, name, o, out), buf, len);
}

dlock_status dlock_release_errbuf(dlock_lock* l, char* buf, size_t len) {
  return CopyError(dlock_release(l), buf, len);
}

dlock_status dlock_extend_errbuf(dlock_lock* l, uint64_t lease_ms, char* buf, size_t len) {
  return CopyError(dlock_extend(l, lease_ms), buf, len);
}

dlock_status dlock_inspect_errbuf(dlock_client* c, const char* name, dlock_info** out, char* buf,
                                  size_t len) {
  return CopyError(dlock_inspect(c, name, out), buf, len);
}

dlock_status dlock_backend_prepare(const char* url, int64_t wait_ms) {
  return Guard([&] {
    if (url == nullptr) return Invalid("url is NULL");
    return Report(dlock::PrepareBackend(dlock::Secret(url), wait_ms));
  });
}

uint32_t dlock_client_capabilities(const dlock_client* c) {
  return c == nullptr ? 0 : c->impl->Capabilities();
}

dlock_status dlock_inspect(dlock_client* c, const char* name, dlock_info** out) {
  return ReadInfo(&dlock::Client::Inspect, c, name, out);
}

void dlock_info_free(dlock_info* i) { delete i; }

uint32_t dlock_info_holders(const dlock_info* i) {
  return i == nullptr ? 0 : static_cast<uint32_t>(i->impl.holders.size());
}

namespace {
const dlock::HolderInfo* Holder(const dlock_info* i, uint32_t k) {
  return i == nullptr || k >= i->impl.holders.size() ? nullptr : &i->impl.holders[k];
}
}  // namespace

const char* dlock_info_owner(const dlock_info* i, uint32_t k) {
  const dlock::HolderInfo* h = Holder(i, k);
  return h == nullptr ? nullptr : h->owner.c_str();
}

int64_t dlock_info_remaining_ms(const dlock_info* i, uint32_t k) {
  const dlock::HolderInfo* h = Holder(i, k);
  return h == nullptr ? -1 : h->remaining_ms;
}

uint64_t dlock_info_fencing_token(const dlock_info* i, uint32_t k) {
  const dlock::HolderInfo* h = Holder(i, k);
  return h == nullptr ? 0 : h->fencing_token;
}

dlock_kind dlock_info_kind(const dlock_info* i) {
  return i == nullptr ? DLOCK_EXCLUSIVE : static_cast<dlock_kind>(i->impl.kind);
}

uint32_t dlock_info_permits(const dlock_info* i) { return i == nullptr ? 0 : i->impl.permits; }

uint32_t dlock_info_take(const dlock_info* i, uint32_t k) {
  const dlock::HolderInfo* h = Holder(i, k);
  return h == nullptr ? 0 : h->take;
}

const void* dlock_info_value(const dlock_info* i, uint32_t k, size_t* len) {
  const dlock::HolderInfo* h = Holder(i, k);
  if (len != nullptr) *len = h == nullptr ? 0 : h->value.size();
  return h == nullptr ? nullptr : h->value.c_str();
}

int64_t dlock_info_closed_ms(const dlock_info* i) { return i == nullptr ? 0 : i->impl.closed_ms; }

const char* dlock_info_closed_by(const dlock_info* i) {
  return i == nullptr ? "" : i->impl.closed_by.c_str();
}

dlock_status dlock_break_with(dlock_client* c, const char* name, const char* reason,
                              uint32_t flags, dlock_info** broken) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if ((flags & ~DLOCK_BREAK_NOW) != 0) return Invalid("flags has bits other than DLOCK_BREAK_NOW");
    dlock::Status s = dlock::CheckLockName(name);
    if (!s.ok()) return Report(s);
    auto info = std::make_unique<dlock_info>();
    s = c->impl->Break(name, reason == nullptr ? "" : reason, (flags & DLOCK_BREAK_NOW) != 0,
                       &info->impl);
    info->impl.broken.clear();  // the server's records are for ClassifyRefusal, not for callers
    if (s.ok() && broken != nullptr) *broken = info.release();
    return Report(s);
  });
}

dlock_status dlock_break_with_errbuf(dlock_client* c, const char* name, const char* reason,
                                     uint32_t flags, dlock_info** broken, char* buf, size_t len) {
  return CopyError(dlock_break_with(c, name, reason, flags, broken), buf, len);
}

dlock_status dlock_break(dlock_client* c, const char* name, const char* reason) {
  return dlock_break_with(c, name, reason, 0, nullptr);
}

dlock_status dlock_request_release(dlock_client* c, const char* name, const char* reason) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    dlock::Status s = dlock::CheckLockName(name);
    if (!s.ok()) return Report(s);
    uint32_t asked = 0;
    return Report(c->impl->RequestRelease(name, reason == nullptr ? "" : reason, &asked));
  });
}

dlock_status dlock_request_release_errbuf(dlock_client* c, const char* name, const char* reason,
                                          char* buf, size_t len) {
  return CopyError(dlock_request_release(c, name, reason), buf, len);
}

dlock_status dlock_client_metrics_text(dlock_client* c, char* buf, size_t len, size_t* needed) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (needed == nullptr) return Invalid("needed is NULL");
    if (buf == nullptr && len != 0) return Invalid("buf is NULL but len is not 0");
    const std::string text = c->impl->MetricsText();
    *needed = text.size();
    if (buf == nullptr) return DLOCK_OK;
    if (len <= text.size()) {
      if (len > 0) buf[0] = '\0';
      last_error = "the metrics text needs " + std::to_string(text.size() + 1) +
                   " bytes with its NUL; the buffer has " + std::to_string(len);
      return DLOCK_EINVAL;
    }
    std::memcpy(buf, text.c_str(), text.size() + 1);
    return DLOCK_OK;
  });
}

dlock_status dlock_client_metrics(dlock_client* c, dlock_metrics** out) {
  return Guard([&] {
    if (out == nullptr) return Invalid("out is NULL");
    *out = nullptr;
    if (c == nullptr) return Invalid("client is NULL");
    auto m = std::make_unique<dlock_metrics>();
    c->impl->CollectMetrics(&m->families, &m->samples);
    size_t f = 0;
    for (const dlock::MetricSample& s : m->samples) {
      while (f < m->families.size() && m->families[f].name != s.family) ++f;
      m->family_of.push_back(f < m->families.size() ? f : 0);
    }
    *out = m.release();
    return DLOCK_OK;
  });
}

void dlock_metrics_free(dlock_metrics* m) { delete m; }

size_t dlock_metrics_count(const dlock_metrics* m) { return m == nullptr ? 0 : m->samples.size(); }

namespace {
const dlock::MetricFamily* FamilyOf(const dlock_metrics* m, size_t k) {
  return m == nullptr || k >= m->samples.size() ? nullptr : &m->families[m->family_of[k]];
}
const dlock::MetricSample* SampleOf(const dlock_metrics* m, size_t k) {
  return m == nullptr || k >= m->samples.size() ? nullptr : &m->samples[k];
}
}  // namespace

const char* dlock_metrics_family(const dlock_metrics* m, size_t k) {
  const dlock::MetricFamily* f = FamilyOf(m, k);
  return f == nullptr ? nullptr : f->name.c_str();
}

const char* dlock_metrics_type(const dlock_metrics* m, size_t k) {
  const dlock::MetricFamily* f = FamilyOf(m, k);
  return f == nullptr ? nullptr : f->type.c_str();
}

const char* dlock_metrics_help(const dlock_metrics* m, size_t k) {
  const dlock::MetricFamily* f = FamilyOf(m, k);
  return f == nullptr ? nullptr : f->help.c_str();
}

const char* dlock_metrics_name(const dlock_metrics* m, size_t k) {
  const dlock::MetricSample* s = SampleOf(m, k);
  return s == nullptr ? nullptr : s->name.c_str();
}

const char* dlock_metrics_labels(const dlock_metrics* m, size_t k) {
  const dlock::MetricSample* s = SampleOf(m, k);
  return s == nullptr ? nullptr : s->labels.c_str();
}

double dlock_metrics_value(const dlock_metrics* m, size_t k) {
  const dlock::MetricSample* s = SampleOf(m, k);
  return s == nullptr ? 0 : s->value;
}

dlock_status dlock_client_set_event_hook(dlock_client* c, dlock_event_fn fn, void* arg) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (fn == nullptr) return Invalid("fn is NULL");
    const bool set = c->impl->SetEventHook([fn, arg](const dlock::Event& e) {
      const dlock_event event{&e, nullptr};
      fn(&event, arg);
    });
    return set ? DLOCK_OK : Invalid("this client has an event hook or queue already (one per client)");
  });
}

dlock_status dlock_client_set_event_queue(dlock_client* c, dlock_queue* q, uint64_t tag) {
  return Guard([&] {
    if (c == nullptr) return Invalid("client is NULL");
    if (q == nullptr) return Invalid("queue is NULL");
    const bool set = c->impl->SetEventHook([queue = q->impl, tag](const dlock::Event& e) {
      (void)queue->PushEvent(tag, e);  // never throws, never waits
    });
    return set ? DLOCK_OK : Invalid("this client has an event hook or queue already (one per client)");
  });
}

void dlock_event_free(dlock_event* e) {
  if (e == nullptr || e->owned == nullptr) return;  // not a popped copy (a hook's): not the caller's
  delete e;
}

dlock_event_type dlock_event_type_of(const dlock_event* e) {
  return e == nullptr ? DLOCK_EVENT_ACQUIRING : static_cast<dlock_event_type>(e->impl->type);
}

const char* dlock_event_type_name(dlock_event_type t) {
  switch (t) {
    case DLOCK_EVENT_ACQUIRING: return "acquiring";
    case DLOCK_EVENT_ACQUIRED: return "acquired";
    case DLOCK_EVENT_NOT_ACQUIRED: return "not_acquired";
    case DLOCK_EVENT_RELEASED: return "released";
    case DLOCK_EVENT_RENEWAL_FAILED: return "renewal_failed";
    case DLOCK_EVENT_LOST: return "lost";
  }
  return "unknown";
}

const char* dlock_event_lock_name(const dlock_event* e) { return e == nullptr ? "" : e->impl->name.c_str(); }
uint32_t dlock_event_attempts(const dlock_event* e) { return e == nullptr ? 0 : e->impl->attempts; }
int64_t dlock_event_elapsed_ms(const dlock_event* e) { return e == nullptr ? 0 : e->impl->elapsed_ms; }
uint64_t dlock_event_fencing_token(const dlock_event* e) { return e == nullptr ? 0 : e->impl->fencing_token; }
dlock_status dlock_event_status(const dlock_event* e) {
  return e == nullptr ? DLOCK_OK : static_cast<dlock_status>(e->impl->status);
}
const char* dlock_event_detail(const dlock_event* e) { return e == nullptr ? "" : e->impl->detail.c_str(); }

const char* dlock_lock_lost_cause(const dlock_lock* l) {
  if (l == nullptr) return nullptr;
  try {
    l->lost_cause = l->state->LostCause();
  } catch (...) {
    l->lost_cause.clear();
  }
  return l->lost_cause.empty() ? nullptr : l->lost_cause.c_str();
}

uint64_t dlock_limit_value(dlock_limit which) {
  switch (which) {
    case DLOCK_LIMIT_NAME_BYTES: return dlock::kMaxNameBytes;
    case DLOCK_LIMIT_OWNER_BYTES: return dlock::kMaxOwnerBytes;
    case DLOCK_LIMIT_LEASE_MS: return dlock::kMaxLeaseMs;
    case DLOCK_LIMIT_VALUE_BYTES: return dlock::kMaxValueBytes;
    case DLOCK_LIMIT_REASON_BYTES: return dlock::kMaxReasonBytes;
    case DLOCK_LIMIT_LOCK_DELAY_MS: return dlock::kMaxLockDelayMs;
  }
  return 0;
}

size_t dlock_url_redact(const char* url, char* buf, size_t len) {
  if (url == nullptr) return 0;
  try {
    // The copy of url that RedactUrl reads is wiped when freed: it holds the password.
    std::string shown = dlock::RedactUrl(dlock::Secret(url));
    if (buf != nullptr && len > 0) {
      size_t n = std::min(shown.size(), len - 1);
      std::memcpy(buf, shown.data(), n);
      buf[n] = '\0';
    }
    return shown.size();
  } catch (...) {
    if (buf != nullptr && len > 0) buf[0] = '\0';
    return 0;
  }
}

// Kept for the ABI: dlock_backend_prepare, for dynamodb:// URLs only.
dlock_status dlock_dynamodb_create_table(const char* url, int64_t wait_ms) {
  if (url != nullptr && std::strncmp(url, "dynamodb://", 11) != 0) {
    return Invalid("dlock_dynamodb_create_table needs a dynamodb:// URL (dlock_backend_prepare takes any)");
  }
  return dlock_backend_prepare(url, wait_ms);
}

}  // extern "C"
