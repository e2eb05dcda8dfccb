#include "redis/subscriber.h"

#include "redis/async_connection.h"

#include <algorithm>
#include <cstring>

namespace dlock::redis {

Subscriber::Subscriber(EventLoop* loop, const RedisConfig& config)
    : loop_(loop),
      config_(config),
      reconnect_timer_(loop, [this] { SubscribePending(); }),
      sweep_timer_(loop, [this] { Sweep(); }) {}

Subscriber::~Subscriber() = default;

void Subscriber::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  bool subscribe = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = channels_.try_emplace(channel);
    Channel& ch = it->second;
    ch.waiters.push_back(watcher);
    if (ch.state == State::kLive) watcher->OnWatchReady(true);
    subscribe = inserted;  // kUnsubscribing resubscribes when the UNSUBSCRIBE is confirmed
  }
  if (subscribe) loop_->Post([this, channel] { SendSubscribe(channel); });
}

void Subscriber::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  auto& waiters = it->second.waiters;
  waiters.erase(std::remove(waiters.begin(), waiters.end(), watcher), waiters.end());
  if (waiters.empty()) it->second.idle_since = Now();  // Sweep unsubscribes it later
}

bool Subscriber::EnsureConnected() {
  if (shut_down_) return false;
  if (ctx_ != nullptr) return true;
  std::string error;  // a failed connection is retried by the reconnect timer
  ctx_ = OpenAsyncContext(loop_, config_, this, &Subscriber::OnConnect, &Subscriber::OnDisconnect,
                          &error);
  return ctx_ != nullptr;
}

void Subscriber::OnConnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<Subscriber*>(ac->data);
  if (status != REDIS_OK && self->ctx_ == ac) self->ConnectionLost();
}

void Subscriber::OnDisconnect(const redisAsyncContext* ac, int) {
  auto* self = static_cast<Subscriber*>(ac->data);
  if (self->ctx_ == ac) self->ConnectionLost();
}

void Subscriber::ConnectionLost() {
  ctx_ = nullptr;
  bool any_waiting = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& ch = it->second;
      if (ch.waiters.empty()) {
        it = channels_.erase(it);
        continue;
      }
      ch.state = State::kSubscribing;
      any_waiting = true;
      // Wake everyone: a release may have been missed; they retry, then poll until resubscribed.
      for (ReleaseWatcher* w : ch.waiters) {
        w->OnWatchReady(false);
        w->OnReleased();
      }
      ++it;
    }
  }
  if (any_waiting && !shut_down_) reconnect_timer_.StartAfter(Millis(200));
}

void Subscriber::SubscribePending() {
  std::vector<std::string> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, ch] : channels_) {
      if (ch.state == State::kSubscribing) pending.push_back(name);
    }
  }
  for (const auto& name : pending) SendSubscribe(name);
}

void Subscriber::SendSubscribe(const std::string& channel) {
  if (!EnsureConnected()) {
    if (!shut_down_) reconnect_timer_.StartAfter(Millis(200));
    return;
  }
  const char* argv[] = {"SUBSCRIBE", channel.data()};
  size_t lens[] = {9, channel.size()};
  redisAsyncCommandArgv(ctx_, &Subscriber::OnMessage, this, 2, argv, lens);
  if (!sweep_timer_.pending()) sweep_timer_.StartAfter(kLinger);
}

void Subscriber::Sweep() {
  std::vector<std::string> idle;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TimePoint now = Now();
    for (auto& [name, ch] : channels_) {
      any = true;
      if (ch.state == State::kLive && ch.waiters.empty() && now - ch.idle_since >= kLinger) {
        ch.state = State::kUnsubscribing;
        idle.push_back(name);
      }
    }
  }
  if (ctx_ != nullptr) {
    for (const auto& name : idle) {
      const char* argv[] = {"UNSUBSCRIBE", name.data()};
      size_t lens[] = {11, name.size()};
      redisAsyncCommandArgv(ctx_, &Subscriber::OnMessage, this, 2, argv, lens);
    }
  }
  if (any && !shut_down_) sweep_timer_.StartAfter(kLinger / 2);
}

void Subscriber::OnMessage(redisAsyncContext*, void* reply_ptr, void* privdata) {
  auto* self = static_cast<Subscriber*>(privdata);
  auto* reply = static_cast<redisReply*>(reply_ptr);
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY || reply->elements < 2 ||
      reply->element[0]->type != REDIS_REPLY_STRING || reply->element[1]->type != REDIS_REPLY_STRING) {
    return;
  }
  std::string kind(reply->element[0]->str, reply->element[0]->len);
  std::string channel(reply->element[1]->str, reply->element[1]->len);
  bool resubscribe = false;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    auto it = self->channels_.find(channel);
    if (it == self->channels_.end()) return;
    Channel& ch = it->second;
    if (kind == "subscribe") {
      ch.state = State::kLive;
      for (ReleaseWatcher* w : ch.waiters) w->OnWatchReady(true);
    } else if (kind == "message") {
      for (ReleaseWatcher* w : ch.waiters) w->OnReleased();
    } else if (kind == "unsubscribe") {
      if (ch.waiters.empty()) {
        self->channels_.erase(it);
      } else {  // someone started waiting while the UNSUBSCRIBE was out
        ch.state = State::kSubscribing;
        resubscribe = true;
      }
    }
  }
  if (resubscribe) self->SendSubscribe(channel);
}

void Subscriber::ShutdownOnLoop() {
  shut_down_ = true;
  reconnect_timer_.Free();
  sweep_timer_.Free();
  if (ctx_ != nullptr) {
    redisAsyncContext* ac = ctx_;
    ctx_ = nullptr;
    redisAsyncFree(ac);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, ch] : channels_) {
    for (ReleaseWatcher* w : ch.waiters) w->OnReleased();
  }
}

}  // namespace dlock::redis
