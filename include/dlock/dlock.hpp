// dlock.hpp: a header-only C++ layer (C++17 and later) over the C ABI in dlock/dlock.h.
//
//   dlock::Client client("redis://127.0.0.1:6379");
//   {
//     dlock::Lock lock = client.acquire("invoices", dlock::Options()
//                                                       .lease(std::chrono::seconds(30))
//                                                       .wait(std::chrono::seconds(5)));
//     write_with_fence(lock.fencing_token());
//   }  // released here
//
//   if (dlock::Lock lock = client.try_acquire("nightly-report")) { ... }  // empty if held
//
// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------
// Failures throw dlock::Error, a std::runtime_error that carries the dlock_status (code()) and
// the detailed message dlock_last_error() gave right after the failing call (message()); what()
// is "DLOCK_<STATUS>: <message>". The one expected outcome that is not an error has a
// non-throwing form: Client::try_acquire returns an empty Lock (false in a boolean context)
// instead of throwing DLOCK_NOT_ACQUIRED. Everything else -- bad URL or options (DLOCK_EINVAL),
// unreachable server (DLOCK_EIO), a lock found lost at release or extend (DLOCK_NOT_HELD) --
// throws. Destructors never throw: ~Lock releases and ignores the result (call release() first
// to learn it), ~Client closes. Lock::release(std::nothrow) returns the status instead.
// Out-of-memory inside std:: containers may still throw std::bad_alloc.
//
// ---------------------------------------------------------------------------------------------
// Ownership and lifetimes
// ---------------------------------------------------------------------------------------------
// Client and Lock are move-only owners of a dlock_client / dlock_lock. A moved-from object is
// empty; using an empty one throws DLOCK_EINVAL (the queries return 0/false/""). A Lock may
// outlive its Client: the client's close releases what it still holds, and the Lock then only
// frees its handle (its release() throws DLOCK_NOT_HELD).
//
// Options is a plain copyable value; nothing is sent or checked until acquire, so invalid
// values are reported there as DLOCK_EINVAL with the C library's message.
//
// on_lost: each acquired Lock owns its own heap copy of the std::function (shared with the C
// callback's `arg` through a reference count), so the Options and the caller's function may be
// destroyed right after acquire. The copy lives until the Lock is released (release(), its
// destructor, move-assignment over it) and, if the callback is running at that moment, until
// the callback returns -- so a handler may safely signal another thread that then releases or
// destroys the Lock. It runs on the client's background thread; keep it short, do not call
// Client's destructor from it, and do not use the Lock object it belongs to from it while
// another thread may use it too (Lock, like dlock_lock, is for one thread at a time).
// Exceptions thrown by the handler are caught and dropped (none may cross the C ABI); the loss
// is still visible through valid() and the next release()/extend().
//
// Thread safety: as the C ABI. A Client is safe to share between threads; a Lock is not.
// ---------------------------------------------------------------------------------------------
#ifndef DLOCK_DLOCK_HPP_
#define DLOCK_DLOCK_HPP_

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dlock/dlock.h"

namespace dlock {

// The library's version string, "MAJOR.MINOR.PATCH".
inline std::string version() { return dlock_version(); }

// ----- errors -------------------------------------------------------------------------------

class Error : public std::runtime_error {
 public:
  Error(dlock_status code, const std::string& message)
      : std::runtime_error(Prefix(code) + message), code_(code), prefix_len_(Prefix(code).size()) {}

  // Why it failed, as a dlock_status (never DLOCK_OK).
  dlock_status code() const noexcept { return code_; }
  // The detailed message alone (what() without the "DLOCK_<STATUS>: " prefix).
  const char* message() const noexcept { return what() + prefix_len_; }

 private:
  static std::string Prefix(dlock_status code) {
    const char* s = dlock_status_str(code);
    return std::string(s ? s : "DLOCK_UNKNOWN") + ": ";
  }
  dlock_status code_;
  size_t prefix_len_;
};

namespace detail {

// The error for a status just returned by a dlock_* call on this thread.
inline Error LastError(dlock_status s) {
  const char* msg = dlock_last_error();
  return Error(s, msg && *msg ? msg : dlock_status_str(s));
}

inline void Check(dlock_status s) {
  if (s != DLOCK_OK) throw LastError(s);
}

inline void CheckNoNul(const std::string& s, const char* what) {
  if (s.find('\0') != std::string::npos) {
    throw Error(DLOCK_EINVAL, std::string(what) + " contains a NUL byte");
  }
}

inline uint64_t NonNegativeMs(std::chrono::milliseconds d, const char* what) {
  if (d.count() < 0) {
    throw Error(DLOCK_EINVAL, std::string(what) + " must not be negative (got " +
                                  std::to_string(d.count()) + " ms)");
  }
  return static_cast<uint64_t>(d.count());
}

}  // namespace detail

// ----- options ------------------------------------------------------------------------------

// Called when a held lock is lost: (lock name, fencing token of the lost acquisition).
using LostHandler = std::function<void(const std::string& name, uint64_t fencing_token)>;

namespace detail {

// The heap copy of an on_lost handler that one Lock owns; `this` is the C callback's arg.
struct LostHook : std::enable_shared_from_this<LostHook> {
  explicit LostHook(LostHandler f) : fn(std::move(f)) {}

