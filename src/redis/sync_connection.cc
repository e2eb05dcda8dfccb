#include "redis/sync_connection.h"

#include <sys/time.h>

namespace dlock::redis {
namespace {

timeval ToTimeval(int ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

void ToArgv(const std::vector<std::string>& argv, std::vector<const char*>* ptrs,
            std::vector<size_t>* lens) {
  ptrs->clear();
  lens->clear();
  for (const auto& a : argv) {
    ptrs->push_back(a.data());
    lens->push_back(a.size());
  }
}

}  // namespace

std::vector<std::string> EvalShaArgv(const Script& script, const std::vector<std::string>& keys,
                                     const std::vector<std::string>& args) {
  std::vector<std::string> argv{"EVALSHA", script.sha1, std::to_string(keys.size())};
  argv.insert(argv.end(), keys.begin(), keys.end());
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Status SyncConnection::Connect(const RedisConfig& config, std::unique_ptr<SyncConnection>* out) {
  const std::string server = config.Describe();
  timeval connect_tv = ToTimeval(config.params.connect_timeout_ms);
  redisContext* ctx = config.socket_path.empty()
                          ? redisConnectWithTimeout(config.host.c_str(), config.port, connect_tv)
                          : redisConnectUnixWithTimeout(config.socket_path.c_str(), connect_tv);
  if (ctx == nullptr) return Status(Code::kNoMemory, "out of memory connecting to " + server);
  if (ctx->err != 0) {
    Status s = Status::IoError("cannot connect to " + server + ": " + ctx->errstr);
    redisFree(ctx);
    return s;
  }
  std::unique_ptr<SyncConnection> conn(new SyncConnection(ctx, server));
  redisSetTimeout(ctx, ToTimeval(config.params.timeout_ms));
  if (config.socket_path.empty()) redisEnableKeepAlive(ctx);
  ReplyPtr reply;
  if (config.password.has_value()) {
    std::vector<std::string> auth{"AUTH"};
    if (config.user.has_value()) auth.push_back(*config.user);
    auth.push_back(*config.password);
    Status s = conn->Command(auth, &reply);
    if (!s.ok()) return s;
    if (reply->type == REDIS_REPLY_ERROR) {
      return Status::AuthError(server + " refused the credentials" +
                               (config.user ? " for user '" + *config.user + "'" : "") + ": " +
                               std::string(reply->str, reply->len));
    }
  }
  if (config.db != 0) {
    Status s = conn->Command({"SELECT", std::to_string(config.db)}, &reply);
    if (!s.ok()) return s;
    if (reply->type == REDIS_REPLY_ERROR) {
      Status e = ErrorReplyStatus(reply.get(), server);
      if (e.code() == Code::kAuthError) return e;
      return Status::InvalidArgument(server + " cannot select database " +
                                     std::to_string(config.db) + ": " +
                                     std::string(reply->str, reply->len));
    }
  }
  *out = std::move(conn);
  return Status::Ok();
}

SyncConnection::~SyncConnection() { redisFree(ctx_); }

Status SyncConnection::IoError(const char* doing) {
  broken_ = true;
  if (ctx_->err == REDIS_ERR_PROTOCOL) {
    return Status::BackendError(server_ + " does not speak the Redis protocol: " + ctx_->errstr);
  }
  std::string why = ctx_->err != 0 ? ctx_->errstr : "connection lost";
  if (ctx_->err == REDIS_ERR_IO && (why.find("Resource temporarily unavailable") != std::string::npos)) {
    why = "timed out waiting for a reply";
  }
  return Status::IoError(std::string(doing) + " " + server_ + " failed: " + why);
}

Status SyncConnection::Command(const std::vector<std::string>& argv, ReplyPtr* reply) {
  if (broken_) return Status::IoError("connection to " + server_ + " is broken");
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ToArgv(argv, &ptrs, &lens);
  void* r = redisCommandArgv(ctx_, static_cast<int>(ptrs.size()), ptrs.data(), lens.data());
  if (r == nullptr) return IoError("talking to");
  reply->reset(static_cast<redisReply*>(r));
  return Status::Ok();
}

Status SyncConnection::LoadScript(const Script& script) {
  ReplyPtr reply;
  Status s = Command({"SCRIPT", "LOAD", script.body}, &reply);
  if (!s.ok()) return s;
  if (reply->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(reply.get(), server_);
  if (reply->type != REDIS_REPLY_STRING || std::string(reply->str, reply->len) != script.sha1) {
    return Status::BackendError(server_ + " loaded script " + script.name +
                                " under an unexpected SHA1");
  }
  return Status::Ok();
}

Status SyncConnection::Eval(const Script& script, const std::vector<std::string>& keys,
                            const std::vector<std::string>& args, ReplyPtr* reply) {
  const auto argv = EvalShaArgv(script, keys, args);
  Status s = Command(argv, reply);
  if (!s.ok() || !IsNoScript(reply->get())) return s;
  s = LoadScript(script);
  if (!s.ok()) return s;
  return Command(argv, reply);
}

void SyncConnection::Append(const std::vector<std::string>& argv) {
  std::vector<const char*> ptrs;
  std::vector<size_t> lens;
  ToArgv(argv, &ptrs, &lens);
  redisAppendCommandArgv(ctx_, static_cast<int>(ptrs.size()), ptrs.data(), lens.data());
}

Status SyncConnection::ReadReply(ReplyPtr* reply) {
  if (broken_) return Status::IoError("connection to " + server_ + " is broken");
  void* r = nullptr;
  if (redisGetReply(ctx_, &r) != REDIS_OK || r == nullptr) return IoError("reading from");
  reply->reset(static_cast<redisReply*>(r));
  return Status::Ok();
}

}  // namespace dlock::redis
