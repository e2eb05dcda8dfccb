#include "redis/wire/async_connection.h"

#include "redis/wire/reply.h"
#include "redis/wire/sync_connection.h"

namespace dlock::redis {

AsyncConnection::AsyncConnection(EventLoop* loop, const RedisConfig& config)
    : loop_(loop),
      config_(config),
      server_(config.Describe()),
      stream_(loop, config, this),
      timeout_timer_(loop, [this] { CheckTimeout(); }) {}

AsyncConnection::~AsyncConnection() {
  on_lost_ = nullptr;
  Drop("connection closed");
}

void AsyncConnection::Lost() {
  if (on_lost_ && shutdown_reason_.empty()) on_lost_();
}

bool AsyncConnection::EnsureConnected(std::string* error) {
  if (stream_.open()) return true;
  if (!shutdown_reason_.empty()) {
    *error = server_ + ": " + shutdown_reason_;
    return false;
  }
  if (!stream_.Open(error)) return false;
  // Queued before anything else, so they run first once connected. Their replies are not
  // read: a refused AUTH shows up as the next command's NOAUTH error.
  const TimePoint now = Now();
  std::vector<std::vector<std::string>> setup;
  if (config_.password.has_value()) setup.push_back(config_.AuthCommand());
  if (config_.db != 0) setup.push_back({"SELECT", std::to_string(config_.db)});
  // Load the scripts up front, pipelined ahead of everything: the first heartbeat round of
  // 10,000 locks must not meet 10,000 NOSCRIPTs.
  for (ScriptId id : {ScriptId::kAcquire, ScriptId::kRelease, ScriptId::kExtend}) {
    setup.push_back({"SCRIPT", "LOAD", GetScript(id).body});
  }
  for (const auto& argv : setup) {
    if (!stream_.Write(argv)) {
      stream_.Close();
      *error = "out of memory writing to " + server_;
      return false;
    }
    pending_.push_back(Pending{nullptr, now});
    ++commands_sent_;
  }
  for (ScriptId id : {ScriptId::kAcquire, ScriptId::kRelease, ScriptId::kExtend}) {
    script_loaded_at_[GetScript(id).sha1] = commands_sent_;
  }
  return true;
}

void AsyncConnection::FailLater(Callback cb, const Status& error) {
  auto fail = [cb = std::move(cb), error] { cb(nullptr, error); };
  if (!loop_->Post(fail)) fail();  // nothing runs later: the loop is gone
}

uint64_t AsyncConnection::Command(const std::vector<std::string>& argv, Callback cb) {
  std::string error;
  if (!EnsureConnected(&error)) {  // fail later, never inside the call
    Lost();
    FailLater(std::move(cb), Status::IoError(error));
    return 0;
  }
  if (!stream_.Write(argv)) {  // out of memory: the replies would no longer match
    FailLater(std::move(cb), Status::IoError("out of memory writing to " + server_));
    Drop("out of memory writing to " + server_);
    return 0;
  }
  pending_.push_back(Pending{std::move(cb), Now()});
  if (!timeout_timer_.pending()) ArmTimeout();
  return ++commands_sent_;
}

void AsyncConnection::Eval(const Script& script, const std::vector<std::string>& keys,
                           const std::vector<std::string>& args, Callback cb) {
  auto argv = EvalShaArgv(script, keys, args);
  auto number = std::make_shared<uint64_t>(0);  // known once sent; cb never runs before that
  *number = Command(argv, [this, &script, argv, number, cb = std::move(cb)](redisReply* reply,
                                                                            const Status& error) {
    if (!IsNoScript(reply)) {
      cb(reply, error);
      return;
    }
    // The server lost its script cache (SCRIPT FLUSH, restart): load it once for all the
    // commands that meet this, then retry, in order on this connection.
    if (script_loaded_at_[script.sha1] < *number) {
      script_loaded_at_[script.sha1] =
          Command({"SCRIPT", "LOAD", script.body}, [](redisReply*, const Status&) {});
    }
    Command(argv, cb);
  });
}

void AsyncConnection::OnStreamReply(redisReply* reply) {
  if (pending_.empty()) {
    // Nobody asked: the replies no longer match the commands.
    Drop(server_ + " sent a reply nobody asked for");
    Lost();
    return;
  }
  Pending done = std::move(pending_.front());
  pending_.pop_front();  // the timer, when it fires, looks at the new oldest
  if (done.cb) done.cb(reply, Status::Ok());
}

void AsyncConnection::OnStreamLost(const Status& why) {
  timeout_timer_.Cancel();
  Lost();
  FailPending(Status::IoError(why.message()));
}

void AsyncConnection::FailPending(const Status& error) {
  std::deque<Pending> failed;
  failed.swap(pending_);
  for (Pending& p : failed) {
    if (p.cb) p.cb(nullptr, error);
  }
}

void AsyncConnection::ArmTimeout() {
  if (pending_.empty()) {
    timeout_timer_.Cancel();
    return;
  }
  timeout_timer_.StartAt(pending_.front().sent + Millis(config_.params.timeout_ms));
}

void AsyncConnection::CheckTimeout() {
  if (pending_.empty()) return;
  if (Now() - pending_.front().sent >= Millis(config_.params.timeout_ms)) {
    Lost();
    Drop(server_ + " did not answer within timeout_ms=" + std::to_string(config_.params.timeout_ms));
    return;
  }
  ArmTimeout();
}

void AsyncConnection::Drop(const std::string& why) {
  timeout_timer_.Cancel();
  stream_.Close();
  FailPending(Status::IoError(why));
}

void AsyncConnection::Shutdown(const std::string& why) {
  shutdown_reason_ = why;
  Drop(why);
  timeout_timer_.Free();
}

}  // namespace dlock::redis
