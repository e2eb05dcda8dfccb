// CompletionQueue (dlock_queue): async outcomes handed to the caller's own thread instead of
// a callback on the client's loop thread. For runtimes that cannot take a call on a foreign
// thread (Node, LuaJIT) or should not make the loop thread wait for them: the loop thread
// only appends and writes one byte to a pipe; the caller polls the pipe and pops.
#ifndef DLOCK_CORE_COMPLETION_QUEUE_H_
#define DLOCK_CORE_COMPLETION_QUEUE_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "core/metrics.h"
#include "core/status.h"

namespace dlock {

class Client;
struct HolderInfo;
struct LockInfo;
struct LockState;

// A copy of an event-hook Event that outlives the hook's call (its name too: Event only refers
// to one): what a kEvent entry carries, and what dlock_queue_pop_event hands out. A field added
// to Event is copied here too.
struct EventCopy {
  explicit EventCopy(const Event& e) : name(e.name), event(e.type, name) {
    event.attempts = e.attempts;
    event.elapsed_ms = e.elapsed_ms;
    event.fencing_token = e.fencing_token;
    event.status = e.status;
    event.detail = e.detail;
  }
  EventCopy(const EventCopy&) = delete;
  EventCopy& operator=(const EventCopy&) = delete;

  const std::string name;
  Event event;  // its name is the member above
};

class CompletionQueue {
 public:
  enum class Kind : int { kDone = 1, kLost = 2, kLeader = 3, kEvent = 4, kReleaseRequested = 5 };
  // Event entries waiting at most (dlock_client_set_event_queue): more are dropped, so that a
  // consumer that stops popping cannot make the queue grow without bound.
  static constexpr size_t kMaxEvents = 65536;
  struct Entry {
    Kind kind = Kind::kDone;
    uint64_t tag = 0;
    Status status;
    std::shared_ptr<Client> client;  // with lock: an acquired lock, now the popper's
    std::shared_ptr<LockState> lock;
    std::shared_ptr<HolderInfo> leader;  // kLeader: who leads (null: nobody)
    std::shared_ptr<LockInfo> info;      // kDone of an inspect (dlock_inspect_queued)
    std::unique_ptr<EventCopy> event;    // kEvent: what the client's event hook was told
  };

  static Status Create(std::shared_ptr<CompletionQueue>* out);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // The pipe's read end: readable once an entry arrives while the queue was empty.
  int fd() const { return read_fd_; }
  // A close-on-exec duplicate of fd() for a caller to own and close (bindings that hand the
  // fd to a runtime which closes what it watches, such as Node's net.Socket).
  Status DupFd(int* out) const;
  // Any thread. After Shutdown, a lock the entry carries is given back instead.
  void Push(Entry entry);
  // Any thread, from a client's event hook: queues a copy of e as a kEvent entry with tag.
  // Never throws and never waits for a consumer; drops the event (returns false) when the
  // queue was let go, kMaxEvents event entries are waiting already, or memory runs out.
  bool PushEvent(uint64_t tag, const Event& e) noexcept;
  // Takes the oldest entry. When there is none, empties the pipe and re-arms it: the pipe is
  // written again only for an entry pushed after a Pop that found the queue empty.
  bool Pop(Entry* out);
  // The owner let go: gives back the locks of entries never popped, and of any pushed later.
  void Shutdown();
  // Releases the lock an entry carries, if any, in the background.
  static void GiveBack(Entry& entry);

 private:
  CompletionQueue(int read_fd, int write_fd) : read_fd_(read_fd), write_fd_(write_fd) {}
  // Under mu_: makes the fd readable, unless it is already.
  void Signal();

  const int read_fd_;
  const int write_fd_;
  std::mutex mu_;
  std::deque<Entry> entries_;
  size_t events_ = 0;       // kEvent entries in entries_
  bool signalled_ = false;  // a byte is in the pipe, or was since the last empty Pop
  bool shut_ = false;
};

}  // namespace dlock

#endif  // DLOCK_CORE_COMPLETION_QUEUE_H_
