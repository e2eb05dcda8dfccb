#include "redis/wire/async_connection.h"

#include <algorithm>
#include <new>

#include "redis/wire/reply.h"
#include "redis/wire/resp.h"
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
  shutdown_reason_ = "connection closed";  // a failed callback's new command must not reconnect
  Drop(shutdown_reason_);
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
    if (!pending_.MakeRoom()) {
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

uint64_t AsyncConnection::Push(Callback cb, const Script* script, size_t command_size) {
  if (!pending_.MakeRoom()) {  // the command went out unanswerable: the replies would not match
    FailLater(std::move(cb), Status::IoError("out of memory writing to " + server_));
    Drop("out of memory writing to " + server_);
    return 0;
  }
  pending_.push_back(Pending{std::move(cb), Now(), script, commands_sent_ + 1, command_size});
  if (!timeout_timer_.pending()) ArmTimeout();
  return ++commands_sent_;
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
  return Push(std::move(cb), nullptr, 0);
}

uint64_t AsyncConnection::SendFormatted(std::string_view command, Callback cb) {
  std::string error;
  if (!EnsureConnected(&error)) {
    Lost();
    FailLater(std::move(cb), Status::IoError(error));
    return 0;
  }
  if (!stream_.WriteFormatted(command)) {
    FailLater(std::move(cb), Status::IoError("out of memory writing to " + server_));
    Drop("out of memory writing to " + server_);
    return 0;
  }
  return Push(std::move(cb), nullptr, 0);
}

void AsyncConnection::Eval(const Script& script, const std::vector<std::string>& keys,
                           const std::vector<std::string>& args, Callback cb) {
  std::string error;
  if (!EnsureConnected(&error)) {
    Lost();
    FailLater(std::move(cb), Status::IoError(error));
    return;
  }
  // Formatted straight into sent_, where it stays until answered (the NOSCRIPT retry's copy),
  // and written from there.
  TrimSent();
  const size_t start = sent_.size();
  bool written = false;
  try {
    resp::AppendScriptCall(&sent_, script, false, keys, args);
    written = stream_.WriteFormatted(std::string_view(sent_).substr(start));
  } catch (const std::bad_alloc&) {
  }
  if (!written) {
    sent_.resize(start);
    FailLater(std::move(cb), Status::IoError("out of memory writing to " + server_));
    Drop("out of memory writing to " + server_);
    return;
  }
  Push(std::move(cb), &script, sent_.size() - start);
}

std::string_view AsyncConnection::TakeSent(size_t size) {
  std::string_view command = std::string_view(sent_).substr(sent_start_, size);
  sent_start_ += size;
  return command;
}

void AsyncConnection::TrimSent() {
  constexpr size_t kKeep = 64 * 1024;  // more than this is given back once it is all answered
  if (sent_start_ == sent_.size()) {
    if (sent_.capacity() > kKeep) {
      std::string().swap(sent_);
    } else {
      sent_.clear();
    }
    sent_start_ = 0;
  } else if (sent_start_ > kKeep && sent_start_ > sent_.size() / 2) {
    sent_.erase(0, sent_start_);  // a pipeline that never drains: what was answered goes
    sent_start_ = 0;
  }
}

void AsyncConnection::OnStreamReply(redisReply* reply) {
  if (pending_.empty()) {
    // Nobody asked: the replies no longer match the commands.
    Drop(server_ + " sent a reply nobody asked for");
    Lost();
    return;
  }
  Pending done = pending_.pop_front();  // the timer, when it fires, looks at the new oldest
  if (done.command_size != 0) {
    const std::string_view command = TakeSent(done.command_size);
    if (IsNoScript(reply)) {
      // The server lost its script cache (SCRIPT FLUSH, restart): load it once for all the
      // commands that meet this, then send this one again, in order on this connection (a
      // second NOSCRIPT reaches the caller).
      const std::string again(command);
      uint64_t& loaded_at = script_loaded_at_[done.script->sha1];
      if (loaded_at < done.number) {
        loaded_at = Command({"SCRIPT", "LOAD", done.script->body}, [](redisReply*, const Status&) {});
      }
      SendFormatted(again, std::move(done.cb));
      return;
    }
  }
  if (done.cb) done.cb(reply, Status::Ok());
}

void AsyncConnection::OnStreamLost(const Status& why) {
  timeout_timer_.Cancel();
  Lost();
  FailPending(Status::IoError(why.message()));
}

void AsyncConnection::FailPending(const Status& error) {
  PendingQueue failed;
  failed.swap(pending_);
  sent_.clear();
  sent_start_ = 0;
  while (!failed.empty()) {
    Pending p = failed.pop_front();
    if (p.cb) p.cb(nullptr, error);
  }
}

bool AsyncConnection::PendingQueue::MakeRoom() noexcept {
  if (size_ < slots_.size()) return true;
  try {
    std::vector<Pending> grown(std::max<size_t>(16, 2 * slots_.size()));
    for (size_t i = 0; i < size_; ++i) grown[i] = std::move(slots_[(head_ + i) & (slots_.size() - 1)]);
    slots_.swap(grown);
    head_ = 0;
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

void AsyncConnection::PendingQueue::push_back(Pending p) {
  slots_[(head_ + size_) & (slots_.size() - 1)] = std::move(p);
  ++size_;
}

AsyncConnection::Pending AsyncConnection::PendingQueue::pop_front() {
  constexpr size_t kKeep = 1024;  // slots kept once drained; a bigger ring is given back
  Pending p = std::move(slots_[head_]);
  slots_[head_].cb = nullptr;
  head_ = (head_ + 1) & (slots_.size() - 1);
  if (--size_ == 0) {
    head_ = 0;
    if (slots_.size() > kKeep) std::vector<Pending>().swap(slots_);
  }
  return p;
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
