#include "redis/topology/node_channel.h"

#include <algorithm>
#include <set>

namespace dlock::redis {
namespace {

// Idle blocking connections kept for reuse; more are opened when more threads call at once.
constexpr size_t kMaxIdleConnections = 64;

}  // namespace

// A pooled blocking connection for the duration of one call.
class NodeChannel::Lease {
 public:
  explicit Lease(NodeChannel* channel) : channel_(channel) {}
  ~Lease() {
    if (conn_ == nullptr || conn_->broken()) return;
    std::lock_guard<std::mutex> lock(channel_->pool_mu_);
    if (channel_->idle_.size() < kMaxIdleConnections) channel_->idle_.push_back(std::move(conn_));
  }
  Status Open(TimePoint deadline) {
    {
      std::lock_guard<std::mutex> lock(channel_->pool_mu_);
      if (!channel_->idle_.empty()) {
        conn_ = std::move(channel_->idle_.back());
        channel_->idle_.pop_back();
        reused_ = true;
        return Status::Ok();
      }
    }
    return SyncConnection::Connect(channel_->config_, deadline, &conn_);
  }
  SyncConnection* operator->() { return conn_.get(); }
  SyncConnection& operator*() { return *conn_; }
  bool reused() const { return reused_; }

 private:
  NodeChannel* channel_;
  bool reused_ = false;
  std::unique_ptr<SyncConnection> conn_;
};

NodeChannel::NodeChannel(EventLoop* loop, RedisConfig config, PubSubMode mode,
                         std::function<void(const std::string& channel)> on_misrouted)
    : loop_(loop),
      config_(std::move(config)),
      server_(config_.Describe()),
      async_(loop, config_),
      subscriber_(loop, config_, mode, std::move(on_misrouted)) {}

// The whole call, connecting included, ends by start + connect_timeout_ms + timeout_ms; each
// command by timeout_ms after it starts. A pooled connection that fails at once (reset,
// closed: the server restarted or dropped an idle client) was most likely stale: the pool is
// dropped and fn runs once more on a fresh connection, within the same bound (a guarded node
// first waits for its owner's recheck, and the retry gets a bound of its own). A timeout is
// not retried: the server is there but silent, and a retry would only double the caller's wait.
template <typename Fn>
Status NodeChannel::WithConnection(bool gated, Fn&& fn) {
  const Millis connect(config_.params.connect_timeout_ms);
  const Millis command(config_.params.timeout_ms);
  TimePoint call_deadline = Now() + connect + command;
  for (int round = 0;; ++round) {
    if (gated && !vouched()) return NotVouched();
    Lease conn(this);
    Status s = conn.Open(std::min(call_deadline, Now() + connect));
    if (s.code() == Code::kIoError) Failed();
    if (!s.ok()) return s;
    s = fn(*conn, std::min(call_deadline, Now() + command));
    if (s.code() != Code::kIoError) return s;
    Failed();
    if (conn->timed_out()) return s;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      idle_.clear();
    }
    if (!conn.reused() || round > 0) return s;
    if (gated && guarded_) {
      // A restarted server answers at this address now, perhaps empty: only the master the
      // owner finds again may take the retry.
      Status found = recheck_();
      if (!vouched()) return found.ok() ? s : found;
      call_deadline = Now() + connect + command;
    }
  }
}

void NodeChannel::Guard(std::function<Status()> recheck, std::function<void()> recheck_in_background) {
  guarded_ = true;
  recheck_ = std::move(recheck);
  recheck_in_background_ = std::move(recheck_in_background);
  async_.set_on_lost([this] {
    Failed();
    recheck_in_background_();
  });
}

void NodeChannel::Failed() { failures_.fetch_add(1); }

void NodeChannel::Vouch(uint64_t failures_seen) {
  uint64_t v = vouched_.load();
  while (v < failures_seen && !vouched_.compare_exchange_weak(v, failures_seen)) {
  }
}

bool NodeChannel::vouched() const { return !guarded_ || vouched_.load() == failures_.load(); }

Status NodeChannel::NotVouched() const {
  return Status::IoError(server_ + ": a connection to it failed, and it has not been found to be " +
                         "the master again since");
}

bool NodeChannel::PassesGuard(ReplyCallback& done) {
  if (vouched()) return true;
  recheck_in_background_();
  auto fail = [done = std::move(done), why = NotVouched()] { done(nullptr, why); };
  if (!loop_->Post(fail)) fail();
  return false;
}

Status NodeChannel::Ping() {
  return WithConnection(false, [&](SyncConnection& conn, TimePoint deadline) {
    ReplyPtr reply;
    Status s = conn.Command({"PING"}, deadline, &reply);
    if (!s.ok()) return s;
    if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(reply.get(), server_);
    return Status::Ok();
  });
}

Status NodeChannel::Eval(const ScriptCall& call, ReplyPtr* reply) {
  if (call.wait_replicas > 0) return EvalPipelined(call, false, reply);
  return WithConnection(true, [&](SyncConnection& conn, TimePoint deadline) {
    return conn.Eval(GetScript(call.script), call.keys, call.args, deadline, reply);
  });
}