  static void Invoke(const char* name, uint64_t fencing_token, void* arg) noexcept {
    auto* self = static_cast<LostHook*>(arg);
    // Hold a reference for the duration of the call: the handler may cause its Lock to be
    // released (and the Lock's reference dropped) before it returns.
    std::shared_ptr<LostHook> keep = self->weak_from_this().lock();
    if (!keep) return;
    try {
      keep->fn(std::string(name ? name : ""), fencing_token);
    } catch (...) {
      // Nothing may cross the C ABI; the loss stays visible via valid() and release().
    }
  }

  LostHandler fn;
};

struct OptionsDeleter {
  void operator()(dlock_options* o) const noexcept { dlock_options_free(o); }
};
using OptionsPtr = std::unique_ptr<dlock_options, OptionsDeleter>;

}  // namespace detail

// Acquire options, as a fluent builder: Options().lease(30s).wait(5s).owner("billing-7").
// Unset values take the C library's defaults (lease 10 s, heartbeat lease/3, one try, retry
// 50..1000 ms, no owner label, no on_lost handler).
class Options {
 public:
  using ms = std::chrono::milliseconds;

  // How long the server keeps the lock without a renewal; 0 = no expiry (held until released).
  Options& lease(ms d) { lease_ = d; return *this; }
  Options& no_expiry() { return lease(ms(0)); }
  // Background renewal period (must be less than the lease); 0 = no heartbeats.
  Options& heartbeat(ms d) { heartbeat_ = d; return *this; }
  Options& no_heartbeat() { return heartbeat(ms(0)); }
  // How long acquire waits for a held lock; 0 = one try (the default).
  Options& wait(ms d) { wait_ = d.count(); return *this; }
  Options& wait_forever() { wait_ = -1; return *this; }
  Options& no_wait() { wait_ = 0; return *this; }
  // Bounds of the jittered fallback retry while waiting; 1 <= min <= max.
  Options& retry(ms min, ms max) { retry_ = std::make_pair(min, max); return *this; }
  // A label stored with the lock for people and tools ("" clears it).
  Options& owner(std::string label) { owner_ = std::move(label); return *this; }
  // Exclusive (the default) or shared; a backend without DLOCK_CAP_SHARED refuses shared.
  Options& kind(dlock_kind k) { kind_ = k; return *this; }
  Options& shared() { return kind(DLOCK_SHARED); }
  // One of n permits of a counting semaphore; 0 = not a semaphore (DLOCK_CAP_PERMITS).
  Options& permits(uint32_t n) { permits_ = n; return *this; }
  // false: wait unfairly, woken by every release (DLOCK_CAP_FAIR; default true).
  Options& fair(bool f) { fair_ = f; return *this; }
  // Called once, on the client's background thread, if the lock is lost. See the lifetime
  // notes at the top of this file. An empty function clears it.
  Options& on_lost(LostHandler handler) { on_lost_ = std::move(handler); return *this; }

 private:
  friend class Client;

  // A dlock_options for one acquisition (null when everything is default), calling hook.
  detail::OptionsPtr Build(detail::LostHook* hook) const {
    if (!lease_ && !heartbeat_ && !wait_ && !retry_ && !owner_ && !kind_ && !permits_ && !fair_ && !hook) {
      return nullptr;
    }
    detail::OptionsPtr o(dlock_options_new());
    if (!o) throw Error(DLOCK_ENOMEM, "dlock_options_new: out of memory");
    if (lease_) detail::Check(dlock_options_set_lease_ms(o.get(), detail::NonNegativeMs(*lease_, "lease")));
    if (heartbeat_) {
      detail::Check(dlock_options_set_heartbeat_ms(o.get(), detail::NonNegativeMs(*heartbeat_, "heartbeat")));
    }
    if (wait_) detail::Check(dlock_options_set_wait_ms(o.get(), *wait_));
    if (retry_) {
      detail::Check(dlock_options_set_retry_ms(o.get(), detail::NonNegativeMs(retry_->first, "retry min"),
                                               detail::NonNegativeMs(retry_->second, "retry max")));
    }
    if (owner_) {
      detail::CheckNoNul(*owner_, "owner label");
      detail::Check(dlock_options_set_owner(o.get(), owner_->empty() ? nullptr : owner_->c_str()));
    }
    if (kind_) detail::Check(dlock_options_set_kind(o.get(), *kind_));
    if (permits_) detail::Check(dlock_options_set_permits(o.get(), *permits_));
    if (fair_) detail::Check(dlock_options_set_fair(o.get(), *fair_ ? 1 : 0));
    if (hook) detail::Check(dlock_options_set_on_lost(o.get(), &detail::LostHook::Invoke, hook));
    return o;
  }

