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
//   dlock::Mutex accounts(client, "accounts"), ledger(client, "ledger");
//   {
//     std::scoped_lock both(accounts, ledger);  // any standard lock works: see "Mutexes"
//     write_with_fence(accounts.fencing_token());
//   }
//
//   {
//     dlock::LockGroup both = client.acquire_many({"accounts", "ledger"});  // all or none
//     write_with_fence(both[0].fencing_token(), both[1].fencing_token());
//   }  // both released here: see "Several names at once"
//
//   dlock::Lock leadership = client.campaign("services/api", dlock::Options().value(my_address));
//   std::optional<dlock::Holder> leader = client.leader("services/api");  // from anywhere
//   // leader->value == my_address, leader->fencing_token == leadership.fencing_token() (the term)
//   dlock::Observer watching = client.observe("services/api", [](const std::optional<dlock::Holder>& l) {
//     if (l) route_to(l->value);  // at first, then each change of leader or value; nullopt: nobody
//   });                           // cancelled when `watching` goes out of scope
//
// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------
// Failures throw dlock::Error, a std::system_error whose code() is a std::error_code in
// dlock::category() (value: the dlock_status; `e.code() == DLOCK_NOT_HELD` works, as does
// `std::error_code ec = DLOCK_EIO;`), with status() giving the dlock_status itself and
// message() the detailed message dlock_last_error() gave right after the failing call; what()
// is "DLOCK_<STATUS>: <message>". The category maps the statuses to portable conditions where
// one fits: DLOCK_EINVAL == std::errc::invalid_argument, DLOCK_NOT_ACQUIRED ==
// std::errc::device_or_resource_busy (EBUSY, as pthread_mutex_trylock), DLOCK_NOT_HELD ==
// std::errc::operation_not_permitted (EPERM, as pthread_mutex_unlock), DLOCK_EIO ==
// std::errc::io_error, DLOCK_EAUTH == std::errc::permission_denied, DLOCK_ECANCELLED ==
// std::errc::operation_canceled, DLOCK_ENOMEM == std::errc::not_enough_memory.
//
// The one expected outcome that is not an error has a non-throwing form: Client::try_acquire
// returns an empty Lock (false in a boolean context) instead of throwing DLOCK_NOT_ACQUIRED,
// and Client::try_acquire_many an empty LockGroup.
// Everything else -- bad URL or options (DLOCK_EINVAL), unreachable server (DLOCK_EIO), a lock
// found lost at release or extend (DLOCK_NOT_HELD) -- throws. Destructors never throw: ~Lock
// releases and ignores the result (call release() first to learn it), ~Client closes.
//
// Every call that throws has a noexcept overload taking a trailing std::error_code& (as
// std::filesystem does): it clears the code on success and sets it on failure, and returns an
// empty Lock / Info / false. dlock::last_error() gives the detailed message of this thread's
// last failure reported by this header, either way. Lock::release(std::nothrow) returns the
// status instead. Out-of-memory inside std:: containers may still throw std::bad_alloc (and
// ends the program inside a noexcept overload).
//
// Built without exceptions (-fno-exceptions; or DLOCK_HPP_EXCEPTIONS defined to 0 before the
// include), the throwing overloads are not declared: use the std::error_code ones. Mutex and
// SharedMutex keep lock(), try_lock(), try_lock_for() ... so that the standard's lock types
// still work with them; as std::mutex does in such a build, they end the program (with the
// message on stderr) on an error they cannot return (DLOCK_EIO, DLOCK_EINVAL...). A failure
// to get the lock in time is not an error: try_lock* return false. The two builds may be
// linked into one program: their types live in different inline namespaces.
//
// ---------------------------------------------------------------------------------------------
// Ownership and lifetimes
// ---------------------------------------------------------------------------------------------
// Client, Lock and Observer are move-only owners of a dlock_client / dlock_lock /
// dlock_observer; a LockGroup, of the Locks Client::acquire_many took. A moved-from object is
// empty; using an empty one throws DLOCK_EINVAL (the queries return 0/false/""). A Lock may outlive its Client: the client's close releases what
// it still holds, and the Lock then only frees its handle (its release() throws DLOCK_NOT_HELD).
// So may an Observer: the close ends its observation.
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
// on_release_requested: the same, for Client::request_release. A Lock acquired with
// Options::on_release_requested(handler) owns a heap copy of the handler, and the hold listens
// for requests while it is held: the handler is called, on the client's background thread, with
// the lock's name and the asker's reason ("" for none), each time someone asks the holders to
// let go. It may release its own Lock there (as long as no other thread uses that Lock object
// meanwhile: a Lock is for one thread at a time), signal another thread to, or ignore it. Once
// release() returns it is neither running nor going to run. A Lock acquired without it hears
// nothing. Exceptions it throws are caught and dropped.
//
// Reentrancy (Options::reentrant): a re-entry is a Lock of its own on the hold its context
// already has, and the hold's on_lost and on_release_requested are its first acquire's (a
// re-entry's are not called). Every Lock of the hold shares those, so they live until the last
// of them is released, in whatever order the Locks go: releasing the first Lock while a
// re-entry still holds does not stop its handlers, which may still run.
//
// Thread safety: as the C ABI. A Client is safe to share between threads; a Lock is not.
//
// ---------------------------------------------------------------------------------------------
// Mutexes
// ---------------------------------------------------------------------------------------------
// dlock::Mutex(client, name, options) meets the standard's Lockable and TimedLockable
// requirements, and dlock::SharedMutex SharedTimedLockable, so std::lock_guard,
// std::unique_lock, std::scoped_lock (and std::lock), std::shared_lock and
// std::condition_variable_any work with them:
//   - lock() waits without limit (leases end a crashed holder's hold, so that is no hang);
//   - try_lock() is one try that does not wait (what std::lock's try-and-back-off needs);
//   - try_lock_for(d) / try_lock_until(t) wait at most d / until t: a time point of
//     steady_clock, system_clock or any other clock is turned into a wait on the monotonic
//     clock; one already past is one try; waits beyond the longest the library accepts (ten
//     years) are waits without limit;
//   - unlock() never throws. Its outcome, and that of every other call, is last_status():
//     DLOCK_NOT_HELD when the hold was found lost at unlock (expired or taken over), DLOCK_EIO
//     when the server could not be reached (the lease then ends the hold), DLOCK_EINVAL when
//     there was nothing to unlock. A loss found at unlock is also reported through the
//     options' on_lost handler, on the unlocking thread, unless the handler was already
//     called for that hold by the heartbeats: once per hold, either way.
// The options' wait and kind are set by each call (exclusive, or shared for *_shared); the
// rest (lease, heartbeat, max_hold, min_hold, lock_delay, retry, owner, reentrant, fair, on_lost,
// on_release_requested) apply to every hold (max_hold and min_hold count from each hold's own acquire).
// A reentrant context makes no Mutex recursive (its threads wait for each other here, before
// any acquire); it lets another Mutex of the name on the same Client, or Client::acquire,
// re-enter the hold.
//
// A Mutex is shared by the threads of a process as a std::mutex is: while one thread holds it
// through this object, the others wait here, without asking the server. Shared holds through
// one SharedMutex are one hold on the server, taken by the first local reader and released by
// the last (whose unlock_shared reports a loss); a local thread waiting for the exclusive hold
// keeps new local readers out. Neither is recursive: locking a Mutex again from the thread that
// holds it waits for itself (std::mutex's undefined behaviour). Mutex and SharedMutex are
// neither copyable nor movable; the Client must outlive them and stay where it is (it is held
// by address). Two SharedMutex objects of one name on one Client cannot hold it shared and
// exclusively at once (the exclusive acquire is DLOCK_EINVAL): give each its own Client.
//
// fencing_token() is the token of the current hold (0 while not held), to pass to what the
// holder writes. An error while std::condition_variable_any::wait re-locks ends the program
// (the standard's rule): use wait_for / wait_until with a Mutex whose server may go away.
//
// ---------------------------------------------------------------------------------------------
// Several names at once
// ---------------------------------------------------------------------------------------------
// Client::acquire_many(names, options) takes every name or none (dlock_acquire_many), in
// bytewise order whatever order they are given in (no deadlock between {a, b} and {b, a}),
// giving back what it took when a later name cannot be taken. options apply to each name
// (lease, heartbeats, owner, value, on_lost: a handler shared by the group's Locks, called with
// the name lost); their wait bounds the whole call. No names, or a name given twice, is
// DLOCK_EINVAL. It returns a dlock::LockGroup, which owns one dlock::Lock per name, in the order
// given, each with its own fencing token, and releases them all in its destructor, as
// std::scoped_lock does its mutexes. LockGroup::release() releases them at once
// (dlock_release_many) and throws DLOCK_NOT_HELD when any hold had been lost, naming each lost
// name, after releasing the others. While it waits for a name, the names before it in that
// order are held (std::scoped_lock over Mutexes, std::lock's try-and-back-off, holds none
// while it waits for one).
//
// ---------------------------------------------------------------------------------------------
// Values and leader election
// ---------------------------------------------------------------------------------------------
// A hold may carry a value: up to DLOCK_MAX_VALUE_BYTES (4096) bytes of anything, NUL included
// (a std::string_view, so any bytes pass; a string literal's own NUL terminator does not).
// Options().value(v) stores it with each hold acquired with those options (a Mutex's too);
// Lock::set_value(v) replaces it ("" removes it), after the server checked that this owner
// still holds it: DLOCK_NOT_HELD for a hold lost or taken over, and nothing is written.
// Client::inspect and Client::leader show it as Holder::value. It is shown to everyone who can
// reach the server (keep no secret in it), and gone with the hold. Longer is DLOCK_EINVAL.
//
// Client::campaign(name, options) waits, without limit, until this candidate leads `name`, and
// returns the leadership: a Lock whose fencing_token() is the term, greater than every earlier
// term of the name (hand it to whatever the leader writes, and have that refuse writes below the
// highest term it has seen). The options are an acquire's: lease, heartbeat, max_hold,
// min_hold, lock_delay, owner, reentrant, value, on_lost, fair; their wait is ignored (no limit),
// and a shared kind, permits or a take above 1 are DLOCK_EINVAL (a leadership is exclusive).
// Releasing the Lock resigns: the next candidate leads
// (in arrival order on backends with DLOCK_CAP_FAIR). Client::leader(name) is the leader's
// Holder (value, owner, term as fencing_token, lease left), or std::nullopt when nobody leads;
// DLOCK_EINVAL when the name is held shared or is a semaphore. A lost leadership is reported as
// a lost Lock: on_lost, valid() false, DLOCK_NOT_HELD from set_value, extend and release.
//
// Client::observe(name, handler) tells handler who leads `name` (dlock_observe): first as it
// stands, then at each change of leader or of the leader's value, std::nullopt meaning nobody
// leads. Never an older state after a newer one, terms never decrease, and states that come and
// go faster than the observer reads may merge into the latest. A release or hand-over is seen
// at once on backends with DLOCK_CAP_NOTIFIES, and so is a new value on Redis; other changes (a
// new leader after an expiry, a new value elsewhere) within the poll interval, 500 ms, plus the
// read's own bound. It returns a dlock::Observer, a move-only RAII handle: its destructor,
// cancel() or a move-assignment over it stops the observation (dlock_observer_cancel), and once
// that returns the handler is neither running nor going to run (a call running on the
// background thread is waited for). The handler runs on the client's background thread, like
// on_lost: keep it short, and do not call Client's destructor from it. It may cancel or destroy
// its own Observer (that call then returns at once, and the handler's own heap copy lives until
// the handler returns), as long as no other thread uses that Observer object meanwhile (an
// Observer, like a Lock, is for one thread at a time). The handler is copied to the heap, so
// the caller's function object may go right after observe. Exceptions it throws are caught and
// dropped (none may cross the C ABI): the next change calls it again. An Observer may outlive
// its Client: the client's close ends the observation (no call after close returns), and the
// Observer then only frees its handle.
// ---------------------------------------------------------------------------------------------
#ifndef DLOCK_DLOCK_HPP_
#define DLOCK_DLOCK_HPP_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

