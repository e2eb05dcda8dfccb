#include "redis/topology/cluster_channel.h"

#include <algorithm>
#include <set>
#include <thread>

#include "core/token.h"
#include "redis/wire/key_slot.h"

namespace dlock::redis {
namespace {

// TRYAGAIN (a slot mid-migration) and CLUSTERDOWN (a failover under way) are retried after a
// jittered pause: long enough not to hammer a cluster that is electing, short next to a lease.
Millis RetryPause() { return Millis(RandomBetween(20, 100)); }

bool IsRedirection(const Redirect& r) {
  return r.kind == Redirect::kMoved || r.kind == Redirect::kAsk;
}

// A node's failure, named as the cluster's (users know the cluster by its URL's seeds).
Status InCluster(const std::string& cluster, const Status& s) {
  return Status(s.code(), cluster + ": " + s.message());
}

std::string SeedList(const std::vector<HostPort>& seeds) {
  std::string out;
  for (const HostPort& seed : seeds) {
    NodeAddress a{seed.host, seed.port};
    out += (out.empty() ? "" : ",") + a.Name();
  }
  return out;
}

}  // namespace

struct ClusterChannel::AsyncCall {
  ScriptCall call;
  ReplyCallback done;
  int slot = 0;
  TimePoint budget_end;
  int redirections = 0;
  NodeAddress ask;  // set after an ASK: the next attempt goes there, with ASKING
  ReplyPtr waited;  // the last TRYAGAIN or CLUSTERDOWN: why the call ran out of time
};

struct ClusterChannel::Retry {
  std::unique_ptr<Timer> timer;
  std::shared_ptr<AsyncCall> call;  // null when the slot is free
};

ClusterChannel::ClusterChannel(EventLoop* loop, RedisClusterConfig config)
    : loop_(loop),
      config_(std::move(config)),
      server_("redis cluster " + SeedList(config_.seeds)),
      watches_([this](const std::string& channel) { return MasterOf(KeySlot(channel)); }) {}

ClusterChannel::~ClusterChannel() = default;

NodeChannel* ClusterChannel::NodeAt(const NodeAddress& address) {
  std::lock_guard<std::mutex> lock(map_mu_);
  const std::string name = address.Name();
  auto known = nodes_.find(name);
  if (known == nodes_.end() && nodes_.size() >= kMaxNodes) return nullptr;
  auto& node = nodes_[name];
  if (node == nullptr) {
    // A channel the node does not serve (any more) makes the map suspect: reload it, and the
    // watchers follow their slot.
    node = std::make_unique<NodeChannel>(loop_, config_.At(address.host, address.port),
                                         PubSubMode::kSharded,
                                         [this](const std::string&) { RefreshInBackground(); });
    addresses_[node.get()] = address;
  }
  return node.get();
}

Status ClusterChannel::NodeLimit(const NodeAddress& address) const {
  return Status::BackendError(server_ + " named node " + address.Name() + " beyond the " +
                              std::to_string(kMaxNodes) +
                              " node addresses a client connects to (dlock's limit; reopen the "
                              "client if the cluster's nodes really moved that often)");
}

NodeChannel* ClusterChannel::MasterOf(int slot) {
  std::lock_guard<std::mutex> lock(map_mu_);
  return slots_.empty() ? nullptr : slots_[slot];
}

Status ClusterChannel::SlotOf(const ScriptCall& call, int* slot) const {
  if (call.keys.empty()) return Status::Internal("a script call without keys cannot be routed");
  *slot = KeySlot(call.keys[0]);
  for (size_t i = 1; i < call.keys.size(); ++i) {
    if (KeySlot(call.keys[i]) != *slot) {
      return Status::InvalidArgument(
          "keys '" + call.keys[0] + "' and '" + call.keys[i] +
          "' fall in different hash slots, which Redis Cluster cannot serve in one script (a lock "
          "name that starts with '}' leaves the hash tag empty)");
    }
  }
  return Status::Ok();
}

Redirect ClusterChannel::RedirectOf(const redisReply* reply, NodeChannel* node) {
  // Most replies are answers, not redirections: the node's address is looked up only for errors.
  if (reply == nullptr || reply->type != REDIS_REPLY_ERROR) return Redirect();
  NodeAddress from;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    from = addresses_[node];
  }
  return ParseRedirect(reply, from);
}