  std::optional<ms> lease_;
  std::optional<ms> heartbeat_;
  std::optional<int64_t> wait_;
  std::optional<std::pair<ms, ms>> retry_;
  std::optional<std::string> owner_;
  std::optional<dlock_kind> kind_;
  std::optional<uint32_t> permits_;
  std::optional<bool> fair_;
  LostHandler on_lost_;
};

// ----- inspection ---------------------------------------------------------------------------

// Who holds a name (Client::inspect): a snapshot for people and tools.
struct Holder {
  std::string owner;                                   // label, "" if none
  std::optional<std::chrono::milliseconds> remaining;  // empty = no expiry
  uint64_t fencing_token = 0;                          // 0 = unknown
};
struct Info {
  dlock_kind kind = DLOCK_EXCLUSIVE;
  uint32_t permits = 0;         // a semaphore's size; 0 = a lock (or free)
  std::vector<Holder> holders;  // empty = free
  bool is_free() const noexcept { return holders.empty(); }
};

// ----- locks --------------------------------------------------------------------------------

// One held lock (or nothing: default-constructed, moved from, released, or an unsuccessful
// try_acquire). Releases in its destructor, ignoring the result.
class Lock {
 public:
  Lock() noexcept = default;
  ~Lock() { reset(); }

  Lock(Lock&& other) noexcept
      : lock_(std::exchange(other.lock_, nullptr)), hook_(std::move(other.hook_)) {}
  // Releases what this Lock held (ignoring the result), then takes other's lock.
  Lock& operator=(Lock&& other) noexcept {
    if (this != &other) {
      reset();
      lock_ = std::exchange(other.lock_, nullptr);
      hook_ = std::move(other.hook_);
    }
    return *this;
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  // True while this object owns a lock handle (acquired, not yet released or moved from). It
  // does not ask whether the lock is still valid: see valid().
  explicit operator bool() const noexcept { return lock_ != nullptr; }

  // Releases the lock; the Lock is empty afterwards whatever happens. Throws DLOCK_NOT_HELD if
  // it had been lost (expired or taken over), DLOCK_EIO if the server could not be reached,
  // DLOCK_EINVAL if the Lock was already empty.
  void release() {
    if (!lock_) throw Error(DLOCK_EINVAL, "dlock::Lock::release: the Lock is empty");
    std::string message;
    dlock_status s = Release(&message);
    if (s != DLOCK_OK) throw Error(s, message);
  }
  // The same, returning the status instead of throwing (DLOCK_EINVAL if empty).
  dlock_status release(const std::nothrow_t&) noexcept { return lock_ ? Release(nullptr) : DLOCK_EINVAL; }

  // Sets the lease to `lease` from now (0 = no expiry). Throws DLOCK_NOT_HELD if it was lost.
  void extend(std::chrono::milliseconds lease) {
    if (!lock_) throw Error(DLOCK_EINVAL, "dlock::Lock::extend: the Lock is empty");
    detail::Check(dlock_extend(lock_, detail::NonNegativeMs(lease, "lease")));
  }

  // The fencing token of this acquisition; 0 when empty.
  uint64_t fencing_token() const noexcept { return dlock_lock_fencing_token(lock_); }
  // True while the local deadline holds and the lock was not found lost.
  bool valid() const noexcept { return lock_ && dlock_lock_is_valid(lock_) == 1; }
  // Time left before the local deadline: milliseconds::max() for no expiry, 0 when lost/empty.
  std::chrono::milliseconds remaining() const noexcept {
    return lock_ ? std::chrono::milliseconds(dlock_lock_remaining_ms(lock_))
                 : std::chrono::milliseconds(0);
  }
  // How many attempts acquire took (1 = first try); 0 when empty.
  uint32_t attempts() const noexcept { return lock_ ? dlock_lock_attempts(lock_) : 0; }
  // The lock's name; "" when empty.
  std::string name() const {
    const char* n = lock_ ? dlock_lock_name(lock_) : nullptr;
    return n ? n : "";
  }
  // The C handle, still owned by this Lock (do not release it yourself).
  dlock_lock* native_handle() const noexcept { return lock_; }

 private:
  friend class Client;
  Lock(dlock_lock* lock, std::shared_ptr<detail::LostHook> hook) noexcept
      : lock_(lock), hook_(std::move(hook)) {}

  void reset() noexcept {
    if (lock_) (void)Release(nullptr);
  }

  dlock_status Release(std::string* message) noexcept {
    dlock_status s = dlock_release(std::exchange(lock_, nullptr));
    if (s != DLOCK_OK && message) {
      // Read it before the handler's captures are destroyed: they may call into dlock.
      try {
        const char* msg = dlock_last_error();
        *message = msg && *msg ? msg : dlock_status_str(s);
      } catch (...) {
      }
    }
    hook_.reset();  // only after dlock_release: from then on the C side does not call it
    return s;
  }

  dlock_lock* lock_ = nullptr;
  std::shared_ptr<detail::LostHook> hook_;  // this lock's on_lost handler, if any
};

// ----- clients ------------------------------------------------------------------------------

// A connection to one backend (see the URLs in dlock.h). Thread-safe; move-only.
class Client {
 public:
  // Opens the client; throws DLOCK_EINVAL for a bad URL, DLOCK_EIO when the server cannot be
  // reached, DLOCK_EAUTH when credentials are refused.
  explicit Client(const std::string& url) {
    detail::CheckNoNul(url, "URL");
    detail::Check(dlock_client_open(url.c_str(), &client_));
  }
  ~Client() { close(); }

