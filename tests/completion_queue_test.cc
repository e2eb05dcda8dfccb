// CompletionQueue's event entries (dlock_client_set_event_queue), without a server: the copy
// outlives the hook's event, at most kMaxEvents event entries wait (other entries are never
// dropped), popping makes room again, and a queue let go drops what it holds and what comes.
#include "core/completion_queue.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <memory>
#include <string>

namespace dlock {
namespace {

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool PushOne(CompletionQueue& q, uint64_t tag, uint64_t token) {
  const std::string name = "unit/" + std::to_string(token);
  Event e{Event::Type::kAcquired, name};
  e.attempts = 2;
  e.fencing_token = token;
  return q.PushEvent(tag, e);
}

TEST(CompletionQueueEvents, TheCopyOutlivesTheHooksEvent) {
  std::shared_ptr<CompletionQueue> q;
  ASSERT_TRUE(CompletionQueue::Create(&q).ok());
  {
    std::string name = "unit/copied";
    Event e{Event::Type::kReleased, name};
    e.elapsed_ms = 12;
    e.fencing_token = 34;
    e.status = 2;
    e.detail = "why";
    ASSERT_TRUE(q->PushEvent(5, e));
    name.assign("overwritten, then gone");
  }
  EXPECT_TRUE(Readable(q->fd()));
  CompletionQueue::Entry entry;
  ASSERT_TRUE(q->Pop(&entry));
  EXPECT_EQ(entry.kind, CompletionQueue::Kind::kEvent);
  EXPECT_EQ(entry.tag, 5u);
  EXPECT_TRUE(entry.status.ok());
  ASSERT_NE(entry.event, nullptr);
  EXPECT_EQ(entry.event->event.type, Event::Type::kReleased);
  EXPECT_EQ(entry.event->event.name, "unit/copied");
  EXPECT_EQ(&entry.event->event.name, &entry.event->name) << "the copy's event names its own string";
  EXPECT_EQ(entry.event->event.elapsed_ms, 12);
  EXPECT_EQ(entry.event->event.fencing_token, 34u);
  EXPECT_EQ(entry.event->event.status, 2);
  EXPECT_EQ(entry.event->event.detail, "why");
  EXPECT_FALSE(q->Pop(&entry));
  EXPECT_FALSE(Readable(q->fd()));
}

TEST(CompletionQueueEvents, AtMostMaxEventsWaitAndOtherEntriesAreNeverDropped) {
  std::shared_ptr<CompletionQueue> q;
  ASSERT_TRUE(CompletionQueue::Create(&q).ok());
  for (uint64_t i = 0; i < CompletionQueue::kMaxEvents; ++i) ASSERT_TRUE(PushOne(*q, 1, i + 1)) << i;
  EXPECT_FALSE(PushOne(*q, 1, 0)) << "one event more than the bound";
  q->Push({CompletionQueue::Kind::kDone, 2, Status::Ok(), nullptr, nullptr, nullptr, nullptr, nullptr});
  CompletionQueue::Entry entry;
  ASSERT_TRUE(q->Pop(&entry));
  ASSERT_EQ(entry.kind, CompletionQueue::Kind::kEvent);
  EXPECT_EQ(entry.event->event.fencing_token, 1u) << "oldest first";
  EXPECT_TRUE(PushOne(*q, 1, 999999)) << "a pop made room";
  EXPECT_FALSE(PushOne(*q, 1, 0));
  // In order: the rest of the events, the DONE entry, the event pushed after the pop.
  uint64_t events = 0;
  bool done_seen = false;
  while (q->Pop(&entry)) {
    if (entry.kind == CompletionQueue::Kind::kDone) {
      EXPECT_EQ(events, CompletionQueue::kMaxEvents - 1);
      done_seen = true;
      continue;
    }
    ++events;
    if (done_seen) {
      EXPECT_EQ(entry.event->event.fencing_token, 999999u);
    }
  }
  EXPECT_TRUE(done_seen);
  EXPECT_EQ(events, CompletionQueue::kMaxEvents);
  EXPECT_TRUE(PushOne(*q, 1, 1)) << "empty again";
}

TEST(CompletionQueueEvents, AQueueLetGoDropsItsEventsAndLaterOnes) {
  std::shared_ptr<CompletionQueue> q;
  ASSERT_TRUE(CompletionQueue::Create(&q).ok());
  for (uint64_t i = 0; i < 100; ++i) ASSERT_TRUE(PushOne(*q, 1, i + 1));
  q->Shutdown();  // LSan: the copies are freed here
  EXPECT_FALSE(PushOne(*q, 1, 1));
  CompletionQueue::Entry entry;
  EXPECT_FALSE(q->Pop(&entry));
}

}  // namespace
}  // namespace dlock