std::vector<NodeAddress> ClusterChannel::RefreshCandidates() {
  std::vector<NodeAddress> out;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    NodeChannel* last = nullptr;
    for (NodeChannel* node : slots_) {
      if (node == nullptr || node == last) continue;
      last = node;
      const NodeAddress& a = addresses_[node];
      if (std::none_of(out.begin(), out.end(), [&](const NodeAddress& b) { return b.Name() == a.Name(); })) {
        out.push_back(a);
      }
    }
  }
  for (const HostPort& seed : config_.seeds) {
    NodeAddress a{seed.host, seed.port};
    if (std::none_of(out.begin(), out.end(), [&](const NodeAddress& b) { return b.Name() == a.Name(); })) {
      out.push_back(a);
    }
  }
  return out;
}

Status ClusterChannel::LoadMap() {
  std::lock_guard<std::mutex> one_at_a_time(load_mu_);
  std::string tried;
  Status last;
  for (const NodeAddress& address : RefreshCandidates()) {
    NodeChannel* node = NodeAt(address);
    if (node == nullptr) {
      last = NodeLimit(address);
      tried += (tried.empty() ? "" : "; ") + last.message();
      continue;
    }
    ReplyPtr reply;
    Status s = node->Command({"CLUSTER", "SLOTS"}, &reply);
    if (s.ok() && reply->type == REDIS_REPLY_ERROR) s = ErrorReplyStatus(reply.get(), node->server());
    std::vector<SlotRange> ranges;
    if (s.ok()) s = ParseClusterSlots(reply.get(), address, node->server(), &ranges);
    if (s.ok() && ranges.empty()) s = Status::BackendError(node->server() + " serves no slots yet");
    if (s.ok()) s = ApplyMap(ranges);
    if (s.ok()) return Status::Ok();
    // Credentials refused are the same on every node: say so at once.
    if (s.code() == Code::kAuthError) return s;
    tried += (tried.empty() ? "" : "; ") + s.message();
    last = s;
  }
  return Status(last.code() == Code::kBackendError ? Code::kBackendError : Code::kIoError,
                "no node of " + server_ + " gave its slot map (tried: " + tried + ")");
}

Status ClusterChannel::ApplyMap(const std::vector<SlotRange>& ranges) {
  {
    // All of the map or none of it: a map naming more masters than the limit allows is refused
    // before any of them is added.
    std::lock_guard<std::mutex> lock(map_mu_);
    std::set<std::string> added;
    for (const SlotRange& range : ranges) {
      const std::string name = range.master.Name();
      if (nodes_.count(name) != 0 || !added.insert(name).second) continue;
      if (nodes_.size() + added.size() > kMaxNodes) return NodeLimit(range.master);
    }
  }
  std::vector<NodeChannel*> slots(kClusterSlots, nullptr);
  for (const SlotRange& range : ranges) {
    NodeChannel* node = NodeAt(range.master);
    if (node == nullptr) return NodeLimit(range.master);  // another map's nodes came first
    for (int slot = range.first; slot <= range.last; ++slot) slots[slot] = node;
  }
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (slots == slots_) return Status::Ok();
    slots_ = std::move(slots);
    ++map_version_;
  }
  watches_.Reroute();
  return Status::Ok();
}

bool ClusterChannel::MoveSlot(int slot, const NodeAddress& to) {
  NodeChannel* node = NodeAt(to);
  if (node == nullptr) return false;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    if (slots_.empty()) slots_.assign(kClusterSlots, nullptr);
    if (slots_[slot] == node) return true;
    slots_[slot] = node;
    ++map_version_;
  }
  watches_.Reroute();
  return true;
}

void ClusterChannel::RefreshInBackground() {
  if (!loop_->InLoopThread()) {
    loop_->Post([this] { RefreshInBackground(); });
    return;
  }
  if (refreshing_ || shut_down_) return;
  refreshing_ = true;
  TryRefreshFrom(RefreshCandidates(), 0);
}