  Client(Client&& other) noexcept : client_(std::exchange(other.client_, nullptr)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      close();
      client_ = std::exchange(other.client_, nullptr);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Acquires `name`, waiting as the options say. Throws Error: DLOCK_NOT_ACQUIRED when someone
  // else holds it and the wait ran out, DLOCK_EINVAL for a bad name or options, ...
  Lock acquire(const std::string& name, const Options& options = Options()) {
    return Acquire(name, options, /*throw_not_acquired=*/true);
  }
  // The same, but returns an empty Lock instead of throwing DLOCK_NOT_ACQUIRED. It still waits
  // as long as options.wait() says (default: one try). Other errors still throw.
  Lock try_acquire(const std::string& name, const Options& options = Options()) {
    return Acquire(name, options, /*throw_not_acquired=*/false);
  }

  // Who holds `name` now (one bounded call). Throws Error on failure.
  Info inspect(const std::string& name) const {
    if (!client_) throw Error(DLOCK_EINVAL, "dlock::Client: the Client is empty (moved from or closed)");
    detail::CheckNoNul(name, "lock name");
    dlock_info* raw = nullptr;
    dlock_status s = dlock_inspect(client_, name.c_str(), &raw);
    if (s != DLOCK_OK) throw detail::LastError(s);
    std::unique_ptr<dlock_info, void (*)(dlock_info*)> owned(raw, &dlock_info_free);
    Info info;
    info.kind = dlock_info_kind(raw);
    info.permits = dlock_info_permits(raw);
    for (uint32_t k = 0; k < dlock_info_holders(raw); ++k) {
      Holder h;
      h.owner = dlock_info_owner(raw, k);
      int64_t left = dlock_info_remaining_ms(raw, k);
      if (left >= 0) h.remaining = std::chrono::milliseconds(left);
      h.fencing_token = dlock_info_fencing_token(raw, k);
      info.holders.push_back(std::move(h));
    }
    return info;
  }
  // What the backend promises: DLOCK_CAP_* bits.
  uint32_t capabilities() const noexcept { return dlock_client_capabilities(client_); }

  // Closes now: stops heartbeats and releases every lock this client still holds (their Lock
  // objects become stale: release() then throws DLOCK_NOT_HELD). The Client is empty after.
  void close() noexcept { dlock_client_close(std::exchange(client_, nullptr)); }

  explicit operator bool() const noexcept { return client_ != nullptr; }
  // The C handle, still owned by this Client.
  dlock_client* native_handle() const noexcept { return client_; }

 private:
  Lock Acquire(const std::string& name, const Options& options, bool throw_not_acquired) {
    if (!client_) throw Error(DLOCK_EINVAL, "dlock::Client: the Client is empty (moved from or closed)");
    detail::CheckNoNul(name, "lock name");
    std::shared_ptr<detail::LostHook> hook;
    if (options.on_lost_) hook = std::make_shared<detail::LostHook>(options.on_lost_);
    detail::OptionsPtr c_options = options.Build(hook.get());
    dlock_lock* lock = nullptr;
    dlock_status s = dlock_acquire(client_, name.c_str(), c_options.get(), &lock);
    if (s == DLOCK_OK) return Lock(lock, std::move(hook));
    if (s == DLOCK_NOT_ACQUIRED && !throw_not_acquired) return Lock();
    throw detail::LastError(s);
  }

  dlock_client* client_ = nullptr;
};

}  // namespace dlock

#endif  // DLOCK_DLOCK_HPP_
