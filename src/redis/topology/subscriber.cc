#include "redis/topology/subscriber.h"

#include <strings.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

#include "redis/wire/reply.h"

namespace dlock::redis {
namespace {

bool IsString(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

bool Is(const redisReply* r, const char* word) {
  return std::strlen(word) == r->len && strncasecmp(r->str, word, r->len) == 0;
}

}  // namespace

Subscriber::Subscriber(EventLoop* loop, const RedisConfig& config, PubSubMode mode,
                       std::function<void(const std::string& channel)> on_misrouted)
    : loop_(loop),
      config_(config),
      mode_(mode),
      on_misrouted_(std::move(on_misrouted)),
      stream_(loop, config, this),
      reconnect_timer_(loop, [this] { SubscribePending(); }),
      sweep_timer_(loop, [this] { Sweep(); }),
      deadline_timer_(loop, [this] { OnDeadline(); }) {}

Subscriber::~Subscriber() { CloseConnection(); }

void Subscriber::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  bool kick = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = channels_.try_emplace(channel);
    Channel& ch = it->second;
    ch.waiters.Add(watcher, ch.state == State::kLive);
    if (inserted) {  // kUnsubscribing resubscribes when the UNSUBSCRIBE is answered
      to_send_.push_back(channel);
      kick = !kick_posted_;
      kick_posted_ = true;
    }
  }
  if (kick) loop_->Post([this] { SubscribePending(); });
}

void Subscriber::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(channel);
  if (it == channels_.end()) return;
  it->second.waiters.Remove(watcher);  // once idle, Sweep unsubscribes it later
}

// ----- the connection ------------------------------------------------------------------

bool Subscriber::StartConnect() {
  connect_started_ = Now();
  std::string why;  // a subscriber's loss is not reported in words: waiters just fall back
  if (!stream_.Open(&why)) return false;
  ArmDeadline();
  return true;
}

void Subscriber::OnStreamLost(const Status&) { ConnectionLost(); }

void Subscriber::OnStreamConnected() {
  if (config_.password.has_value() && !Send(Command::kAuth, config_.AuthCommand(), "")) return;
  ArmDeadline();
  SubscribePending();
}

bool Subscriber::Send(Command command, const std::vector<std::string>& argv,
                      const std::string& channel) {
  if (!stream_.Write(argv)) {  // out of memory: the replies would no longer match what was sent
    ConnectionLost();
    return false;
  }
  // The first commands of a connection are its handshake: answered within connect_timeout_ms
  // + timeout_ms of the connect's start. Later ones within timeout_ms.
  const Millis timeout(config_.params.timeout_ms);
  const Millis connect_timeout(config_.params.connect_timeout_ms);
  const TimePoint deadline =
      std::max(Now() + timeout, connect_started_ + connect_timeout + timeout);
  sent_.push_back(Sent{command, channel, deadline});
  if (!deadline_timer_.pending()) ArmDeadline();
  return true;
}

void Subscriber::ArmDeadline() {
  if (!stream_.open()) return;
  if (!stream_.connected()) {
    deadline_timer_.StartAt(connect_started_ + Millis(config_.params.connect_timeout_ms));
  } else if (!sent_.empty()) {
    deadline_timer_.StartAt(sent_.front().deadline);
  } else {
    deadline_timer_.Cancel();
  }
}

void Subscriber::OnDeadline() {
  if (!stream_.open()) return;
  // No connection within connect_timeout_ms, or a server that accepts and then stays silent.
  if (!stream_.connected() || (!sent_.empty() && Now() >= sent_.front().deadline)) {
    ConnectionLost();
    return;
  }
  ArmDeadline();
}

void Subscriber::CloseConnection() {
  stream_.Close();  // no callback runs after this
  sent_.clear();
  deadline_timer_.Cancel();
}

void Subscriber::ConnectionLost() {
  CloseConnection();
  bool any_waiting = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& ch = it->second;
      if (ch.waiters.empty()) {  // nothing is subscribed any more: nothing to undo
        it = channels_.erase(it);
        continue;
      }
      if (ch.state != State::kPending && ch.state != State::kRefused) {
        ch.state = State::kPending;
        to_send_.push_back(it->first);
      }
      any_waiting = true;
      // Wake everyone: a release may have been missed; they retry, then poll until resubscribed.
      ch.waiters.TellLost();
      ++it;
    }
  }
  if (any_waiting && !shut_down_) reconnect_timer_.StartAfter(kReconnectDelay);
}