#include "dlock/dlock.h"

// 1 when the throwing overloads are declared; by default, when the compiler has exceptions on.
#ifndef DLOCK_HPP_EXCEPTIONS
#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define DLOCK_HPP_EXCEPTIONS 1
#else
#define DLOCK_HPP_EXCEPTIONS 0
#endif
#endif

#if DLOCK_HPP_EXCEPTIONS
#define DLOCK_HPP_TRY_ try
#define DLOCK_HPP_CATCH_ALL_ catch (...)
#else
#define DLOCK_HPP_TRY_ if (true)
#define DLOCK_HPP_CATCH_ALL_ else
#endif

// ----- std::error_code ----------------------------------------------------------------------

namespace dlock {

// The error category of dlock_status values: name() "dlock", message() dlock_status_str.
class ErrorCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "dlock"; }
  std::string message(int value) const override {
    const char* s = dlock_status_str(static_cast<dlock_status>(value));
    return s ? s : "DLOCK_UNKNOWN";
  }
  std::error_condition default_error_condition(int value) const noexcept override {
    switch (value) {
      case DLOCK_NOT_ACQUIRED: return std::make_error_condition(std::errc::device_or_resource_busy);
      case DLOCK_NOT_HELD: return std::make_error_condition(std::errc::operation_not_permitted);
      case DLOCK_EINVAL: return std::make_error_condition(std::errc::invalid_argument);
      case DLOCK_EIO: return std::make_error_condition(std::errc::io_error);
      case DLOCK_EAUTH: return std::make_error_condition(std::errc::permission_denied);
      case DLOCK_ECANCELLED: return std::make_error_condition(std::errc::operation_canceled);
      case DLOCK_ENOMEM: return std::make_error_condition(std::errc::not_enough_memory);
      default: return std::error_condition(value, *this);
    }
  }
};

// The one instance (error_codes compare categories by address).
inline const std::error_category& category() noexcept {
  static const ErrorCategory instance;
  return instance;
}

}  // namespace dlock

// A dlock_status as a std::error_code in dlock::category(). In the global namespace, where ADL
// finds it for dlock_status (a C enum): std::error_code ec = DLOCK_EIO; ec == DLOCK_EIO.
inline std::error_code make_error_code(dlock_status s) noexcept {
  return std::error_code(static_cast<int>(s), dlock::category());
}

namespace std {
template <>
struct is_error_code_enum<dlock_status> : true_type {};
}  // namespace std

namespace dlock {

// The library's version string, "MAJOR.MINOR.PATCH".
inline std::string version() { return dlock_version(); }

// ----- errors -------------------------------------------------------------------------------

// What failed: code() is the dlock_status in dlock::category(); what() "DLOCK_<STATUS>: <message>".
class Error : public std::system_error {
 public:
  Error(dlock_status code, const std::string& message)
      : std::system_error(make_error_code(code), message),
        text_(std::make_shared<const std::string>(Prefix(code) + message)),
        prefix_len_(Prefix(code).size()) {}

  // Why it failed, as a dlock_status (never DLOCK_OK).
  dlock_status status() const noexcept { return static_cast<dlock_status>(code().value()); }
  // The detailed message alone (what() without the "DLOCK_<STATUS>: " prefix).
  const char* message() const noexcept { return text_->c_str() + prefix_len_; }
  const char* what() const noexcept override { return text_->c_str(); }