void ClusterChannel::TryRefreshFrom(std::vector<NodeAddress> candidates, size_t next) {
  if (shut_down_ || next >= candidates.size()) {
    refreshing_ = false;
    return;
  }
  NodeAddress address = candidates[next];
  NodeChannel* node = NodeAt(address);
  if (node == nullptr) {  // over kMaxNodes: the next candidate
    TryRefreshFrom(std::move(candidates), next + 1);
    return;
  }
  node->CommandAsync({"CLUSTER", "SLOTS"}, [this, node, address, candidates = std::move(candidates),
                                            next](redisReply* reply, const Status& error) mutable {
    std::vector<SlotRange> ranges;
    Status s = error;
    if (s.ok() && reply->type == REDIS_REPLY_ERROR) s = ErrorReplyStatus(reply, node->server());
    if (s.ok()) s = ParseClusterSlots(reply, address, node->server(), &ranges);
    if (s.ok() && !ranges.empty() && !shut_down_) s = ApplyMap(ranges);
    if (s.ok() && !ranges.empty() && !shut_down_) {
      refreshing_ = false;
      return;
    }
    TryRefreshFrom(std::move(candidates), next + 1);
  });
}

Status ClusterChannel::Ping() { return LoadMap(); }

Status ClusterChannel::Eval(const ScriptCall& call, ReplyPtr* reply) {
  int slot;
  Status s = SlotOf(call, &slot);
  if (!s.ok()) return s;
  const TimePoint budget_end =
      Now() + Millis(config_.node.params.connect_timeout_ms + config_.node.params.timeout_ms);
  NodeAddress ask;
  int redirections = 0;
  ReplyPtr waited;  // as AsyncCall::waited
  for (;;) {
    NodeChannel* node = ask.port != 0 ? NodeAt(ask) : MasterOf(slot);
    if (node == nullptr && ask.port != 0) return NodeLimit(ask);
    if (node == nullptr) {
      s = LoadMap();
      if (!s.ok()) return s;
      node = MasterOf(slot);
      if (node == nullptr) {
        return Status::IoError(server_ + ": no master serves hash slot " + std::to_string(slot));
      }
    }
    const bool asking = ask.port != 0;
    ask = NodeAddress();
    s = asking ? node->EvalAsking(call, reply) : node->Eval(call, reply);
    if (!s.ok()) {
      // The node may be gone (a failover): the next calls use a fresh map.
      if (s.code() == Code::kIoError) RefreshInBackground();
      return InCluster(server_, s);
    }
    Redirect redirect = RedirectOf(reply->get(), node);
    if (redirect.kind == Redirect::kNone) return Status::Ok();
    if (Now() >= budget_end) {
      // Out of time: say why. A slot stuck mid-migration answers ASK on its old master and
      // TRYAGAIN on its new one; the ASK met last is only the way, the TRYAGAIN is the reason.
      if (IsRedirection(redirect) && waited != nullptr) *reply = std::move(waited);
      return Status::Ok();
    }
    if (IsRedirection(redirect) && ++redirections > kMaxRedirections) return Status::Ok();
    switch (redirect.kind) {
      case Redirect::kMoved:
        if (!MoveSlot(redirect.slot, redirect.to)) return NodeLimit(redirect.to);
        RefreshInBackground();  // one slot moved: others probably too
        break;
      case Redirect::kAsk:
        ask = redirect.to;
        break;
      default:
        redirections = 0;  // the limit is on redirections in a row (a loop), not on waiting
        waited = CloneReply(reply->get());
        std::this_thread::sleep_for(std::min<Millis>(
            RetryPause(), std::chrono::duration_cast<Millis>(budget_end - Now())));
        break;
    }
  }
}

void ClusterChannel::EvalAll(const std::vector<ScriptCall>& calls) {
  // Best effort, as the interface says: one pipeline per master; what was redirected meanwhile
  // ends with its lease.
  std::map<NodeChannel*, std::vector<ScriptCall>> by_node;
  for (const ScriptCall& call : calls) {
    int slot;
    if (!SlotOf(call, &slot).ok()) continue;
    NodeChannel* node = MasterOf(slot);
    if (node != nullptr) by_node[node].push_back(call);
  }
  for (auto& [node, group] : by_node) node->EvalAll(group);
}

void ClusterChannel::EvalAsync(const ScriptCall& call, ReplyCallback done) {
  auto c = std::make_shared<AsyncCall>();
  c->call = call;
  c->done = std::move(done);
  c->budget_end =
      Now() + Millis(config_.node.params.connect_timeout_ms + config_.node.params.timeout_ms);
  ++async_calls_;
  Status s = SlotOf(call, &c->slot);
  if (!s.ok()) {
    // Never inside the call.
    loop_->Post([this, c, s] { Finish(c, nullptr, s); });
    return;
  }
  Attempt(std::move(c));
}

