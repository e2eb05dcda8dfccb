// dlock.hpp in a translation unit built with -fno-exceptions (tests/CMakeLists.txt): the
// std::error_code overloads, and Mutex / SharedMutex under the standard's lock types. Linked
// into dlock_redis_tests beside hpp_test.cc, built with exceptions: the two builds of the
// header's types live in different inline namespaces, so they do not clash.
#include "hpp_noexceptions.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <vector>

#include "dlock/dlock.hpp"

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS)
#error "hpp_noexceptions.cc must be built with -fno-exceptions"
#endif

namespace hpp_noexceptions {

bool BuiltWithoutExceptions() { return DLOCK_HPP_EXCEPTIONS == 0; }

std::string Run(const std::string& url) {
  using namespace std::chrono_literals;
  std::error_code ec;
  dlock::Client bad("bogus://x", ec);
  if (ec != DLOCK_EINVAL || bad) return "bad URL: " + ec.message();
  if (dlock::last_error().empty()) return "bad URL: no message";

  dlock::Client a(url, ec);
  if (ec) return "open: " + ec.message() + ": " + dlock::last_error();
  dlock::Client b(url, ec);
  if (ec) return "open: " + ec.message();

  dlock::Lock lock = a.acquire("hpp/noexc", dlock::Options().lease(5s), ec);
  if (ec || !lock || lock.fencing_token() == 0) return "acquire: " + ec.message();
  dlock::Lock none = b.try_acquire("hpp/noexc", ec);
  if (ec || none) return "try_acquire of a held lock: " + ec.message();
  none = b.acquire("hpp/noexc", ec);
  if (ec != DLOCK_NOT_ACQUIRED || none) return "acquire of a held lock: " + ec.message();
  lock.extend(-1ms, ec);
  if (ec != std::errc::invalid_argument) return "extend(-1ms): " + ec.message();
  lock.release(ec);
  if (ec) return "release: " + ec.message();
  lock.release(ec);
  if (ec != DLOCK_EINVAL) return "second release: " + ec.message();
  if (a.inspect("hpp/noexc", ec).holders.size() != 0 || ec) return "inspect: " + ec.message();
  // breaking a lock: what it broke, and the name left closed, or free at once with now
  lock = a.acquire("hpp/noexc-break", dlock::Options().lease(5s).owner("noexc"), ec);
  if (ec || !lock) return "acquire to break: " + ec.message();
  dlock::Info broke = b.break_lock("hpp/noexc-break", "no exceptions", ec);
  if (ec || broke.holders.size() != 1 || broke.holders[0].fencing_token != lock.fencing_token() ||
      broke.holders[0].owner != "noexc" || broke.closed_ms() <= 0 || broke.closed_by() != "broken") {
    return "break_lock: " + ec.message();
  }
  dlock::Info shut = b.inspect("hpp/noexc-break", ec);
  if (ec || !shut.is_free() || shut.closed_ms() <= 0 || shut.closed_by() != "broken") {
    return "inspect of a broken lock: " + ec.message();
  }
  lock.release(ec);
  if (ec != DLOCK_NOT_HELD) return "release of a broken lock: " + ec.message();
  broke = b.break_lock("hpp/noexc-break", "", true, ec);
  if (ec || !broke.is_free() || broke.closed_ms() != 0) return "break_lock now: " + ec.message();
  if (b.inspect("hpp/noexc-break", ec).closed_ms() != 0 || ec) return "inspect after break now: " + ec.message();
  broke = b.break_lock("", ec);
  if (ec != DLOCK_EINVAL || !broke.is_free()) return "break_lock of an empty name: " + ec.message();
  // asking a holder to let go: false with ec clear for a free name, true for a held one
  if (b.request_release("hpp/noexc-break", "no exceptions", ec) || ec) {
    return "request_release of a free name: " + ec.message();
  }
  lock = a.acquire("hpp/noexc-ask", dlock::Options().lease(5s), ec);
  if (ec || !lock) return "acquire to ask: " + ec.message();
  if (!b.request_release("hpp/noexc-ask", ec) || ec) return "request_release of a held name: " + ec.message();
  lock.release(ec);
  if (ec) return "release after a request: " + ec.message();

  // several names at once: all or none, each its own token, a group release naming a lost name
  dlock::LockGroup group = a.acquire_many({"hpp/noexc-m2", "hpp/noexc-m1"}, dlock::Options().lease(5s), ec);
  if (ec || !group || group.size() != 2 || group[0].name() != "hpp/noexc-m2" ||
      group[0].fencing_token() == 0 || group[1].fencing_token() == 0 ||
      group[0].fencing_token() == group[1].fencing_token()) {
    return "acquire_many: " + ec.message();
  }
  dlock::LockGroup theirs = b.acquire_many({"hpp/noexc-m0", "hpp/noexc-m1"}, ec);
  if (ec != DLOCK_NOT_ACQUIRED || theirs) return "acquire_many of a held name: " + ec.message();
  if (dlock::last_error().find("hpp/noexc-m1") == std::string::npos) return "acquire_many: " + dlock::last_error();
  theirs = b.try_acquire_many({"hpp/noexc-m0", "hpp/noexc-m1"}, ec);
  if (ec || theirs) return "try_acquire_many of a held name: " + ec.message();
  if (!b.inspect("hpp/noexc-m0", ec).is_free() || ec) return "acquire_many left hpp/noexc-m0 held";
  theirs = b.acquire_many({"hpp/noexc-m0", "hpp/noexc-m0"}, ec);
  if (ec != DLOCK_EINVAL || theirs) return "acquire_many of a name given twice: " + ec.message();
  b.break_lock("hpp/noexc-m1", "", true, ec);
  if (ec) return "break of a group's lock: " + ec.message();
  group.release(ec);
  if (ec != DLOCK_NOT_HELD || group) return "release of a group with a lost lock: " + ec.message();
  if (dlock::last_error().find("hpp/noexc-m1") == std::string::npos ||
      dlock::last_error().find("hpp/noexc-m2") != std::string::npos) {
    return "the group release's message: " + dlock::last_error();
  }
  if (!b.inspect("hpp/noexc-m2", ec).is_free() || ec) return "release of a group left hpp/noexc-m2 held";
  group.release(ec);
  if (ec != DLOCK_EINVAL) return "second release of a group: " + ec.message();
  {
    dlock::LockGroup scoped = a.acquire_many({"hpp/noexc-m1", "hpp/noexc-m2"}, ec);
    if (ec || !scoped) return "acquire_many again: " + ec.message();
  }
  theirs = b.try_acquire_many({"hpp/noexc-m2", "hpp/noexc-m1"}, ec);
  if (ec || !theirs) return "try_acquire_many after a group's destructor: " + ec.message();
  theirs.release(ec);
  if (ec) return "release of a group: " + ec.message();

  // job rules: a min hold leaves the name closed after an early release; a lock delay above its
  // cap is refused
  lock = a.acquire("hpp/noexc-min-hold", dlock::Options().lease(5s).min_hold(5s), ec);
  if (ec || !lock) return "acquire with a min hold: " + ec.message();
  lock.release(ec);
  if (ec) return "release before the min hold: " + ec.message();
  dlock::Info held = b.inspect("hpp/noexc-min-hold", ec);
  if (ec || !held.is_free() || held.closed_ms() <= 0 || held.closed_by() != "min_hold") {
    return "inspect after a min hold's release: " + ec.message();
  }
  if (b.try_acquire("hpp/noexc-min-hold", dlock::Options(), ec) || ec) return "try_acquire in a min hold";
  b.break_lock("hpp/noexc-min-hold", "", true, ec);
  if (ec) return "break of a min hold: " + ec.message();
  lock = a.acquire("hpp/noexc-delay", dlock::Options().lock_delay(std::chrono::milliseconds(60001)), ec);
  if (ec != DLOCK_EINVAL || lock) return "lock delay above its cap: " + ec.message();

  // values and leader election, through the std::error_code overloads
  dlock::Lock leadership = a.campaign("hpp/noexc-lead", dlock::Options().value(std::string("a\0b", 3)), ec);
  if (ec || !leadership) return "campaign: " + ec.message();
  std::optional<dlock::Holder> leader = b.leader("hpp/noexc-lead", ec);
  if (ec || !leader || leader->value != std::string("a\0b", 3) || leader->fencing_token != leadership.fencing_token()) {
    return "leader: " + ec.message();
  }
  leadership.set_value("proclaimed", ec);
  if (ec) return "set_value: " + ec.message();
  leader = b.leader("hpp/noexc-lead", ec);
  if (ec || !leader || leader->value != "proclaimed") return "leader after set_value: " + ec.message();
  leadership.set_value(std::string(DLOCK_MAX_VALUE_BYTES + 1, 'x'), ec);
  if (ec != DLOCK_EINVAL) return "set_value of too long a value: " + ec.message();
  leadership.release(ec);
  if (ec) return "resign: " + ec.message();
  leader = b.leader("hpp/noexc-lead", ec);
  if (ec || leader) return "leader after resigning: " + ec.message();
  none = b.campaign("hpp/noexc-lead", dlock::Options().shared(), ec);
  if (ec != DLOCK_EINVAL || none) return "shared campaign: " + ec.message();
  leadership.set_value("released", ec);
  if (ec != DLOCK_EINVAL) return "set_value of an empty Lock: " + ec.message();

  // observing, through the std::error_code overload: nobody leads now
  {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::optional<dlock::Holder>> seen;
    dlock::Observer observer = b.observe(
        "hpp/noexc-lead",
        [&](const std::optional<dlock::Holder>& leader) {
          {
            std::lock_guard<std::mutex> g(mu);
            seen.push_back(leader);
          }
          cv.notify_all();
        },
        ec);
    if (ec || !observer) return "observe: " + ec.message();
    {
      std::unique_lock<std::mutex> g(mu);
      if (!cv.wait_for(g, 10s, [&] { return !seen.empty(); })) return "observe: no first report";
      if (seen.front()) return "observe: a leader reported where nobody leads";
    }
    observer.cancel();
    if (observer) return "observe: not empty after cancel";
  }
  if (a.observe("", [](const std::optional<dlock::Holder>&) {}, ec) || ec != DLOCK_EINVAL) {
    return "observe of an empty name: " + ec.message();
  }
  if (a.observe("hpp/noexc-lead", nullptr, ec) || ec != DLOCK_EINVAL) return "observe with no handler: " + ec.message();

  dlock::Mutex x(a, "hpp/noexc-x"), y(a, "hpp/noexc-y");
  dlock::Mutex x2(b, "hpp/noexc-x");
  {
    std::scoped_lock both(x, y);
    if (x.fencing_token() == 0 || y.fencing_token() == 0) return "scoped_lock: no tokens";
    if (x2.try_lock(ec) || ec) return "try_lock of a held Mutex: " + ec.message();
    if (x2.try_lock_for(100ms, ec) || ec) return "try_lock_for of a held Mutex: " + ec.message();
  }
  if (!x2.try_lock(ec) || ec) return "try_lock after the scoped_lock: " + ec.message();
  x2.unlock(ec);
  if (ec) return "unlock: " + ec.message();
  x2.unlock(ec);
  if (ec != DLOCK_EINVAL || x2.last_status() != DLOCK_EINVAL) return "unlock when not held: " + ec.message();

  dlock::SharedMutex r1(a, "hpp/noexc-s"), r2(b, "hpp/noexc-s");
  {
    std::shared_lock<dlock::SharedMutex> one(r1), two(r2);
    dlock::Client c(url, ec);
    dlock::SharedMutex w(c, "hpp/noexc-s");
    if (w.try_lock(ec) || ec) return "exclusive try_lock beside readers: " + ec.message();
  }
  dlock::Client closed(url, ec);
  dlock::Mutex orphan(closed, "hpp/noexc-o");
  closed.close();
  orphan.lock(ec);
  if (ec != DLOCK_EINVAL) return "lock through a closed Client: " + ec.message();
  return "";
}

}  // namespace hpp_noexceptions