 private:
  static std::string Prefix(dlock_status code) {
    const char* s = dlock_status_str(code);
    return std::string(s ? s : "DLOCK_UNKNOWN") + ": ";
  }
  std::shared_ptr<const std::string> text_;  // shared: copying an exception must not throw
  size_t prefix_len_;
};

namespace detail_common {

// This thread's last failure message (dlock::last_error()).
inline std::string& LastMessage() noexcept {
  static thread_local std::string message;
  return message;
}

// Records s's message (DLOCK_OK: nothing) and returns s.
inline dlock_status Fail(dlock_status s, const char* message) noexcept {
  if (s != DLOCK_OK) {
    DLOCK_HPP_TRY_ { LastMessage() = message && *message ? message : dlock_status_str(s); }
    DLOCK_HPP_CATCH_ALL_ {}
  }
  return s;
}
inline dlock_status Fail(dlock_status s, const std::string& message) noexcept {
  return Fail(s, message.c_str());
}
// The same, for a status a dlock_* call just returned on this thread.
inline dlock_status FromC(dlock_status s) noexcept {
  return s == DLOCK_OK ? s : Fail(s, dlock_last_error());
}

}  // namespace detail_common

// The detailed message of this thread's last failure reported by a call of this header
// (thrown, returned through a std::error_code, or as a status); "" if there was none.
inline std::string last_error() { return detail_common::LastMessage(); }

// Declarations that differ with and without exceptions live in an inline namespace of their
// own, so that translation units built both ways may be linked together.
#if DLOCK_HPP_EXCEPTIONS
inline namespace with_exceptions {
#else
inline namespace without_exceptions {
#endif

namespace detail {

using detail_common::Fail;
using detail_common::FromC;

// Sets ec from a status (DLOCK_OK clears it); true on DLOCK_OK.
inline bool Set(std::error_code& ec, dlock_status s) noexcept {
  if (s == DLOCK_OK) {
    ec.clear();
  } else {
    ec = make_error_code(s);
  }
  return s == DLOCK_OK;
}

// Reports a failure the calling overload cannot return: throws dlock::Error, or without
// exceptions prints the message and ends the program (as std::mutex::lock does then).
[[noreturn]] inline void Raise(dlock_status s) {
#if DLOCK_HPP_EXCEPTIONS
  throw Error(s, detail_common::LastMessage());
#else
  std::fprintf(stderr, "dlock: %s: %s\n", dlock_status_str(s), detail_common::LastMessage().c_str());
  std::abort();
#endif
}
inline void Check(dlock_status s) {
  if (s != DLOCK_OK) Raise(s);
}

inline dlock_status NoNul(const std::string& s, const char* what) noexcept {
  if (s.find('\0') == std::string::npos) return DLOCK_OK;
  return Fail(DLOCK_EINVAL, std::string(what) + " contains a NUL byte");
}

inline dlock_status NonNegativeMs(std::chrono::milliseconds d, const char* what, uint64_t* out) noexcept {
  if (d.count() < 0) {
    return Fail(DLOCK_EINVAL, std::string(what) + " must not be negative (got " +
                                  std::to_string(d.count()) + " ms)");
  }
  *out = static_cast<uint64_t>(d.count());
  return DLOCK_OK;
}

}  // namespace detail

// ----- options ------------------------------------------------------------------------------

// Called when a held lock is lost: (lock name, fencing token of the lost acquisition).
using LostHandler = std::function<void(const std::string& name, uint64_t fencing_token)>;
// Called when someone asks the holder of a lock to let go (Client::request_release): (lock
// name, the asker's reason; "" for none). Both views are valid during the call only.
using ReleaseRequestedHandler = std::function<void(std::string_view name, std::string_view reason)>;

class Client;

namespace detail {

class MutexCore;

// The heap copy of an on_lost handler that one Lock owns; `this` is the C callback's arg.
struct LostHook : std::enable_shared_from_this<LostHook> {
  explicit LostHook(LostHandler f) : fn(std::move(f)) {}

  static void Invoke(const char* name, uint64_t fencing_token, void* arg) noexcept {
    auto* self = static_cast<LostHook*>(arg);
    // Hold a reference for the duration of the call: the handler may cause its Lock to be
    // released (and the Lock's reference dropped) before it returns.
    std::shared_ptr<LostHook> keep = self->weak_from_this().lock();
    if (!keep) return;
    DLOCK_HPP_TRY_ { keep->fn(std::string(name ? name : ""), fencing_token); }
    DLOCK_HPP_CATCH_ALL_ {
      // Nothing may cross the C ABI; the loss stays visible via valid() and release().
    }
  }

  LostHandler fn;
};

// The heap copy of an on_release_requested handler that one Lock owns, as LostHook.
struct ReleaseRequestHook : std::enable_shared_from_this<ReleaseRequestHook> {
  explicit ReleaseRequestHook(ReleaseRequestedHandler f) : fn(std::move(f)) {}

  static void Invoke(const char* name, const char* reason, void* arg) noexcept {
    auto* self = static_cast<ReleaseRequestHook*>(arg);
    // Held for the call: the handler may release its Lock (dropping the Lock's reference).
    std::shared_ptr<ReleaseRequestHook> keep = self->weak_from_this().lock();
    if (!keep) return;
    DLOCK_HPP_TRY_ {
      keep->fn(std::string_view(name ? name : ""), std::string_view(reason ? reason : ""));
    }
    DLOCK_HPP_CATCH_ALL_ {
      // Nothing may cross the C ABI.
    }
  }

  ReleaseRequestedHandler fn;
};

// The handlers of one hold, as the Locks on it keep them.
struct HoldHooks {
  std::shared_ptr<LostHook> lost;
  std::shared_ptr<ReleaseRequestHook> request;
};

// The handlers of the holds one Client acquired with a reentrant context, by name and fencing
// token. The C side calls the first acquire's for the whole hold, however many re-entries it
// has, until the last of them is released: a re-entry's Lock keeps the first one's handlers
// too (Share), so that they outlive the first Lock if it is released before the others.
class ReentrantHolds {
 public:
  // The handlers of the hold (name, token) if a Lock on it still keeps them (this acquire was
  // a re-entry); otherwise records `mine` (if any) as the hold's, and returns none.
  HoldHooks Share(const std::string& name, uint64_t token, const HoldHooks& mine) {
    std::lock_guard<std::mutex> guard(mu_);
    for (auto it = holds_.begin(); it != holds_.end();) {  // holds whose Locks are all gone
      it = it->second.lost.expired() && it->second.request.expired() ? holds_.erase(it) : std::next(it);
    }
    auto key = std::make_pair(name, token);
    auto it = holds_.find(key);
    if (it != holds_.end()) return HoldHooks{it->second.lost.lock(), it->second.request.lock()};
    if (mine.lost || mine.request) holds_.emplace(std::move(key), Weak{mine.lost, mine.request});
    return HoldHooks{};
  }

 private:
  struct Weak {
    std::weak_ptr<LostHook> lost;
    std::weak_ptr<ReleaseRequestHook> request;
  };
  std::mutex mu_;
  std::map<std::pair<std::string, uint64_t>, Weak> holds_;
};

struct OptionsDeleter {
  void operator()(dlock_options* o) const noexcept { dlock_options_free(o); }
};
using OptionsPtr = std::unique_ptr<dlock_options, OptionsDeleter>;

}  // namespace detail

// Acquire options, as a fluent builder: Options().lease(30s).wait(5s).owner("billing-7").
// Unset values take the C library's defaults (lease 10 s, heartbeat lease/3, one try, retry
// 50..1000 ms, no owner label, no on_lost or on_release_requested handler).
class Options {
 public:
  using ms = std::chrono::milliseconds;

  // How long the server keeps the lock without a renewal; 0 = no expiry (held until released).
  Options& lease(ms d) { lease_ = d; return *this; }
  Options& no_expiry() { return lease(ms(0)); }
  // Background renewal period (must be less than the lease); 0 = no heartbeats.
  Options& heartbeat(ms d) { heartbeat_ = d; return *this; }
  Options& no_heartbeat() { return heartbeat(ms(0)); }
  // The longest the heartbeats keep the lock (a job timeout that holds across machines): once
  // this much has passed since the acquire returned, they renew it no more; the lock ends with
  // its lease (at most max_hold + lease after the acquire) and is reported lost with the cause
  // "max_hold" (on_lost, valid() false, lost_cause() "max_hold: ..."). An explicit extend() is
  // still the caller's to make. 0 = none (the default); at most ten years. With no_expiry()
  // the acquire is DLOCK_EINVAL: nothing would end the hold.
  Options& max_hold(ms d) { max_hold_ = d; return *this; }
  // The shortest the name stays taken (ShedLock's lockAtLeastFor): however the hold ends, by a
  // release or an expiry, the name is not free before the acquire + min_hold on the server's
  // clock. A release before then returns at once and leaves a marker with no owner
  // (Client::inspect: no holder, closed_ms() > 0, closed_by() "min_hold"); waiters wait it out.
  // 0 = none (the default); at most ten years, and at most max_hold when that is set (else the
  // acquire is DLOCK_EINVAL naming both). A backend without DLOCK_CAP_MIN_HOLD refuses the
  // acquire with DLOCK_EINVAL.
  Options& min_hold(ms d) { min_hold_ = d; return *this; }
  // Lock-delay (Chubby, Consul), for resources that cannot check a fencing token: when the hold
  // ends uncleanly (its lease ran out: the holder crashed, hung or lost the server) nobody may
  // acquire the name for this much more (Client::inspect: no holder, closed_by() "lock_delay").
  // A release is a clean end: no delay. 0 = none (the default); at most
  // DLOCK_MAX_LOCK_DELAY_MS (60 s), above is DLOCK_EINVAL. A backend without
  // DLOCK_CAP_LOCK_DELAY refuses the acquire with DLOCK_EINVAL.
  Options& lock_delay(ms d) { lock_delay_ = d; return *this; }
  // How long acquire waits for a held lock; 0 = one try (the default). Mutex sets it per call.
  Options& wait(ms d) { wait_ = d.count(); return *this; }
  Options& wait_forever() { wait_ = -1; return *this; }
  Options& no_wait() { wait_ = 0; return *this; }
  // Bounds of the jittered fallback retry while waiting; 1 <= min <= max.
  Options& retry(ms min, ms max) { retry_ = std::make_pair(min, max); return *this; }
  // A label stored with the lock for people and tools ("" clears it).
  Options& owner(std::string label) { owner_ = std::move(label); return *this; }
  // Reentrancy by a context the caller chooses (a task, a request id; at most 256 bytes): while
  // this Client holds the name under the same context, another acquire of it waits for nothing
  // (even with no_wait()) and returns a Lock of its own on that hold, with the same
  // fencing_token(); only the release of the last of them releases on the server. A re-entry
  // of a hold that was lost or is past its local deadline is DLOCK_NOT_HELD; one asking another
  // kind, permits or take DLOCK_EINVAL. Another context, or none, contends as anyone does (threads
  // sharing a Client too). A context must be unique while its holds live (thread ids are
  // recycled once a thread ends). "" is DLOCK_EINVAL at acquire; no_reentrancy() (the default)
  // turns it off. See "Reentrancy" at the top of this file for the handlers' lifetime.
  Options& reentrant(std::string_view context) { reentrant_ = std::string(context); return *this; }
  Options& no_reentrancy() { reentrant_.reset(); return *this; }
  // Exclusive (the default) or shared; a backend without DLOCK_CAP_SHARED refuses shared.
  Options& kind(dlock_kind k) { kind_ = k; return *this; }
  Options& shared() { return kind(DLOCK_SHARED); }
  // One of n permits of a counting semaphore; 0 = not a semaphore (DLOCK_CAP_PERMITS).
  Options& permits(uint32_t n) { permits_ = n; return *this; }
  // How many of the semaphore's permits one acquire takes at once, all or none (default 1): the
  // hold counts k against the permits until it ends, and its release frees all k (one Lock,
  // fencing token, lease and heartbeat). 0 is DLOCK_EINVAL; more than 1 without permits, or
  // more than the permits, is DLOCK_EINVAL at acquire.
  Options& take(uint32_t k) { take_ = k; return *this; }
  // false: wait unfairly, woken by every release (DLOCK_CAP_FAIR; default true).
  Options& fair(bool f) { fair_ = f; return *this; }
  // A value stored on the server with the hold: any bytes, at most DLOCK_MAX_VALUE_BYTES
  // ("" = none). Shown by Client::inspect and Client::leader; Lock::set_value replaces it. See
  // "Values and leader election" at the top of this file.
  Options& value(std::string_view v) { value_ = std::string(v); return *this; }
  // Called once, on the client's background thread, if the lock is lost. See the lifetime
  // notes at the top of this file. An empty function clears it.
  Options& on_lost(LostHandler handler) { on_lost_ = std::move(handler); return *this; }
  // Listen for release requests (Client::request_release) while the lock is held: handler is
  // called, on the client's background thread, with the lock's name and the asker's reason,
  // each time someone asks; it may release the lock, or not. See the lifetime notes at the top
  // of this file. An empty function clears it. A backend without DLOCK_CAP_RELEASE_REQUEST
  // refuses the acquire with DLOCK_EINVAL. On Redis a holder hears requests from a round trip
  // after its acquire on.
  Options& on_release_requested(ReleaseRequestedHandler handler) {
    on_release_requested_ = std::move(handler);
    return *this;
  }

 private:
  friend class Client;
  friend class detail::MutexCore;

  // A dlock_options for one acquisition in *out (null when everything is default), calling
  // hook on a loss and request_hook on a release request; the status, its message recorded.
  dlock_status Build(detail::LostHook* hook, detail::ReleaseRequestHook* request_hook,
                     detail::OptionsPtr* out) const noexcept {
    out->reset();
    if (!lease_ && !heartbeat_ && !max_hold_ && !min_hold_ && !lock_delay_ && !wait_ && !retry_ && !owner_ &&
        !reentrant_ && !kind_ && !permits_ && !take_ && !fair_ && !value_ && !hook && !request_hook) {
      return DLOCK_OK;
    }
    detail::OptionsPtr o(dlock_options_new());
    if (!o) return detail::Fail(DLOCK_ENOMEM, "dlock_options_new: out of memory");
    dlock_status s = DLOCK_OK;
    uint64_t a = 0, b = 0;
    if (lease_ && (s = detail::NonNegativeMs(*lease_, "lease", &a)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_lease_ms(o.get(), a));
    }
    if (s == DLOCK_OK && heartbeat_ && (s = detail::NonNegativeMs(*heartbeat_, "heartbeat", &a)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_heartbeat_ms(o.get(), a));
    }
    if (s == DLOCK_OK && max_hold_ && (s = detail::NonNegativeMs(*max_hold_, "max_hold", &a)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_max_hold_ms(o.get(), a));
    }
    if (s == DLOCK_OK && min_hold_ && (s = detail::NonNegativeMs(*min_hold_, "min_hold", &a)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_min_hold_ms(o.get(), a));
    }
    if (s == DLOCK_OK && lock_delay_ && (s = detail::NonNegativeMs(*lock_delay_, "lock_delay", &a)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_lock_delay_ms(o.get(), a));
    }
    if (s == DLOCK_OK && wait_) s = detail::FromC(dlock_options_set_wait_ms(o.get(), *wait_));
    if (s == DLOCK_OK && retry_ && (s = detail::NonNegativeMs(retry_->first, "retry min", &a)) == DLOCK_OK &&
        (s = detail::NonNegativeMs(retry_->second, "retry max", &b)) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_retry_ms(o.get(), a, b));
    }
    if (s == DLOCK_OK && owner_ && (s = detail::NoNul(*owner_, "owner label")) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_owner(o.get(), owner_->empty() ? nullptr : owner_->c_str()));
    }
    if (s == DLOCK_OK && reentrant_ && (s = detail::NoNul(*reentrant_, "reentrant context")) == DLOCK_OK) {
      s = detail::FromC(dlock_options_set_reentrant(o.get(), reentrant_->c_str()));
    }
    if (s == DLOCK_OK && kind_) s = detail::FromC(dlock_options_set_kind(o.get(), *kind_));
    if (s == DLOCK_OK && permits_) s = detail::FromC(dlock_options_set_permits(o.get(), *permits_));
    if (s == DLOCK_OK && take_) s = detail::FromC(dlock_options_set_take(o.get(), *take_));
    if (s == DLOCK_OK && fair_) s = detail::FromC(dlock_options_set_fair(o.get(), *fair_ ? 1 : 0));
    if (s == DLOCK_OK && value_) s = detail::FromC(dlock_options_set_value(o.get(), value_->data(), value_->size()));
    if (s == DLOCK_OK && hook) {
      s = detail::FromC(dlock_options_set_on_lost(o.get(), &detail::LostHook::Invoke, hook));
    }
    if (s == DLOCK_OK && request_hook) {
      s = detail::FromC(dlock_options_set_on_release_requested(
          o.get(), &detail::ReleaseRequestHook::Invoke, request_hook));
    }
    if (s == DLOCK_OK) *out = std::move(o);
    return s;
  }

  std::optional<ms> lease_;
  std::optional<ms> heartbeat_;
  std::optional<ms> max_hold_;
  std::optional<ms> min_hold_;
  std::optional<ms> lock_delay_;
  std::optional<int64_t> wait_;
  std::optional<std::pair<ms, ms>> retry_;
  std::optional<std::string> owner_;
  std::optional<std::string> reentrant_;
  std::optional<dlock_kind> kind_;
  std::optional<uint32_t> permits_;
  std::optional<uint32_t> take_;
  std::optional<bool> fair_;
  std::optional<std::string> value_;
  LostHandler on_lost_;
  ReleaseRequestedHandler on_release_requested_;
};

// ----- inspection ---------------------------------------------------------------------------

// Who holds a name (Client::inspect), or leads it (Client::leader): a snapshot for people and
// tools.
struct Holder {
  std::string owner;                                   // label, "" if none
  std::optional<std::chrono::milliseconds> remaining;  // empty = no expiry
  uint64_t fencing_token = 0;                          // 0 = unknown; a leader's term
  std::string value;                                   // stored with the hold (any bytes), "" if none
};
struct Info {
  dlock_kind kind = DLOCK_EXCLUSIVE;
  uint32_t permits = 0;         // a semaphore's size; 0 = a lock (or free)
  std::vector<Holder> holders;  // empty = free (Client::break_lock: the holds it broke)
  // While a broken lock's name stays closed (no holder, and nobody may take it until the
  // broken leases would have ended): for how much longer; 0 = not closed (a name with holders
  // never is). From Client::break_lock: how long the break left it closed (0 with now).
  std::chrono::milliseconds closed_for{0};
  // What closed it: "broken" (Client::break_lock); "" when it is not closed.
  std::string closed_because;
  bool is_free() const noexcept { return holders.empty(); }
  // closed_for in ms (dlock_info_closed_ms), and closed_because (dlock_info_closed_by).
  int64_t closed_ms() const noexcept { return closed_for.count(); }
  const std::string& closed_by() const noexcept { return closed_because; }
};

namespace detail {

// Holder k of a dlock_info snapshot (k < dlock_info_holders).
inline Holder HolderAt(const dlock_info* raw, uint32_t k) {
  Holder h;
  const char* owner = dlock_info_owner(raw, k);
  h.owner = owner != nullptr ? owner : "";
  int64_t left = dlock_info_remaining_ms(raw, k);
  if (left >= 0) h.remaining = std::chrono::milliseconds(left);
  h.fencing_token = dlock_info_fencing_token(raw, k);
  size_t len = 0;
  const void* value = dlock_info_value(raw, k, &len);
  if (value != nullptr) h.value.assign(static_cast<const char*>(value), len);
  return h;
}

// A dlock_info snapshot into *info (dlock_inspect's, dlock_leader's, dlock_break_with's).
inline void FillInfo(const dlock_info* raw, Info* info) {
  info->kind = dlock_info_kind(raw);
  info->permits = dlock_info_permits(raw);
  for (uint32_t k = 0; k < dlock_info_holders(raw); ++k) info->holders.push_back(HolderAt(raw, k));
  int64_t closed = dlock_info_closed_ms(raw);
  info->closed_for = std::chrono::milliseconds(closed > 0 ? closed : 0);
  const char* by = dlock_info_closed_by(raw);
  info->closed_because = by != nullptr ? by : "";
}

}  // namespace detail

// ----- observing a leadership ---------------------------------------------------------------

// Told who leads a name (Client::observe): its leader, or std::nullopt when nobody leads. Runs
// on the client's background thread.
using LeaderHandler = std::function<void(const std::optional<Holder>& leader)>;

namespace detail {

// The heap copy of an observe handler that one Observer owns; `this` is the C callback's arg.
struct ObserveHook : std::enable_shared_from_this<ObserveHook> {
  explicit ObserveHook(LeaderHandler f) : fn(std::move(f)) {}

