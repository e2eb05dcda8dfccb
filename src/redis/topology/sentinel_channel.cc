#include "redis/topology/sentinel_channel.h"

#include <string_view>

#include "core/server_text.h"

namespace dlock::redis {
namespace {

// Lookups in the background are at least this far apart: a sentinel that is down makes its
// subscription report a loss every reconnect attempt, and each would start one.
constexpr Millis kRelookupGap{250};

std::string HostList(const std::vector<HostPort>& hosts) {
  std::string out;
  for (const HostPort& h : hosts) out += (out.empty() ? "" : ",") + NodeAddress{h.host, h.port}.Name();
  return out;
}

bool IsReadOnly(const redisReply* r) {
  return r != nullptr && r->type == REDIS_REPLY_ERROR && r->len >= 8 &&
         std::string(r->str, 8) == "READONLY";
}

// SENTINEL get-master-addr-by-name: [ip, port], or nil for a master it does not know.
Status ReadMasterAddress(const redisReply* r, const std::string& sentinel,
                         const std::string& master_name, NodeAddress* out) {
  if (r->type == REDIS_REPLY_NIL) {
    return Status::BackendError(sentinel + " does not know a master named '" + master_name + "'");
  }
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, sentinel);
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_STRING ||
      r->element[1]->type != REDIS_REPLY_STRING) {
    return Status::BackendError(sentinel + " answered get-master-addr-by-name with garbage");
  }
  // The sentinel's words reach messages escaped and capped (server_text.h), and its host is
  // a host name or an address, never control bytes or spaces.
  const std::string port_text(r->element[1]->str, r->element[1]->len);
  int64_t port;
  if (!ParseInt(port_text, 1, 65535, "port", &port).ok()) {
    return Status::BackendError(sentinel + " named master '" + master_name + "' at port '" +
                                ServerText(port_text, 32) + "', which is not a port (1..65535)");
  }
  const std::string_view host(r->element[0]->str, r->element[0]->len);
  if (host.empty() || !PlausibleHost(host)) {
    return Status::BackendError(sentinel + " named master '" + master_name + "' at host '" +
                                ServerText(host, 64) + "', which is not a host name or address");
  }
  out->host.assign(host);
  out->port = static_cast<int>(port);
  return Status::Ok();
}

// ROLE: {"master", ...} from a master.
Status CheckIsMaster(const redisReply* r, const std::string& node) {
  if (r->type == REDIS_REPLY_ERROR) return ErrorReplyStatus(r, node);
  if (r->type == REDIS_REPLY_ARRAY && r->elements >= 1 && r->element[0]->type == REDIS_REPLY_STRING &&
      std::string(r->element[0]->str, r->element[0]->len) == "master") {
    return Status::Ok();
  }
  return Status::BackendError(node + " is not a master (yet)");
}

}  // namespace

// Hears +switch-master on a sentinel (or that the subscription broke): look the master up.
class SentinelChannel::SwitchWatcher : public ReleaseWatcher {
 public:
  explicit SwitchWatcher(SentinelChannel* channel) : channel_(channel) {}
  void OnWatchReady(bool) override {}
  void OnReleased() override {
    channel_->loop_->Post([c = channel_] { c->FindMasterInBackground(/*announced=*/true); });
  }

 private:
  SentinelChannel* channel_;
};

SentinelChannel::SentinelChannel(EventLoop* loop, RedisSentinelConfig config)
    : loop_(loop),
      config_(std::move(config)),
      server_("redis sentinel master '" + config_.master_name + "' via " + HostList(config_.sentinels)),
      watches_([this](const std::string&) { return Master(); }),
      switch_watcher_(std::make_unique<SwitchWatcher>(this)),
      lookup_timer_(loop, [this] { FindMasterInBackground(); }) {
  for (const HostPort& sentinel : config_.sentinels) {
    switch_subscribers_.push_back(std::make_unique<Subscriber>(loop, config_.SentinelAt(sentinel)));
    switch_subscribers_.back()->Watch("+switch-master", switch_watcher_.get());
  }
}

SentinelChannel::~SentinelChannel() {
  for (auto& s : switch_subscribers_) s->Unwatch("+switch-master", switch_watcher_.get());
}

Status SentinelChannel::Named(const Status& s) const {
  if (s.message().rfind(server_ + ": ", 0) == 0) return s;  // a lookup's own error
  return Status(s.code(), server_ + ": " + s.message());
}

