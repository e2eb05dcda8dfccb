#include "redis/async_connection.h"

#include <hiredis/adapters/libevent.h>

#include "redis/reply.h"
#include "redis/sync_connection.h"

namespace dlock::redis {

struct AsyncConnection::Pending {
  AsyncConnection* self;
  Callback cb;
};

AsyncConnection::AsyncConnection(EventLoop* loop, const RedisConfig& config)
    : loop_(loop),
      config_(config),
      server_(config.Describe()),
      timeout_timer_(loop, [this] { CheckTimeout(); }) {}

AsyncConnection::~AsyncConnection() {
  on_lost_ = nullptr;
  Drop("connection closed");
}

void AsyncConnection::Lost() {
  if (on_lost_ && shutdown_reason_.empty()) on_lost_();
}

redisAsyncContext* OpenAsyncContext(EventLoop* loop, const RedisConfig& config, void* data,
                                    redisConnectCallback* on_connect,
                                    redisDisconnectCallback* on_disconnect, std::string* error) {
  redisAsyncContext* ac = config.socket_path.empty()
                              ? redisAsyncConnect(config.host.c_str(), config.port)
                              : redisAsyncConnectUnix(config.socket_path.c_str());
  if (ac == nullptr) {
    *error = "out of memory";
    return nullptr;
  }
  if (ac->err != 0) {
    *error = "cannot connect to " + config.Describe() + ": " + ac->errstr;
    redisAsyncFree(ac);
    return nullptr;
  }
  GuardAsyncReader(ac);
  ac->data = data;
  redisLibeventAttach(ac, loop->base());
  redisAsyncSetConnectCallback(ac, on_connect);
  redisAsyncSetDisconnectCallback(ac, on_disconnect);
  // Queued before anything else, so they run first once connected.
  std::vector<std::vector<std::string>> setup;
  if (config.password.has_value()) {
    setup.push_back({"AUTH"});
    if (config.user.has_value()) setup.back().push_back(*config.user);
    setup.back().push_back(*config.password);
  }
  if (config.db != 0) setup.push_back({"SELECT", std::to_string(config.db)});
  for (const auto& argv : setup) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const auto& a : argv) {
      ptrs.push_back(a.data());
      lens.push_back(a.size());
    }
    redisAsyncCommandArgv(ac, nullptr, nullptr, static_cast<int>(ptrs.size()), ptrs.data(),
                          lens.data());
  }
  return ac;
}

bool AsyncConnection::EnsureConnected(std::string* error) {
  if (ctx_ != nullptr) return true;
  if (!shutdown_reason_.empty()) {
    *error = server_ + ": " + shutdown_reason_;
    return false;
  }
  ctx_ = OpenAsyncContext(loop_, config_, this, &AsyncConnection::OnConnect,
                          &AsyncConnection::OnDisconnect, error);
  if (ctx_ == nullptr) return false;
  drop_reason_.clear();
  // Load the scripts up front, pipelined ahead of everything: the first heartbeat round of
  // 10,000 locks must not meet 10,000 NOSCRIPTs.
  for (ScriptId id : {ScriptId::kAcquire, ScriptId::kRelease, ScriptId::kExtend}) {
    const Script& script = GetScript(id);
    script_loaded_at_[script.sha1] =
        Command({"SCRIPT", "LOAD", script.body}, [](redisReply*, const Status&) {});
  }
  return true;
}

void AsyncConnection::OnConnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<AsyncConnection*>(ac->data);
  if (status != REDIS_OK && self != nullptr && self->ctx_ == ac) {
    // hiredis frees the context after this callback and fails its pending commands.
    self->drop_reason_ = std::string("cannot connect to ") + self->server_ + ": " + ac->errstr;
    self->ctx_ = nullptr;
    self->Lost();
  }
}

void AsyncConnection::OnDisconnect(const redisAsyncContext* ac, int) {
  auto* self = static_cast<AsyncConnection*>(ac->data);
  if (self != nullptr && self->ctx_ == ac) {
    if (self->drop_reason_.empty()) {
      self->drop_reason_ = self->server_ + " closed the connection" +
                           (ac->err != 0 ? std::string(": ") + ac->errstr : std::string());
    }
    self->ctx_ = nullptr;
    self->Lost();
  }
}

void AsyncConnection::OnReply(redisAsyncContext* ac, void* reply, void* privdata) {
  std::unique_ptr<Pending> pending(static_cast<Pending*>(privdata));
  AsyncConnection* self = pending->self;
  if (!self->sent_.empty()) self->sent_.pop_front();
  if (reply == nullptr) {
    self->Lost();
    std::string why = self->drop_reason_;
    if (why.empty()) why = ac->errstr[0] != '\0' ? self->server_ + ": " + ac->errstr
                                                  : self->server_ + ": connection lost";
    pending->cb(nullptr, Status::IoError(why));
    return;
  }
  pending->cb(static_cast<redisReply*>(reply), Status::Ok());
}

uint64_t AsyncConnection::Command(const std::vector<std::string>& argv, Callback cb) {
  std::string error;
  if (!EnsureConnected(&error)) {  // fail later, never inside the call (unless nothing runs later)
    Lost();
    auto fail = [cb, error] { cb(nullptr, Status::IoError(error)); };
    if (!loop_->Post(fail)) fail();
    return 0;
  }
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  for (const auto& a : argv) {
    ptrs.push_back(a.data());
    lens.push_back(a.size());
  }
  auto* pending = new Pending{this, std::move(cb)};
  if (redisAsyncCommandArgv(ctx_, &AsyncConnection::OnReply, pending,
                            static_cast<int>(ptrs.size()), ptrs.data(), lens.data()) != REDIS_OK) {
    std::unique_ptr<Pending> owned(pending);
    auto fail = [cb = owned->cb, why = server_ + ": connection is closing"] {
      cb(nullptr, Status::IoError(why));
    };
    if (!loop_->Post(fail)) fail();
    return 0;
  }
  sent_.push_back(Now());
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

void AsyncConnection::ArmTimeout() {
  if (sent_.empty()) return;
  timeout_timer_.StartAt(sent_.front() + Millis(config_.params.timeout_ms));
}

void AsyncConnection::CheckTimeout() {
  if (sent_.empty()) return;
  if (Now() - sent_.front() >= Millis(config_.params.timeout_ms)) {
    Drop(server_ + " did not answer within timeout_ms=" + std::to_string(config_.params.timeout_ms));
    return;
  }
  ArmTimeout();
}

void AsyncConnection::Drop(const std::string& why) {
  timeout_timer_.Cancel();
  redisAsyncContext* ac = ctx_;
  if (ac == nullptr) return;
  drop_reason_ = why;
  ctx_ = nullptr;
  // Fails every pending command (their callbacks see a null reply and drop_reason_; each pops
  // its own send time). A callback may send anew on a fresh connection: its time stays.
  redisAsyncFree(ac);
}

void AsyncConnection::Shutdown(const std::string& why) {
  shutdown_reason_ = why;
  Drop(why);
  sent_.clear();
  timeout_timer_.Free();
}

}  // namespace dlock::redis