  static void Invoke(const char* /*name*/, const dlock_info* leader, void* arg) noexcept {
    auto* self = static_cast<ObserveHook*>(arg);
    // Hold a reference for the duration of the call: the handler may cancel (or destroy) its
    // Observer, which drops the Observer's reference, before it returns. No other thread drops
    // it meanwhile: dlock_observer_cancel waits for a running call.
    std::shared_ptr<ObserveHook> keep = self->weak_from_this().lock();
    if (!keep) return;
    DLOCK_HPP_TRY_ {
      std::optional<Holder> holder;
      if (leader != nullptr && dlock_info_holders(leader) > 0) holder = HolderAt(leader, 0);
      keep->fn(holder);
    }
    DLOCK_HPP_CATCH_ALL_ {
      // Nothing may cross the C ABI; the next change calls the handler again.
    }
  }

  LeaderHandler fn;
};

}  // namespace detail

// An observation of who leads a name (Client::observe), or nothing (default-constructed, moved
// from, cancelled). Cancels in its destructor. See "Values and leader election" at the top of
// this file.
class Observer {
 public:
  Observer() noexcept = default;
  ~Observer() { cancel(); }

  Observer(Observer&& other) noexcept
      : observer_(std::exchange(other.observer_, nullptr)), hook_(std::move(other.hook_)) {}
  // Cancels what this Observer observed, then takes other's observation.
  Observer& operator=(Observer&& other) noexcept {
    if (this != &other) {
      cancel();
      observer_ = std::exchange(other.observer_, nullptr);
      hook_ = std::move(other.hook_);
    }
    return *this;
  }
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // Stops the observation: once it returns the handler is neither running nor going to run
  // (one running on the client's thread is waited for; called from inside the handler, it
  // returns at once and that call finishes). The Observer is empty afterwards. Idempotent.
  void cancel() noexcept {
    dlock_observer_cancel(std::exchange(observer_, nullptr));
    hook_.reset();  // only after dlock_observer_cancel: from then on the C side does not call it
  }

  // True while this object observes (not yet cancelled or moved from); it stays true after the
  // client's close, which ends the observation (cancel() still frees the handle).
  explicit operator bool() const noexcept { return observer_ != nullptr; }
  // The C handle, still owned by this Observer (do not cancel it yourself).
  dlock_observer* native_handle() const noexcept { return observer_; }

 private:
  friend class Client;
  Observer(dlock_observer* observer, std::shared_ptr<detail::ObserveHook> hook) noexcept
      : observer_(observer), hook_(std::move(hook)) {}

  dlock_observer* observer_ = nullptr;
  std::shared_ptr<detail::ObserveHook> hook_;  // the handler, shared with a running call
};

// ----- locks --------------------------------------------------------------------------------

// One held lock (or nothing: default-constructed, moved from, released, or an unsuccessful
// try_acquire). Releases in its destructor, ignoring the result.
class Lock {
 public:
  Lock() noexcept = default;
  ~Lock() { reset(); }

  Lock(Lock&& other) noexcept
      : lock_(std::exchange(other.lock_, nullptr)),
        hook_(std::move(other.hook_)),
        request_hook_(std::move(other.request_hook_)),
        hold_hooks_(std::move(other.hold_hooks_)) {}
  // Releases what this Lock held (ignoring the result), then takes other's lock.
  Lock& operator=(Lock&& other) noexcept {
    if (this != &other) {
      reset();
      lock_ = std::exchange(other.lock_, nullptr);
      hook_ = std::move(other.hook_);
      request_hook_ = std::move(other.request_hook_);
      hold_hooks_ = std::move(other.hold_hooks_);
    }
    return *this;
  }
  Lock(const Lock&) = delete;
  Lock& operator=(const Lock&) = delete;