NodeChannel* SentinelChannel::NodeAt(const std::string& name, const RedisConfig& config) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& node = nodes_[name];
  if (node == nullptr) node = std::make_unique<NodeChannel>(loop_, config);
  return node.get();
}

NodeChannel* SentinelChannel::MasterNode(const NodeAddress& address) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& node = nodes_["master " + address.Name()];
  if (node == nullptr) {
    node = std::make_unique<NodeChannel>(loop_, config_.MasterAt(address.host, address.port));
    node->Guard([this] { return FindMaster(); }, [this] { FindMasterInBackground(); });
  }
  return node.get();
}

NodeChannel* SentinelChannel::SentinelNode(size_t i) {
  const HostPort& s = config_.sentinels[i];
  return NodeAt("sentinel " + NodeAddress{s.host, s.port}.Name(), config_.SentinelAt(s));
}

NodeChannel* SentinelChannel::Master() {
  std::lock_guard<std::mutex> lock(mu_);
  return master_;
}

void SentinelChannel::SetMaster(NodeChannel* node) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (master_ == node) return;
    master_ = node;
  }
  watches_.Reroute();
}

Status SentinelChannel::FindMaster() {
  std::lock_guard<std::mutex> one_at_a_time(find_mu_);
  std::string tried;
  bool auth_failed = false, all_answered = true;
  for (size_t i = 0; i < config_.sentinels.size(); ++i) {
    NodeChannel* sentinel = SentinelNode(i);
    ReplyPtr reply;
    NodeAddress address;
    Status s = sentinel->Command({"SENTINEL", "get-master-addr-by-name", config_.master_name}, &reply);
    if (s.ok()) s = ReadMasterAddress(reply.get(), sentinel->server(), config_.master_name, &address);
    if (s.ok()) {
      NodeChannel* master = MasterNode(address);
      const uint64_t failures = master->failures();
      s = master->Command({"ROLE"}, &reply);
      if (s.ok()) s = CheckIsMaster(reply.get(), master->server());
      if (s.ok()) {
        master->Vouch(failures);
        SetMaster(master);
        loop_->Post([this] { DispatchParked(false); });
        return Status::Ok();
      }
    }
    auth_failed = auth_failed || s.code() == Code::kAuthError;
    all_answered = all_answered && s.code() == Code::kBackendError;
    tried += (tried.empty() ? "" : "; ") + s.message();
  }
  // Every sentinel answering "no such master" is the backend's answer, not a lost connection.
  return Status(auth_failed ? Code::kAuthError : all_answered ? Code::kBackendError : Code::kIoError,
                server_ + ": no sentinel named a reachable master (" + tried + ")");
}

void SentinelChannel::FindMasterInBackground(bool announced) {
  if (!loop_->InLoopThread()) {
    loop_->Post([this, announced] { FindMasterInBackground(announced); });
    return;
  }
  if (shut_down_) return;
  if (looking_up_) {
    // It may have asked before the switch just announced: look again when it ends.
    lookup_again_ = lookup_again_ || announced;
    return;
  }
  const TimePoint next = last_lookup_ + kRelookupGap;
  if (Now() < next) {
    if (!lookup_timer_.pending()) lookup_timer_.StartAt(next);
    return;
  }
  looking_up_ = true;
  lookup_again_ = false;
  last_lookup_ = Now();
  AskSentinel(0);
}

void SentinelChannel::AskSentinel(size_t i) {
  if (shut_down_ || i >= config_.sentinels.size()) {
    LookupEnded();
    return;
  }
  NodeChannel* sentinel = SentinelNode(i);
  sentinel->CommandAsync(
      {"SENTINEL", "get-master-addr-by-name", config_.master_name},
      [this, i, sentinel](redisReply* reply, const Status& error) {
        NodeAddress address;
        Status s = error.ok() ? ReadMasterAddress(reply, sentinel->server(), config_.master_name, &address)
                              : error;
        if (!s.ok() || shut_down_) return AskSentinel(i + 1);
        NodeChannel* master = MasterNode(address);
        const uint64_t failures = master->failures();
        master->CommandAsync({"ROLE"}, [this, i, master, failures](redisReply* role, const Status& e) {
          if (e.ok() && CheckIsMaster(role, master->server()).ok() && !shut_down_) {
            master->Vouch(failures);
            SetMaster(master);
            LookupEnded();
            return;
          }
          AskSentinel(i + 1);
        });
      });
}