void NodeChannel::EvalAll(const std::vector<ScriptCall>& calls) {
  // One pipeline for all of them: closing a client holding 10,000 locks is one round trip,
  // bounded like any call. A stale pooled connection is retried once on a fresh one
  // (WithConnection), from the first unanswered call.
  size_t answered = 0;
  (void)WithConnection(true, [&](SyncConnection& conn, TimePoint deadline) {
    std::set<ScriptId> scripts;
    for (size_t i = answered; i < calls.size(); ++i) scripts.insert(calls[i].script);
    for (ScriptId id : scripts) {
      Status st = conn.LoadScript(GetScript(id), deadline);
      if (!st.ok()) return st;
    }
    for (size_t i = answered; i < calls.size(); ++i) {
      conn.AppendScriptCall(GetScript(calls[i].script), false, calls[i].keys, calls[i].args);
    }
    for (; answered < calls.size(); ++answered) {
      ReplyPtr reply;
      Status st = conn.ReadReply(deadline, &reply);
      if (!st.ok()) return st;
    }
    return Status::Ok();
  });
}

void NodeChannel::EvalAsync(const ScriptCall& call, ReplyCallback done) {
  if (call.wait_replicas > 0) return EvalPipelinedAsync(call, false, std::move(done));
  if (!PassesGuard(done)) return;
  async_.Eval(GetScript(call.script), call.keys, call.args, std::move(done));
}

Status NodeChannel::Command(const std::vector<std::string>& argv, ReplyPtr* reply) {
  return WithConnection(false, [&](SyncConnection& conn, TimePoint deadline) {
    return conn.Command(argv, deadline, reply);
  });
}

void NodeChannel::CommandAsync(const std::vector<std::string>& argv, ReplyCallback done) {
  async_.Command(argv, std::move(done));
}

Status NodeChannel::EvalAsking(const ScriptCall& call, ReplyPtr* reply) {
  return EvalPipelined(call, true, reply);
}

void NodeChannel::EvalAskingAsync(const ScriptCall& call, ReplyCallback done) {
  EvalPipelinedAsync(call, true, std::move(done));
}

std::vector<std::string> NodeChannel::WaitArgv(const ScriptCall& call) const {
  return {"WAIT", std::to_string(call.wait_replicas),
          std::to_string(std::max(1, config_.params.timeout_ms / 2))};
}

Status NodeChannel::CheckAcknowledged(const redisReply* script_reply, const redisReply* wait_reply,
                                      int wanted) const {
  // The script's own error (a redirection, a refusal) speaks for itself.
  if (script_reply->type == REDIS_REPLY_ERROR) return Status::Ok();
  if (wait_reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(wait_reply, server_);
  if (wait_reply->type != REDIS_REPLY_INTEGER) {
    return Status::BackendError(server_ + " answered WAIT with something other than a count");
  }
  if (wait_reply->integer >= wanted) return Status::Ok();
  return Status::BackendError(
      server_ + ": only " + std::to_string(std::max<long long>(0, wait_reply->integer)) + " of " +
      std::to_string(wanted) + " replicas acknowledged the write within " +
      std::to_string(std::max(1, config_.params.timeout_ms / 2)) + " ms (wait_replicas=" +
      std::to_string(wanted) + ")");
}

Status NodeChannel::EvalPipelined(const ScriptCall& call, bool asking, ReplyPtr* reply) {
  return WithConnection(true, [&](SyncConnection& conn, TimePoint deadline) {
    if (asking) conn.Append({"ASKING"});
    conn.AppendScriptCall(GetScript(call.script), true, call.keys, call.args);
    if (call.wait_replicas > 0) conn.Append(WaitArgv(call));
    Status s;
    if (asking) {
      // A refused ASKING shows in the script's answer too (redirected or refused).
      ReplyPtr asking_reply;
      s = conn.ReadReply(deadline, &asking_reply);
      if (!s.ok()) return s;
    }
    s = conn.ReadReply(deadline, reply);
    if (!s.ok() || call.wait_replicas == 0) return s;
    ReplyPtr acknowledged;
    s = conn.ReadReply(deadline, &acknowledged);
    if (!s.ok()) return s;
    s = CheckAcknowledged(reply->get(), acknowledged.get(), call.wait_replicas);
    if (!s.ok()) reply->reset();
    return s;
  });
}

void NodeChannel::EvalPipelinedAsync(const ScriptCall& call, bool asking, ReplyCallback done) {
  // Sent in the same loop iteration, in order, on the one async connection: if one fails, so
  // do the ones after it.
  if (!PassesGuard(done)) return;
  if (asking) async_.Command({"ASKING"}, [](redisReply*, const Status&) {});
  const auto eval = EvalBodyArgv(GetScript(call.script), call.keys, call.args);
  if (call.wait_replicas == 0) {
    async_.Command(eval, std::move(done));
    return;
  }
  auto kept = std::make_shared<ReplyPtr>();
  async_.Command(eval, [kept](redisReply* reply, const Status& error) {
    if (error.ok()) *kept = CloneReply(reply);
  });
  async_.Command(WaitArgv(call), [this, kept, wanted = call.wait_replicas,
                                  done = std::move(done)](redisReply* reply, const Status& error) {
    if (!error.ok()) return done(nullptr, error);
    if (*kept == nullptr) return done(nullptr, Status::Internal("the script's answer was lost"));
    Status s = CheckAcknowledged(kept->get(), reply, wanted);
    if (!s.ok()) return done(nullptr, s);
    done(kept->get(), Status::Ok());
  });
}

void NodeChannel::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  subscriber_.Watch(channel, watcher);
}

void NodeChannel::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  subscriber_.Unwatch(channel, watcher);
}

void NodeChannel::ShutdownOnLoop() {
  async_.Shutdown("the client was closed");
  subscriber_.ShutdownOnLoop();
}

}  // namespace dlock::redis