  // True while this object owns a lock handle (acquired, not yet released or moved from). It
  // does not ask whether the lock is still valid: see valid().
  explicit operator bool() const noexcept { return lock_ != nullptr; }

#if DLOCK_HPP_EXCEPTIONS
  // Releases the lock; the Lock is empty afterwards whatever happens. Throws DLOCK_NOT_HELD if
  // it had been lost (expired or taken over), DLOCK_EIO if the server could not be reached,
  // DLOCK_EINVAL if the Lock was already empty.
  void release() { detail::Check(Release()); }
  // Sets the lease to `lease` from now (0 = no expiry). Throws DLOCK_NOT_HELD if it was lost.
  void extend(std::chrono::milliseconds lease) { detail::Check(Extend(lease)); }
  // Replaces the value stored with the hold ("" removes it; any bytes, at most
  // DLOCK_MAX_VALUE_BYTES), if this owner still holds it: one round trip. Throws DLOCK_NOT_HELD
  // if it was lost or taken over (nothing is written), DLOCK_EINVAL if too long or the Lock is
  // empty.
  void set_value(std::string_view value) { detail::Check(SetValue(value)); }
#endif
  // The same, setting ec instead of throwing.
  void release(std::error_code& ec) noexcept { detail::Set(ec, Release()); }
  void extend(std::chrono::milliseconds lease, std::error_code& ec) noexcept {
    detail::Set(ec, Extend(lease));
  }
  void set_value(std::string_view value, std::error_code& ec) noexcept { detail::Set(ec, SetValue(value)); }
  // Releases, returning the status instead of throwing (DLOCK_EINVAL if empty).
  dlock_status release(const std::nothrow_t&) noexcept { return Release(); }

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
  // Why the lock is no longer valid: "" while it is held and valid (or empty), else "CAUSE:
  // details" with CAUSE deleted, taken_over, refused, expired, max_hold or broken (an operator's
  // Client::break_lock; "broken: an operator broke the lock: REASON") (docs/metrics.md).
  // Read it before release().
  std::string lost_cause() const {
    const char* c = lock_ ? dlock_lock_lost_cause(lock_) : nullptr;
    return c ? c : "";
  }
  // The lock's name; "" when empty.
  std::string name() const {
    const char* n = lock_ ? dlock_lock_name(lock_) : nullptr;
    return n ? n : "";
  }
  // The C handle, still owned by this Lock (do not release it yourself).
  dlock_lock* native_handle() const noexcept { return lock_; }

 private:
  friend class Client;
  friend class LockGroup;
  Lock(dlock_lock* lock, std::shared_ptr<detail::LostHook> hook,
       std::shared_ptr<detail::ReleaseRequestHook> request_hook, detail::HoldHooks hold_hooks = {}) noexcept
      : lock_(lock),
        hook_(std::move(hook)),
        request_hook_(std::move(request_hook)),
        hold_hooks_(std::move(hold_hooks)) {}

  void reset() noexcept {
    if (lock_) (void)Release();
  }

  dlock_status Release() noexcept {
    if (!lock_) return detail::Fail(DLOCK_EINVAL, "dlock::Lock::release: the Lock is empty");
    // Its message is read before the handler's captures are destroyed: they may call into dlock.
    dlock_status s = detail::FromC(dlock_release(std::exchange(lock_, nullptr)));
    hook_.reset();  // only after dlock_release: from then on the C side does not call it
    request_hook_.reset();
    hold_hooks_ = detail::HoldHooks{};  // a re-entry's: the last release waited for them
    return s;
  }

  dlock_status Extend(std::chrono::milliseconds lease) noexcept {
    if (!lock_) return detail::Fail(DLOCK_EINVAL, "dlock::Lock::extend: the Lock is empty");
    uint64_t ms = 0;
    dlock_status s = detail::NonNegativeMs(lease, "lease", &ms);
    return s == DLOCK_OK ? detail::FromC(dlock_extend(lock_, ms)) : s;
  }

  dlock_status SetValue(std::string_view value) noexcept {
    if (!lock_) return detail::Fail(DLOCK_EINVAL, "dlock::Lock::set_value: the Lock is empty");
    return detail::FromC(dlock_lock_set_value(lock_, value.data(), value.size()));
  }

  dlock_lock* lock_ = nullptr;
  std::shared_ptr<detail::LostHook> hook_;  // this lock's on_lost handler, if any
  std::shared_ptr<detail::ReleaseRequestHook> request_hook_;  // its on_release_requested, if any
  detail::HoldHooks hold_hooks_;  // a re-entry's: the handlers of its hold's first acquire
};

// ----- several names at once ----------------------------------------------------------------

// The Locks of several names taken all or none (Client::acquire_many), or nothing
// (default-constructed, moved from, released, or an unsuccessful try_acquire_many). Like a
// std::scoped_lock over several mutexes, it releases them all in its destructor, ignoring the
// result (call release() first to learn it); unlike it, it is movable (not copyable).
// (*this)[k] is the hold of names[k], as acquire_many was given them: a dlock::Lock of its own,
// with its own fencing token, lease, heartbeats and on_lost report (a loss of one name is
// reported as the loss of that name; the others stay held). One may be extended or given a
// value alone, and even released or moved out alone: the group's release() skips the Locks
// left empty.
//
//   dlock::LockGroup both = client.acquire_many({"accounts/alice", "accounts/bob"});
//   transfer(both[0].fencing_token(), both[1].fencing_token());
//   both.release();  // or let the destructor do it
class LockGroup {
 public:
  using iterator = std::vector<Lock>::iterator;
  using const_iterator = std::vector<Lock>::const_iterator;

  LockGroup() noexcept = default;
  ~LockGroup() { reset(); }

  LockGroup(LockGroup&& other) noexcept : locks_(std::exchange(other.locks_, std::vector<Lock>())) {}
  // Releases what this group held (ignoring the result), then takes other's Locks.
  LockGroup& operator=(LockGroup&& other) noexcept {
    if (this != &other) {
      reset();
      locks_ = std::exchange(other.locks_, std::vector<Lock>());
    }
    return *this;
  }
  LockGroup(const LockGroup&) = delete;
  LockGroup& operator=(const LockGroup&) = delete;

  // True while one of its Locks owns a lock handle (acquired, not yet released or moved from).
  // It does not ask whether they are still valid: see each Lock's valid().
  explicit operator bool() const noexcept {
    for (const Lock& l : locks_) {
      if (l) return true;
    }
    return false;
  }

#if DLOCK_HPP_EXCEPTIONS
  // Releases every Lock of the group that still holds (dlock_release_many, each through its own
  // client); the group is empty afterwards whatever happens. Throws DLOCK_NOT_HELD when some
  // hold had been lost (expired, taken over, broken, or released by its client's close), its
  // message naming each lost one ("lock 'a' was lost: ..."; "; " between them), and the others
  // are released all the same; the first other error when there was one (DLOCK_EIO...), its
  // message naming every failure; DLOCK_EINVAL when no Lock of the group held anything.
  void release() { detail::Check(Release()); }
#endif
  // The same, setting ec instead of throwing (dlock::last_error() names the lost names).
  void release(std::error_code& ec) noexcept { detail::Set(ec, Release()); }
  // Releases, returning the status instead of throwing (DLOCK_EINVAL if it held nothing).
  dlock_status release(const std::nothrow_t&) noexcept { return Release(); }

  // How many Locks: as many as names were given to acquire_many; 0 when empty.
  size_t size() const noexcept { return locks_.size(); }
  bool empty() const noexcept { return locks_.empty(); }
  // The Lock of names[k] (k < size()).
  Lock& operator[](size_t k) noexcept { return locks_[k]; }
  const Lock& operator[](size_t k) const noexcept { return locks_[k]; }
  iterator begin() noexcept { return locks_.begin(); }
  iterator end() noexcept { return locks_.end(); }
  const_iterator begin() const noexcept { return locks_.begin(); }
  const_iterator end() const noexcept { return locks_.end(); }

 private:
  friend class Client;
  explicit LockGroup(std::vector<Lock> locks) noexcept : locks_(std::move(locks)) {}

  void reset() noexcept {
    if (*this) (void)Release();
    locks_.clear();
  }

  dlock_status Release() noexcept {
    std::vector<Lock> locks = std::exchange(locks_, std::vector<Lock>());
    std::vector<dlock_lock*> handles;
    handles.reserve(locks.size());
    for (Lock& l : locks) {
      if (l.lock_) handles.push_back(std::exchange(l.lock_, nullptr));
    }
    if (handles.empty()) return detail::Fail(DLOCK_EINVAL, "dlock::LockGroup::release: the LockGroup holds no lock");
    // Its message is read before the Locks (and their handlers' captures) are destroyed, which
    // happens only after dlock_release_many: from then on the C side calls none of them.
    return detail::FromC(dlock_release_many(handles.data(), handles.size()));
  }

  std::vector<Lock> locks_;
};

// ----- clients ------------------------------------------------------------------------------

// A connection to one backend (see the URLs in dlock.h). Thread-safe; move-only.
class Client {
 public:
#if DLOCK_HPP_EXCEPTIONS
  // Opens the client; throws DLOCK_EINVAL for a bad URL, DLOCK_EIO when the server cannot be
  // reached, DLOCK_EAUTH when credentials are refused.
  explicit Client(const std::string& url) { detail::Check(Open(url)); }
#endif
  // The same, setting ec instead of throwing; the Client is empty if it failed.
  Client(const std::string& url, std::error_code& ec) noexcept { detail::Set(ec, Open(url)); }
  ~Client() { close(); }