void SentinelChannel::LookupEnded() {
  looking_up_ = false;
  DispatchParked(/*lookup_ended=*/true);
  if (lookup_again_) FindMasterInBackground();
}

Status SentinelChannel::Ping() {
  Status s = FindMaster();
  if (!s.ok()) return s;
  s = Master()->Ping();
  return s.ok() ? s : Named(s);
}

NodeChannel* SentinelChannel::VouchedMaster(Status* error) {
  NodeChannel* master = Master();
  if (master != nullptr && master->vouched()) return master;
  *error = FindMaster();
  if (!error->ok()) return nullptr;
  master = Master();
  if (master != nullptr && master->vouched()) return master;
  *error = Named(Status::IoError("the master changed again while it was being looked up"));
  return nullptr;
}

Status SentinelChannel::Eval(const ScriptCall& call, ReplyPtr* reply) {
  for (int attempt = 1;; ++attempt) {
    Status s;
    NodeChannel* master = VouchedMaster(&s);
    if (master == nullptr) return s;
    s = master->Eval(call, reply);
    if (!s.ok()) {
      // The sentinels name another master now (found by the node's recheck after a dead
      // pooled connection, or by a lookup in the background): try the call there, once. It
      // may have run on the old master (a timeout, or a master that died after running it):
      // acquire and extend are idempotent for their owner; a release that ran there and
      // reached the new master reports DLOCK_NOT_HELD.
      NodeChannel* now = Master();
      if (attempt == 1 && now != master && now != nullptr && now->vouched()) continue;
      if (s.code() == Code::kIoError) FindMasterInBackground();  // a failover under way?
      return Named(s);
    }
    // A demoted master: find the new one and try there, once. (Its refusal changed nothing.)
    if (!IsReadOnly(reply->get()) || attempt > 1) return Status::Ok();
    s = FindMaster();
    if (!s.ok() || Master() == master) return Status::Ok();  // READONLY, as it is
  }
}

void SentinelChannel::EvalAll(const std::vector<ScriptCall>& calls) {
  Status unused;
  NodeChannel* master = VouchedMaster(&unused);
  if (master != nullptr) master->EvalAll(calls);
}

void SentinelChannel::EvalAsync(const ScriptCall& call, ReplyCallback done) {
  ++async_calls_;
  auto finish = [this, done = std::move(done)](redisReply* reply, const Status& error) {
    --async_calls_;
    if ((!error.ok() && error.code() == Code::kIoError) || IsReadOnly(reply)) FindMasterInBackground();
    done(reply, error.ok() ? error : Named(error));
  };
  NodeChannel* master = Master();
  if (master == nullptr || !master->vouched() || shut_down_) {
    // Held until the lookup under way (or started now) names a master, or finds none.
    parked_.push_back({call, std::move(finish)});
    FindMasterInBackground();
    if (shut_down_) DispatchParked(false);
    return;
  }
  master->EvalAsync(call, std::move(finish));
}

void SentinelChannel::DispatchParked(bool lookup_ended) {
  if (parked_.empty()) return;
  NodeChannel* master = Master();
  const bool ready = !shut_down_ && master != nullptr && master->vouched();
  // Not ready: they wait for the end of the lookup under way or due (one started, or its
  // timer set, when they were parked), so at most kRelookupGap + one lookup.
  if (!ready && !shut_down_ && !lookup_ended) return;
  std::vector<ParkedCall> calls;
  calls.swap(parked_);
  for (ParkedCall& parked : calls) {
    if (ready) {
      master->EvalAsync(parked.call, std::move(parked.finish));
    } else {
      loop_->Post([finish = std::move(parked.finish), closed = shut_down_] {
        finish(nullptr, Status::IoError(closed ? "the client was closed"
                                               : "no sentinel named a reachable master"));
      });
    }
  }
}

void SentinelChannel::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  watches_.Watch(channel, watcher);
}

void SentinelChannel::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  watches_.Unwatch(channel, watcher);
}

void SentinelChannel::ShutdownOnLoop() {
  shut_down_ = true;
  lookup_timer_.Free();
  DispatchParked(false);
  for (auto& s : switch_subscribers_) s->ShutdownOnLoop();
  std::vector<NodeChannel*> nodes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, node] : nodes_) nodes.push_back(node.get());
  }
  for (NodeChannel* node : nodes) node->ShutdownOnLoop();
}

}  // namespace dlock::redis