// ----- subscribing -----------------------------------------------------------------------

void Subscriber::SubscribePending() {
  if (shut_down_) return;
  const bool can_send = stream_.connected();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    kick_posted_ = false;
    if (!stream_.open() && reconnect_timer_.pending()) return;  // the timer calls again
    if (stream_.open() && !stream_.connected()) return;        // OnStreamConnected calls again
    for (const std::string& name : to_send_) {
      auto it = channels_.find(name);
      if (it == channels_.end() || it->second.state != State::kPending) continue;
      if (it->second.waiters.empty()) {  // left before it was ever sent
        channels_.erase(it);
        continue;
      }
      if (can_send) it->second.state = State::kSubscribing;
      names.push_back(name);
    }
    to_send_ = can_send ? std::vector<std::string>() : names;
  }
  if (names.empty()) return;
  if (!can_send) {
    if (!StartConnect()) ConnectionLost();  // retried after kReconnectDelay
    return;
  }
  const char* subscribe = mode_ == PubSubMode::kSharded ? "SSUBSCRIBE" : "SUBSCRIBE";
  // One channel per command, so that an error reply can be matched to its channel.
  for (const std::string& name : names) {
    if (!Send(Command::kSubscribe, {subscribe, name}, name)) return;
  }
  if (!sweep_timer_.pending()) sweep_timer_.StartAfter(kLinger);
}

void Subscriber::Sweep() {
  std::vector<std::string> idle;
  bool any = false;
  bool retry = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const TimePoint now = Now();
    for (auto it = channels_.begin(); it != channels_.end();) {
      Channel& ch = it->second;
      if (ch.state == State::kRefused) {
        if (ch.waiters.empty()) {  // not subscribed: nothing to undo
          it = channels_.erase(it);
          continue;
        }
        if (now >= ch.retry_at) {
          ch.state = State::kPending;
          to_send_.push_back(it->first);
          retry = true;
        }
      }
      any = true;
      if (ch.state == State::kLive && ch.waiters.IdleFor(now, kLinger) &&
          stream_.connected()) {
        ch.state = State::kUnsubscribing;
        idle.push_back(it->first);
      }
      ++it;
    }
  }
  const char* unsubscribe = mode_ == PubSubMode::kSharded ? "SUNSUBSCRIBE" : "UNSUBSCRIBE";
  const uint64_t connection = stream_.generation();
  for (const auto& name : idle) {
    if (stream_.generation() != connection || !Send(Command::kUnsubscribe, {unsubscribe, name}, name)) {
      break;  // the connection was lost: ConnectionLost reset every channel
    }
  }
  if (retry) SubscribePending();
  if (any && !shut_down_) sweep_timer_.StartAfter(kLinger / 2);
}

// ----- replies ---------------------------------------------------------------------------

void Subscriber::OnStreamReply(redisReply* reply) {
  std::vector<std::string> misrouted;
  if (!HandleReply(*reply, &misrouted)) {
    ConnectionLost();
    return;
  }
  // Outside the lock: the owner may Watch and Unwatch from here.
  if (on_misrouted_) {
    for (const std::string& channel : misrouted) on_misrouted_(channel);
  }
}