  Client(Client&& other) noexcept
      : client_(std::exchange(other.client_, nullptr)), reentrant_holds_(std::move(other.reentrant_holds_)) {}
  Client& operator=(Client&& other) noexcept {
    if (this != &other) {
      close();
      client_ = std::exchange(other.client_, nullptr);
      reentrant_holds_ = std::move(other.reentrant_holds_);
    }
    return *this;
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

#if DLOCK_HPP_EXCEPTIONS
  // Acquires `name`, waiting as the options say. Throws Error: DLOCK_NOT_ACQUIRED when someone
  // else holds it and the wait ran out, DLOCK_EINVAL for a bad name or options, ...
  Lock acquire(const std::string& name, const Options& options = Options()) {
    Lock lock;
    detail::Check(Acquire(name, options, &lock));
    return lock;
  }
  // The same, but returns an empty Lock instead of throwing DLOCK_NOT_ACQUIRED. It still waits
  // as long as options.wait() says (default: one try). Other errors still throw.
  Lock try_acquire(const std::string& name, const Options& options = Options()) {
    Lock lock;
    dlock_status s = Acquire(name, options, &lock);
    if (s != DLOCK_NOT_ACQUIRED) detail::Check(s);
    return lock;
  }
  // Acquires every name, all or none (dlock_acquire_many): a transfer between two accounts, a
  // job that touches two shards. Returns a LockGroup whose [k] is the hold of names[k], each
  // with its own fencing token. The names are taken in one fixed order (bytewise), whatever
  // order they are given in, so that callers asking for {a, b} and {b, a} at once never wait
  // on each other; what was taken is given back when a later name cannot be. options apply to each name; their wait bounds the whole call. Throws Error:
  // DLOCK_NOT_ACQUIRED when a name is held elsewhere and the wait ran out (nothing is held
  // then; the message names it), DLOCK_EINVAL for no names, a name given twice, a bad name or
  // options, ...
  LockGroup acquire_many(const std::vector<std::string>& names, const Options& options = Options()) {
    LockGroup group;
    detail::Check(AcquireMany(names, options, &group));
    return group;
  }
  // The same, but returns an empty LockGroup instead of throwing DLOCK_NOT_ACQUIRED. It still
  // waits as long as options.wait() says (default: one try). Other errors still throw.
  LockGroup try_acquire_many(const std::vector<std::string>& names, const Options& options = Options()) {
    LockGroup group;
    dlock_status s = AcquireMany(names, options, &group);
    if (s != DLOCK_NOT_ACQUIRED) detail::Check(s);
    return group;
  }
  // This client's metrics in the Prometheus text format (docs/metrics.md). No round trip.
  std::string metrics_text() const {
    size_t needed = 0;
    for (int tries = 0; tries < 4; ++tries) {
      if (dlock_client_metrics_text(client_, nullptr, 0, &needed) != DLOCK_OK) return "";
      std::string text(needed + 256, '\0');  // room for what is counted meanwhile
      if (dlock_client_metrics_text(client_, text.data(), text.size(), &needed) == DLOCK_OK) {
        text.resize(needed);
        return text;
      }
    }
    return "";
  }
  // Who holds `name` now (one bounded call). Throws Error on failure.
  Info inspect(const std::string& name) const {
    Info info;
    detail::Check(Inspect(name, &info));
    return info;
  }
  // An operator's takeover of `name` (dlock_break_with; `break` is a keyword): deletes every
  // hold of it (exclusive, shared or semaphore), never its fencing counter, so the next token
  // is greater than every broken holder's. Each broken holder is reported lost with the cause
  // "broken" (on_lost; lost_cause() "broken: an operator broke the lock: REASON") at its next
  // renewal, so within its heartbeat period; one without heartbeats at its next extend() or
  // release(). reason: the operator's words for the holders, at most DLOCK_MAX_REASON_BYTES; ""
  // for none. now false: the name stays closed, with no holder, until the broken leases would
  // have ended on the server (inspect() shows closed_ms() > 0, closed_by() "broken"); true:
  // free at once, for a resource that checks fencing tokens. Returns what it broke: holders
  // (owner, fencing_token, what was left of each lease; empty when nobody held it) and
  // closed_ms(), how long the name now stays closed. One bounded round trip. Throws Error:
  // DLOCK_EINVAL for a bad name or reason, or on a backend without DLOCK_CAP_BREAK.
  Info break_lock(const std::string& name, const std::string& reason = "", bool now = false) {
    Info info;
    detail::Check(Break(name, reason, now, &info));
    return info;
  }
  // Asks every current holder of `name` to let go (dlock_request_release): a cooperative
  // takeover, short of break_lock. Nothing is taken: a holder acquired with
  // Options::on_release_requested hears it (its handler gets the reason) and may release, or
  // not; holders acquired without it hear nothing. reason: at most DLOCK_MAX_REASON_BYTES; ""
  // for none. Returns true when the name had holders to ask, false when nobody holds it
  // (nothing is sent). true says the request went out, not that it was heard: on Redis a
  // holder hears it once its subscription is live, a round trip after its acquire (a request
  // sent before is missed: ask again). One bounded round trip. Throws Error: DLOCK_EINVAL for
  // a bad name or reason, or on a backend without DLOCK_CAP_RELEASE_REQUEST.
  bool request_release(const std::string& name, const std::string& reason = "") {
    bool asked = false;
    detail::Check(RequestRelease(name, reason, &asked));
    return asked;
  }
  // Waits, without limit, until this candidate leads `name`; returns the leadership, whose
  // fencing_token() is the term (see "Values and leader election"). The options' wait is
  // ignored; a shared kind, permits or a take above 1 throw DLOCK_EINVAL. Throws Error on
  // failure.
  Lock campaign(const std::string& name, const Options& options = Options()) {
    Lock lock;
    detail::Check(Acquire(name, options, &lock, &dlock_campaign));
    return lock;
  }
  // The current leader of `name`, or std::nullopt when nobody leads (one bounded call). Throws
  // DLOCK_EINVAL when the name is held shared or is a semaphore, and Error on other failures.
  std::optional<Holder> leader(const std::string& name) const {
    std::optional<Holder> holder;
    detail::Check(Leader(name, &holder));
    return holder;
  }
  // Calls handler with who leads `name` (std::nullopt: nobody), first as it stands, then at
  // each change of leader or value, on the client's background thread, until the returned
  // Observer is cancelled or destroyed (see "Values and leader election"). The first call
  // comes later, never from inside observe. Throws DLOCK_EINVAL for a bad name, an empty
  // handler or an empty Client.
  [[nodiscard]] Observer observe(const std::string& name, LeaderHandler handler) {
    Observer observer;
    detail::Check(Observe(name, std::move(handler), &observer));
    return observer;
  }
#endif
  // The same, setting ec instead of throwing: an empty Lock / Info on failure. acquire sets
  // DLOCK_NOT_ACQUIRED when the wait ran out; try_acquire clears ec then.
  Lock acquire(const std::string& name, const Options& options, std::error_code& ec) noexcept {
    Lock lock;
    detail::Set(ec, Acquire(name, options, &lock));
    return lock;
  }
  Lock acquire(const std::string& name, std::error_code& ec) noexcept { return acquire(name, Options(), ec); }
  Lock try_acquire(const std::string& name, const Options& options, std::error_code& ec) noexcept {
    Lock lock;
    dlock_status s = Acquire(name, options, &lock);
    detail::Set(ec, s == DLOCK_NOT_ACQUIRED ? DLOCK_OK : s);
    return lock;
  }
  Lock try_acquire(const std::string& name, std::error_code& ec) noexcept {
    return try_acquire(name, Options(), ec);
  }
  // acquire_many / try_acquire_many, setting ec instead of throwing: an empty LockGroup when
  // not acquired (ec DLOCK_NOT_ACQUIRED for acquire_many, clear for try_acquire_many) or on
  // failure.
  LockGroup acquire_many(const std::vector<std::string>& names, const Options& options, std::error_code& ec) noexcept {
    LockGroup group;
    detail::Set(ec, AcquireMany(names, options, &group));
    return group;
  }
  LockGroup acquire_many(const std::vector<std::string>& names, std::error_code& ec) noexcept {
    return acquire_many(names, Options(), ec);
  }
  LockGroup try_acquire_many(const std::vector<std::string>& names, const Options& options,
                             std::error_code& ec) noexcept {
    LockGroup group;
    dlock_status s = AcquireMany(names, options, &group);
    detail::Set(ec, s == DLOCK_NOT_ACQUIRED ? DLOCK_OK : s);
    return group;
  }
  LockGroup try_acquire_many(const std::vector<std::string>& names, std::error_code& ec) noexcept {
    return try_acquire_many(names, Options(), ec);
  }
  Info inspect(const std::string& name, std::error_code& ec) const noexcept {
    Info info;
    if (!detail::Set(ec, Inspect(name, &info))) info = Info();
    return info;
  }
  Info break_lock(const std::string& name, const std::string& reason, bool now, std::error_code& ec) noexcept {
    Info info;
    if (!detail::Set(ec, Break(name, reason, now, &info))) info = Info();
    return info;
  }
  Info break_lock(const std::string& name, const std::string& reason, std::error_code& ec) noexcept {
    return break_lock(name, reason, false, ec);
  }
  Info break_lock(const std::string& name, std::error_code& ec) noexcept { return break_lock(name, "", false, ec); }
  // false, with ec clear, when nobody holds it; false, with ec set, on failure.
  bool request_release(const std::string& name, const std::string& reason, std::error_code& ec) noexcept {
    bool asked = false;
    detail::Set(ec, RequestRelease(name, reason, &asked));
    return asked;
  }
  bool request_release(const std::string& name, std::error_code& ec) noexcept {
    return request_release(name, "", ec);
  }
  Lock campaign(const std::string& name, const Options& options, std::error_code& ec) noexcept {
    Lock lock;
    detail::Set(ec, Acquire(name, options, &lock, &dlock_campaign));
    return lock;
  }
  Lock campaign(const std::string& name, std::error_code& ec) noexcept { return campaign(name, Options(), ec); }
  // std::nullopt, with ec clear, when nobody leads; with ec set, on failure.
  std::optional<Holder> leader(const std::string& name, std::error_code& ec) const noexcept {
    std::optional<Holder> holder;
    if (!detail::Set(ec, Leader(name, &holder))) holder.reset();
    return holder;
  }
  // An empty Observer, with ec set, on failure.
  [[nodiscard]] Observer observe(const std::string& name, LeaderHandler handler, std::error_code& ec) noexcept {
    Observer observer;
    detail::Set(ec, Observe(name, std::move(handler), &observer));
    return observer;
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
  friend class detail::MutexCore;

  dlock_status Open(const std::string& url) noexcept {
    dlock_status s = detail::NoNul(url, "URL");
    return s == DLOCK_OK ? detail::FromC(dlock_client_open(url.c_str(), &client_)) : s;
  }

  dlock_status Usable(const std::string& name) const noexcept {
    if (!client_) return detail::Fail(DLOCK_EINVAL, "dlock::Client: the Client is empty (moved from or closed)");
    return detail::NoNul(name, "lock name");
  }

  using AcquireFn = dlock_status (*)(dlock_client*, const char*, const dlock_options*, dlock_lock**);
  using ReadFn = dlock_status (*)(dlock_client*, const char*, dlock_info**);

  // The C options, with the handlers the acquired Locks will own.
  static dlock_status Build(const Options& options, std::shared_ptr<detail::LostHook>* hook,
                            std::shared_ptr<detail::ReleaseRequestHook>* request_hook,
                            detail::OptionsPtr* c_options) noexcept {
    if (options.on_lost_) *hook = std::make_shared<detail::LostHook>(options.on_lost_);
    if (options.on_release_requested_) {
      *request_hook = std::make_shared<detail::ReleaseRequestHook>(options.on_release_requested_);
    }
    return options.Build(hook->get(), request_hook->get(), c_options);
  }

  // dlock_acquire, or dlock_campaign.
  dlock_status Acquire(const std::string& name, const Options& options, Lock* out,
                       AcquireFn acquire_fn = &dlock_acquire) noexcept {
    dlock_status s = Usable(name);
    if (s != DLOCK_OK) return s;
    std::shared_ptr<detail::LostHook> hook;
    std::shared_ptr<detail::ReleaseRequestHook> request_hook;
    detail::OptionsPtr c_options;
    s = Build(options, &hook, &request_hook, &c_options);
    if (s != DLOCK_OK) return s;
    dlock_lock* lock = nullptr;
    s = detail::FromC(acquire_fn(client_, name.c_str(), c_options.get(), &lock));
    if (s != DLOCK_OK) return s;
    detail::HoldHooks hold_hooks;  // a re-entry keeps its hold's handlers (see ReentrantHolds)
    if (options.reentrant_ && reentrant_holds_) {
      hold_hooks = reentrant_holds_->Share(name, dlock_lock_fencing_token(lock), detail::HoldHooks{hook, request_hook});
    }
    *out = Lock(lock, std::move(hook), std::move(request_hook), std::move(hold_hooks));
    return s;
  }

  // dlock_acquire_many. The Locks share one copy of each handler (the C side calls it with
  // the name of the lock concerned).
  dlock_status AcquireMany(const std::vector<std::string>& names, const Options& options, LockGroup* out) noexcept {
    if (!client_) return detail::Fail(DLOCK_EINVAL, "dlock::Client: the Client is empty (moved from or closed)");
    std::vector<const char*> c_names;
    c_names.reserve(names.size());
    for (size_t k = 0; k < names.size(); ++k) {
      if (names[k].find('\0') != std::string::npos) {
        return detail::Fail(DLOCK_EINVAL, "names[" + std::to_string(k) + "]: lock name contains a NUL byte");
      }
      c_names.push_back(names[k].c_str());
    }
    std::shared_ptr<detail::LostHook> hook;
    std::shared_ptr<detail::ReleaseRequestHook> request_hook;
    detail::OptionsPtr c_options;
    dlock_status s = Build(options, &hook, &request_hook, &c_options);
    if (s != DLOCK_OK) return s;
    std::vector<dlock_lock*> held(names.size(), nullptr);
    s = detail::FromC(dlock_acquire_many(client_, c_names.data(), c_names.size(), c_options.get(), held.data()));
    if (s != DLOCK_OK) return s;
    std::vector<Lock> locks;
    locks.reserve(held.size());
    for (size_t k = 0; k < held.size(); ++k) {
      detail::HoldHooks hold_hooks;  // a re-entry keeps its hold's handlers (see ReentrantHolds)
      if (options.reentrant_ && reentrant_holds_) {
        hold_hooks = reentrant_holds_->Share(names[k], dlock_lock_fencing_token(held[k]),
                                             detail::HoldHooks{hook, request_hook});
      }
      locks.push_back(Lock(held[k], hook, request_hook, std::move(hold_hooks)));
    }
    *out = LockGroup(std::move(locks));
    return s;
  }

  // dlock_inspect, or dlock_leader, into *info.
  dlock_status ReadInfo(ReadFn read_fn, const std::string& name, Info* info) const noexcept {
    dlock_status s = Usable(name);
    if (s != DLOCK_OK) return s;
    dlock_info* raw = nullptr;
    s = detail::FromC(read_fn(client_, name.c_str(), &raw));
    if (s != DLOCK_OK) return s;
    std::unique_ptr<dlock_info, void (*)(dlock_info*)> owned(raw, &dlock_info_free);
    detail::FillInfo(raw, info);
    return DLOCK_OK;
  }

  // dlock_break_with, what it broke into *info.
  dlock_status Break(const std::string& name, const std::string& reason, bool now, Info* info) noexcept {
    dlock_status s = Usable(name);
    if (s == DLOCK_OK) s = detail::NoNul(reason, "reason");
    if (s != DLOCK_OK) return s;
    dlock_info* raw = nullptr;
    s = detail::FromC(dlock_break_with(client_, name.c_str(), reason.empty() ? nullptr : reason.c_str(),
                                       now ? DLOCK_BREAK_NOW : 0u, &raw));
    if (s != DLOCK_OK) return s;
    std::unique_ptr<dlock_info, void (*)(dlock_info*)> owned(raw, &dlock_info_free);
    detail::FillInfo(raw, info);
    return DLOCK_OK;
  }

  // dlock_request_release: *asked true when the name had holders to ask; DLOCK_NOT_HELD (nobody
  // holds it) is DLOCK_OK with *asked false.
  dlock_status RequestRelease(const std::string& name, const std::string& reason, bool* asked) noexcept {
    *asked = false;
    dlock_status s = Usable(name);
    if (s == DLOCK_OK) s = detail::NoNul(reason, "reason");
    if (s != DLOCK_OK) return s;
    s = dlock_request_release(client_, name.c_str(), reason.empty() ? nullptr : reason.c_str());
    if (s == DLOCK_NOT_HELD) return DLOCK_OK;
    *asked = s == DLOCK_OK;
    return detail::FromC(s);
  }

  dlock_status Inspect(const std::string& name, Info* info) const noexcept {
    return ReadInfo(&dlock_inspect, name, info);
  }

  dlock_status Leader(const std::string& name, std::optional<Holder>* out) const noexcept {
    Info info;
    dlock_status s = ReadInfo(&dlock_leader, name, &info);
    if (s == DLOCK_OK && !info.holders.empty()) *out = std::move(info.holders.front());
    return s;
  }

  dlock_status Observe(const std::string& name, LeaderHandler handler, Observer* out) noexcept {
    dlock_status s = Usable(name);
    if (s != DLOCK_OK) return s;
    if (!handler) return detail::Fail(DLOCK_EINVAL, "dlock::Client::observe: the handler is empty");
    std::shared_ptr<detail::ObserveHook> hook;
    DLOCK_HPP_TRY_ { hook = std::make_shared<detail::ObserveHook>(std::move(handler)); }
    DLOCK_HPP_CATCH_ALL_ { return detail::Fail(DLOCK_ENOMEM, "dlock: out of memory"); }
    dlock_observer* observer = nullptr;
    s = detail::FromC(dlock_observe(client_, name.c_str(), &detail::ObserveHook::Invoke, hook.get(), &observer));
    if (s == DLOCK_OK) *out = Observer(observer, std::move(hook));
    return s;
  }

  dlock_client* client_ = nullptr;
  // The handlers of its reentrant holds, shared by their re-entries' Locks.
  std::shared_ptr<detail::ReentrantHolds> reentrant_holds_ = std::make_shared<detail::ReentrantHolds>();
};

// ----- mutexes ------------------------------------------------------------------------------

namespace detail {

// How long a lock call may wait: not at all, until a point of the monotonic clock, or forever.
struct Deadline {
  enum Mode { kTry, kUntil, kForever } mode = kTry;
  std::chrono::steady_clock::time_point until{};

  static Deadline Try() noexcept { return {kTry, {}}; }
  static Deadline Forever() noexcept { return {kForever, {}}; }

  template <class Rep, class Period>
  static Deadline After(const std::chrono::duration<Rep, Period>& d) noexcept {
    if (!(d > d.zero())) return Try();  // also NaN
    const std::chrono::duration<double, std::milli> ms(d);
    uint64_t limit = dlock_limit_value(DLOCK_LIMIT_LEASE_MS);
    if (limit == 0) limit = 10ull * 366 * 24 * 3600 * 1000;
    if (!(ms.count() < static_cast<double>(limit))) return Forever();
    return {kUntil, std::chrono::steady_clock::now() +
                        std::chrono::ceil<std::chrono::steady_clock::duration>(ms)};
  }

  template <class Clock, class Duration>
  static Deadline At(const std::chrono::time_point<Clock, Duration>& t) noexcept {
    const auto now = Clock::now();
    if (!(t > now)) return Try();
    return After(t - now);
  }

  // The wait to give dlock_acquire: 0 = one try, -1 = no limit.
  int64_t WaitMs() const noexcept {
    if (mode == kTry) return 0;
    if (mode == kForever) return -1;
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    return left.count() > 0 ? static_cast<int64_t>(left.count()) : 0;
  }

  // Waits on cv until ready() or the deadline; ready()'s value.
  template <class Pred>
  bool Await(std::condition_variable& cv, std::unique_lock<std::mutex>& g, Pred ready) const {
    if (mode == kForever) {
      cv.wait(g, ready);
      return true;
    }
    if (mode == kTry) return ready();
    return cv.wait_until(g, until, ready);
  }
};

// Whether the on_lost handler has been called for one hold (so it is called once).
struct HoldReport {
  std::atomic<bool> reported{false};
};

// The state shared by Mutex and SharedMutex: the hold, the local gate, the last status.
class MutexCore {
 public:
  MutexCore(Client& client, std::string name, Options options)
      : client_(&client), name_(std::move(name)), options_(std::move(options)) {
    if (options_.on_lost_) on_lost_ = std::make_shared<const LostHandler>(std::move(options_.on_lost_));
    options_.on_lost_ = nullptr;
  }
  MutexCore(const MutexCore&) = delete;
  MutexCore& operator=(const MutexCore&) = delete;

  dlock_status LockExclusive(const Deadline& d) noexcept {
    std::unique_lock<std::mutex> g(mu_);
    ++writers_waiting_;
    bool free = d.Await(cv_, g, [this] { return !in_transit_ && !exclusive_ && readers_ == 0; });
    --writers_waiting_;
    if (!free) {
      cv_.notify_all();  // readers held back by this writer may go on
      return Done(Fail(DLOCK_NOT_ACQUIRED, "dlock: '" + name_ + "' is held through this object by another thread"));
    }
    return AcquireLocked(g, d, DLOCK_EXCLUSIVE);
  }

  dlock_status LockShared(const Deadline& d) noexcept {
    std::unique_lock<std::mutex> g(mu_);
    bool free = d.Await(cv_, g, [this] { return !in_transit_ && !exclusive_ && writers_waiting_ == 0; });
    if (!free) {
      return Done(Fail(DLOCK_NOT_ACQUIRED, "dlock: '" + name_ + "' is held or awaited exclusively through this object"));
    }
    if (readers_ > 0) {  // join this process's shared hold
      ++readers_;
      return Done(DLOCK_OK);
    }
    return AcquireLocked(g, d, DLOCK_SHARED);
  }

  dlock_status UnlockExclusive() noexcept {
    std::unique_lock<std::mutex> g(mu_);
    if (!exclusive_) return Done(Fail(DLOCK_EINVAL, "dlock: unlock of '" + name_ + "', which this object does not hold"));
    exclusive_ = false;
    return ReleaseLocked(g);
  }

  dlock_status UnlockShared() noexcept {
    std::unique_lock<std::mutex> g(mu_);
    if (readers_ == 0) {
      return Done(Fail(DLOCK_EINVAL, "dlock: unlock_shared of '" + name_ + "', which this object does not hold shared"));
    }
    if (--readers_ > 0) {
      if (lock_.valid()) return Done(DLOCK_OK);
      return Done(Fail(DLOCK_NOT_HELD, "dlock: the shared hold of '" + name_ + "' was lost"));
    }
    return ReleaseLocked(g);
  }

  const std::string& name() const noexcept { return name_; }
  uint64_t fencing_token() const noexcept { return token_.load(); }
  bool valid() const noexcept {
    std::lock_guard<std::mutex> g(mu_);
    return !in_transit_ && lock_.valid();
  }
  std::chrono::milliseconds remaining() const noexcept {
    std::lock_guard<std::mutex> g(mu_);
    return in_transit_ ? std::chrono::milliseconds(0) : lock_.remaining();
  }
  dlock_status last_status() const noexcept { return static_cast<dlock_status>(last_.load()); }

 private:
  dlock_status Done(dlock_status s) noexcept {
    last_.store(s);
    return s;
  }

  // With mu_ held and the object free: acquires on the server (mu_ released meanwhile).
  dlock_status AcquireLocked(std::unique_lock<std::mutex>& g, const Deadline& d, dlock_kind kind) noexcept {
    in_transit_ = true;
    g.unlock();
    dlock::Lock lock;
    std::shared_ptr<HoldReport> report;
    dlock_status s = DLOCK_OK;
    DLOCK_HPP_TRY_ {
      Options o = options_;
      o.wait_ = d.WaitMs();
      o.kind_ = kind;
      if (on_lost_) {
        report = std::make_shared<HoldReport>();
        o.on_lost_ = [handler = on_lost_, report](const std::string& name, uint64_t token) {
          if (!report->reported.exchange(true)) (*handler)(name, token);
        };
      }
      s = client_->Acquire(name_, o, &lock);
    }
    DLOCK_HPP_CATCH_ALL_ { s = Fail(DLOCK_ENOMEM, "dlock: out of memory"); }
    g.lock();
    in_transit_ = false;
    if (s == DLOCK_OK) {
      lock_ = std::move(lock);
      report_ = std::move(report);
      token_.store(lock_.fencing_token());
      if (kind == DLOCK_EXCLUSIVE) {
        exclusive_ = true;
      } else {
        readers_ = 1;
      }
    }
    cv_.notify_all();
    return Done(s);
  }

  // With mu_ held and the hold given up locally: releases it on the server (mu_ released
  // meanwhile), then reports a loss found there to on_lost unless the heartbeats did.
  dlock_status ReleaseLocked(std::unique_lock<std::mutex>& g) noexcept {
    in_transit_ = true;
    dlock::Lock lock = std::move(lock_);
    std::shared_ptr<HoldReport> report = std::move(report_);
    const uint64_t token = token_.exchange(0);
    g.unlock();
    dlock_status s = lock.release(std::nothrow);
    g.lock();
    in_transit_ = false;
    Done(s);
    cv_.notify_all();
    g.unlock();
    if (s == DLOCK_NOT_HELD && report && !report->reported.exchange(true)) {
      DLOCK_HPP_TRY_ { (*on_lost_)(name_, token); }
      DLOCK_HPP_CATCH_ALL_ {}
    }
    return s;
  }

  Client* client_;
  const std::string name_;
  Options options_;                             // without on_lost; wait and kind set per call
  std::shared_ptr<const LostHandler> on_lost_;  // the caller's handler, if any

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool in_transit_ = false;      // an acquire or release of this object is on the wire
  bool exclusive_ = false;       // lock_ is an exclusive hold
  uint32_t readers_ = 0;         // local holders of lock_, a shared hold
  uint32_t writers_waiting_ = 0; // local threads waiting in LockExclusive
  dlock::Lock lock_;
  std::shared_ptr<HoldReport> report_;  // lock_'s, when there is an on_lost handler
  std::atomic<uint64_t> token_{0};
  std::atomic<int> last_{DLOCK_OK};
};

}  // namespace detail

// A distributed lock meeting the standard's Lockable and TimedLockable requirements: see
// "Mutexes" at the top of this file.
//
//   dlock::Mutex m(client, "accounts", dlock::Options().lease(std::chrono::seconds(30)));
//   { std::lock_guard<dlock::Mutex> g(m); write_with_fence(m.fencing_token()); }
class Mutex {
 public:
  Mutex(Client& client, std::string name, Options options = Options())
      : core_(client, std::move(name), std::move(options)) {}
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  // Waits without limit. Throws Error on a failure (DLOCK_EIO, DLOCK_EINVAL...).
  void lock() { detail::Check(core_.LockExclusive(detail::Deadline::Forever())); }
  // One try, no wait: false if someone holds it. Throws Error on a failure.
  bool try_lock() { return Try(core_.LockExclusive(detail::Deadline::Try())); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return Try(core_.LockExclusive(detail::Deadline::After(d)));
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return Try(core_.LockExclusive(detail::Deadline::At(t)));
  }
  // Releases; never throws. The outcome is last_status() (see "Mutexes").
  void unlock() noexcept { (void)core_.UnlockExclusive(); }

  // The same, setting ec instead of throwing (try_*: false with ec clear if it is held).
  void lock(std::error_code& ec) noexcept { detail::Set(ec, core_.LockExclusive(detail::Deadline::Forever())); }
  bool try_lock(std::error_code& ec) noexcept { return Try(core_.LockExclusive(detail::Deadline::Try()), ec); }
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d, std::error_code& ec) noexcept {
    return Try(core_.LockExclusive(detail::Deadline::After(d)), ec);
  }
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t, std::error_code& ec) noexcept {
    return Try(core_.LockExclusive(detail::Deadline::At(t)), ec);
  }
  void unlock(std::error_code& ec) noexcept { detail::Set(ec, core_.UnlockExclusive()); }

