#include "redis/topology/cluster_map.h"

#include <string_view>

#include "core/url.h"
#include "redis/wire/key_slot.h"

namespace dlock::redis {
namespace {

bool IsString(const redisReply* r) {
  return r != nullptr && (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS);
}

}  // namespace

bool PlausibleHost(std::string_view host) {
  if (host.size() > 255) return false;
  for (unsigned char c : host) {
    if (c <= 0x20 || c == 0x7f) return false;
  }
  return true;
}

namespace {

// "host:port" (host may be an IPv6 literal, so split at the last ':'); an empty host is from's.
bool ReadAddress(std::string_view text, const NodeAddress& from, NodeAddress* out) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return false;
  int64_t port;
  if (!ParseInt(std::string(text.substr(colon + 1)), 1, 65535, "port", &port).ok()) return false;
  std::string host(text.substr(0, colon));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "?" || !PlausibleHost(host)) return false;
  out->host = host.empty() ? from.host : host;
  out->port = static_cast<int>(port);
  return true;
}

bool ReadSlot(std::string_view text, int* out) {
  int64_t slot;
  if (!ParseInt(std::string(text), 0, kClusterSlots - 1, "slot", &slot).ok()) return false;
  *out = static_cast<int>(slot);
  return true;
}

}  // namespace

std::string NodeAddress::Name() const {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Status ParseClusterSlots(const redisReply* reply, const NodeAddress& asked,
                         const std::string& server, std::vector<SlotRange>* out) {
  out->clear();
  auto garbage = [&](const std::string& what) {
    return Status::BackendError(server + " answered CLUSTER SLOTS with " + what);
  };
  if (reply->type != REDIS_REPLY_ARRAY) return garbage("something other than an array");
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply* entry = reply->element[i];
    if (entry->type != REDIS_REPLY_ARRAY || entry->elements < 3) return garbage("a malformed range");
    const redisReply* first = entry->element[0];
    const redisReply* last = entry->element[1];
    const redisReply* master = entry->element[2];
    if (first->type != REDIS_REPLY_INTEGER || last->type != REDIS_REPLY_INTEGER ||
        first->integer < 0 || last->integer >= kClusterSlots || first->integer > last->integer) {
      return garbage("a slot range outside 0..16383");
    }
    if (master->type != REDIS_REPLY_ARRAY || master->elements < 2 || !IsString(master->element[0]) ||
        master->element[1]->type != REDIS_REPLY_INTEGER) {
      return garbage("a malformed node");
    }
    const long long port = master->element[1]->integer;
    if (port < 1 || port > 65535) return garbage("port " + std::to_string(port));
    std::string host(master->element[0]->str, master->element[0]->len);
    if (host == "?") continue;  // the node's address is unknown to this node for now
    if (!PlausibleHost(host)) return garbage("a host name that is not one");
    SlotRange range;
    range.first = static_cast<int>(first->integer);
    range.last = static_cast<int>(last->integer);
    range.master.host = host.empty() ? asked.host : host;
    range.master.port = static_cast<int>(port);
    out->push_back(std::move(range));
  }
  return Status::Ok();
}

Redirect ParseRedirect(const redisReply* reply, const NodeAddress& from) {
  Redirect r;
  if (reply == nullptr || reply->type != REDIS_REPLY_ERROR) return r;
  std::string_view text(reply->str, reply->len);
  auto word = [&](std::string_view w) {
    return text.size() >= w.size() && text.substr(0, w.size()) == w &&
           (text.size() == w.size() || text[w.size()] == ' ');
  };
  if (word("TRYAGAIN")) {
    r.kind = Redirect::kTryAgain;
  } else if (word("CLUSTERDOWN")) {
    r.kind = Redirect::kClusterDown;
  } else if (word("MOVED") || word("ASK")) {
    // "MOVED 3999 127.0.0.1:6381"
    const bool moved = word("MOVED");
    const size_t skip = moved ? 6 : 4;  // "MOVED " or "ASK "; a bare "MOVED" has nothing after it
    if (text.size() <= skip) return r;
    std::string_view rest = text.substr(skip);
    size_t space = rest.find(' ');
    if (space == std::string_view::npos) return r;
    if (!ReadSlot(rest.substr(0, space), &r.slot)) return r;
    if (!ReadAddress(rest.substr(space + 1), from, &r.to)) return r;
    r.kind = moved ? Redirect::kMoved : Redirect::kAsk;
  }
  return r;
}

}  // namespace dlock::redis