bool Subscriber::HandleReply(const redisReply& reply, std::vector<std::string>* misrouted) {
  const bool sharded = mode_ == PubSubMode::kSharded;
  if (reply.type == REDIS_REPLY_ERROR) {
    if (sent_.empty()) return false;  // an error nobody asked for
    Sent sent = std::move(sent_.front());
    sent_.pop_front();
    switch (sent.command) {
      case Command::kAuth:  // refused: tried again on a new connection, later
        return false;
      case Command::kSubscribe:  // MOVED (the slot is on another node), NOPERM...
        Refuse(sent.channel, misrouted);
        return true;
      case Command::kUnsubscribe:  // MOVED: the slot left, and the subscription with it
        Unsubscribed(sent.channel);
        return true;
    }
    return false;
  }
  if (reply.type != REDIS_REPLY_ARRAY) {
    if (sent_.empty() || sent_.front().command != Command::kAuth) return false;
    sent_.pop_front();  // AUTH accepted
    return true;
  }
  if (reply.elements < 3 || !IsString(reply.element[0])) return false;
  const redisReply* kind = reply.element[0];
  const bool is_subscribe = Is(kind, sharded ? "ssubscribe" : "subscribe");
  const bool is_unsubscribe = Is(kind, sharded ? "sunsubscribe" : "unsubscribe");
  const bool is_message = Is(kind, sharded ? "smessage" : "message");
  if (!is_subscribe && !is_unsubscribe && !is_message) return true;  // not ours: ignored
  if (!IsString(reply.element[1])) return false;
  const std::string channel(reply.element[1]->str, reply.element[1]->len);

  const Command expected = is_subscribe ? Command::kSubscribe : Command::kUnsubscribe;
  const bool answers_front = !is_message && !sent_.empty() &&
                             sent_.front().command == expected && sent_.front().channel == channel;
  if (answers_front) sent_.pop_front();
  if (is_subscribe && !answers_front) return false;  // a confirmation nobody asked for

  if (is_unsubscribe && answers_front) {
    Unsubscribed(channel);
    return true;
  }
  bool dropped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(channel);
    if (it == channels_.end()) return true;  // e.g. a message for a channel just swept
    Channel& ch = it->second;
    if (is_message) {
      std::string_view waiter;
      uint64_t token = 0;
      if (IsString(reply.element[2]) &&
          ParseHandOver(std::string_view(reply.element[2]->str, reply.element[2]->len), &waiter,
                        &token)) {
        // Only the waiter the lock was handed to hears of it: the others stay asleep.
        ch.waiters.TellHandedOver(waiter, token);
      } else if (std::string id, reason;
                 IsString(reply.element[2]) &&
                 ParseReleaseRequest(std::string_view(reply.element[2]->str, reply.element[2]->len),
                                     &id, &reason)) {
        ch.waiters.TellReleaseRequested(id, reason);  // holders only: waiters sleep on
      } else if (IsString(reply.element[2]) &&
                 std::string_view(reply.element[2]->str, reply.element[2]->len) == "changed") {
        ch.waiters.TellChanged();  // a new value (set_value.lua): for observers only
      } else {
        ch.waiters.TellReleased();
      }
    } else if (is_subscribe) {
      if (ch.state == State::kSubscribing) {
        ch.state = State::kLive;
        ch.waiters.TellLive();
      }
    } else {
      // The server dropped the subscription on its own. Only a live one counts: a push older
      // than our SSUBSCRIBE in flight is settled by that SSUBSCRIBE's answer.
      dropped = ch.state == State::kLive;
    }
  }
  if (dropped) {
    // In a cluster the slot moved away (migration, failover). Elsewhere nothing does that:
    // start over.
    if (!sharded) return false;
    Refuse(channel, misrouted);
  }
  return true;
}

void Subscriber::Unsubscribed(const std::string& channel) {
  bool resubscribe = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(channel);
    if (it == channels_.end()) return;
    if (it->second.waiters.empty()) {
      channels_.erase(it);
    } else {  // someone started waiting while the UNSUBSCRIBE was out
      it->second.state = State::kPending;
      to_send_.push_back(channel);
      resubscribe = true;
    }
  }
  if (resubscribe) SubscribePending();
}

void Subscriber::Refuse(const std::string& channel, std::vector<std::string>* misrouted) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = channels_.find(channel);
    if (it != channels_.end()) {
      Channel& ch = it->second;
      ch.state = State::kRefused;
      ch.retry_at = Now() + kRefusedRetry;  // not in a loop against the same node
      ch.waiters.TellLost();  // retry now; then wait on timing
    }
  }
  if (mode_ == PubSubMode::kSharded) misrouted->push_back(channel);
  if (!sweep_timer_.pending() && !shut_down_) sweep_timer_.StartAfter(kLinger / 2);
}

void Subscriber::ShutdownOnLoop() {
  shut_down_ = true;
  reconnect_timer_.Free();
  sweep_timer_.Free();
  deadline_timer_.Free();
  CloseConnection();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [name, ch] : channels_) ch.waiters.TellReleased();
}

}  // namespace dlock::redis