  // The fencing token of the current hold; 0 while not held.
  uint64_t fencing_token() const noexcept { return core_.fencing_token(); }
  // True while held and its local deadline holds (not found lost).
  bool valid() const noexcept { return core_.valid(); }
  // Time left before the current hold's local deadline (max() for no expiry); 0 if not held.
  std::chrono::milliseconds remaining() const noexcept { return core_.remaining(); }
  // The outcome of the last lock or unlock call on this object, from any thread.
  dlock_status last_status() const noexcept { return core_.last_status(); }
  const std::string& name() const noexcept { return core_.name(); }

 protected:
  static bool Try(dlock_status s) {
    if (s == DLOCK_NOT_ACQUIRED) return false;
    detail::Check(s);
    return true;
  }
  static bool Try(dlock_status s, std::error_code& ec) noexcept {
    detail::Set(ec, s == DLOCK_NOT_ACQUIRED ? DLOCK_OK : s);
    return s == DLOCK_OK;
  }

  detail::MutexCore core_;
};

// A distributed reader-writer lock meeting SharedTimedLockable (and TimedLockable for the
// exclusive side): see "Mutexes" at the top of this file. The backend needs DLOCK_CAP_SHARED.
//
//   dlock::SharedMutex m(client, "catalog");
//   { std::shared_lock<dlock::SharedMutex> reading(m); ... }
//   { std::unique_lock<dlock::SharedMutex> writing(m); ... }
class SharedMutex : public Mutex {
 public:
  using Mutex::Mutex;