void ClusterChannel::Attempt(std::shared_ptr<AsyncCall> c) {
  if (shut_down_) {
    loop_->Post([this, c] { Finish(c, nullptr, Status::IoError(server_ + ": the client was closed")); });
    return;
  }
  const bool asking = c->ask.port != 0;
  NodeChannel* node = asking ? NodeAt(c->ask) : MasterOf(c->slot);
  if (node == nullptr && asking) {
    loop_->Post([this, c, s = NodeLimit(c->ask)] { Finish(c, nullptr, s); });
    return;
  }
  c->ask = NodeAddress();
  if (node == nullptr) {
    RefreshInBackground();
    loop_->Post([this, c] {
      Finish(c, nullptr,
             Status::IoError(server_ + ": no master serves hash slot " + std::to_string(c->slot)));
    });
    return;
  }
  auto on_reply = [this, c, node](redisReply* reply, const Status& error) {
    if (!error.ok()) {
      if (error.code() == Code::kIoError) RefreshInBackground();
      Finish(c, nullptr, InCluster(server_, error));
      return;
    }
    Redirect redirect = RedirectOf(reply, node);
    if (redirect.kind == Redirect::kNone || Now() >= c->budget_end || shut_down_ ||
        (IsRedirection(redirect) && ++c->redirections > kMaxRedirections)) {
      // A redirect left over reaches the caller as the error it is, or, out of time, the
      // TRYAGAIN met before it (as in Eval).
      const bool say_why = IsRedirection(redirect) &&
                           Now() >= c->budget_end && c->waited != nullptr;
      Finish(c, say_why ? c->waited.get() : reply, Status::Ok());
      return;
    }
    switch (redirect.kind) {
      case Redirect::kMoved:
        if (!MoveSlot(redirect.slot, redirect.to)) {
          Finish(c, nullptr, NodeLimit(redirect.to));
          return;
        }
        RefreshInBackground();
        Attempt(c);
        break;
      case Redirect::kAsk:
        c->ask = redirect.to;
        Attempt(c);
        break;
      default:
        c->redirections = 0;  // as in Eval
        c->waited = CloneReply(reply);
        RetryLater(c, std::min<Millis>(RetryPause(), std::chrono::duration_cast<Millis>(
                                                         c->budget_end - Now())));
        break;
    }
  };
  if (asking) {
    node->EvalAskingAsync(c->call, std::move(on_reply));
  } else {
    node->EvalAsync(c->call, std::move(on_reply));
  }
}

void ClusterChannel::RetryLater(std::shared_ptr<AsyncCall> c, Millis delay) {
  Retry* free_slot = nullptr;
  for (auto& r : retries_) {
    if (r->call == nullptr) {
      free_slot = r.get();
      break;
    }
  }
  if (free_slot == nullptr) {
    retries_.push_back(std::make_unique<Retry>());
    Retry* r = retries_.back().get();
    r->timer = std::make_unique<Timer>(loop_, [this, r] {
      std::shared_ptr<AsyncCall> call = std::move(r->call);
      r->call = nullptr;
      Attempt(std::move(call));
    });
    free_slot = r;
  }
  free_slot->call = std::move(c);
  free_slot->timer->StartAfter(delay);
}

void ClusterChannel::Finish(const std::shared_ptr<AsyncCall>& c, redisReply* reply,
                            const Status& error) {
  --async_calls_;
  c->done(reply, error);
}

void ClusterChannel::Watch(const std::string& channel, ReleaseWatcher* watcher) {
  watches_.Watch(channel, watcher);
}

void ClusterChannel::Unwatch(const std::string& channel, ReleaseWatcher* watcher) {
  watches_.Unwatch(channel, watcher);
}

void ClusterChannel::ShutdownOnLoop() {
  shut_down_ = true;
  for (auto& r : retries_) {
    r->timer->Free();
    if (r->call != nullptr) {
      std::shared_ptr<AsyncCall> call = std::move(r->call);
      r->call = nullptr;
      Finish(call, nullptr, Status::IoError(server_ + ": the client was closed"));
    }
  }
  std::vector<NodeChannel*> nodes;
  {
    std::lock_guard<std::mutex> lock(map_mu_);
    for (auto& [name, node] : nodes_) nodes.push_back(node.get());
  }
  for (NodeChannel* node : nodes) node->ShutdownOnLoop();
}

}  // namespace dlock::redis