  void lock_shared() { detail::Check(core_.LockShared(detail::Deadline::Forever())); }
  bool try_lock_shared() { return Try(core_.LockShared(detail::Deadline::Try())); }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return Try(core_.LockShared(detail::Deadline::After(d)));
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
    return Try(core_.LockShared(detail::Deadline::At(t)));
  }
  // Leaves the shared hold (the last local reader releases it); never throws: last_status().
  void unlock_shared() noexcept { (void)core_.UnlockShared(); }

  void lock_shared(std::error_code& ec) noexcept { detail::Set(ec, core_.LockShared(detail::Deadline::Forever())); }
  bool try_lock_shared(std::error_code& ec) noexcept { return Try(core_.LockShared(detail::Deadline::Try()), ec); }
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d, std::error_code& ec) noexcept {
    return Try(core_.LockShared(detail::Deadline::After(d)), ec);
  }
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t, std::error_code& ec) noexcept {
    return Try(core_.LockShared(detail::Deadline::At(t)), ec);
  }
  void unlock_shared(std::error_code& ec) noexcept { detail::Set(ec, core_.UnlockShared()); }
};

}  // inline namespace
}  // namespace dlock

#undef DLOCK_HPP_TRY_
#undef DLOCK_HPP_CATCH_ALL_

#endif  // DLOCK_DLOCK_HPP_
