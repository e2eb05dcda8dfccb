#include "etcd/gateway.h"

#include "core/server_text.h"


#include <algorithm>
#include <charconv>
#include <limits>

namespace dlock::etcd {
namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

const Json* Field(const Json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

std::string ReadString(const Json& object, const char* name) {
  const Json* f = Field(object, name);
  return f != nullptr && f->is_string() ? f->get<std::string>() : std::string();
}

bool ReadBool(const Json& object, const char* name) {
  const Json* f = Field(object, name);
  return f != nullptr && f->is_boolean() && f->get<bool>();
}

// A base64 field decoded; false when present and not base64.
bool ReadBytes(const Json& object, const char* name, std::string* out) {
  out->clear();
  const Json* f = Field(object, name);
  if (f == nullptr) return true;
  return f->is_string() && Base64Decode(f->get_ref<const std::string&>(), out);
}

std::string Txn(const Json& compare, const Json& success, const Json& failure) {
  Json body = {{"compare", compare}, {"success", success}};
  if (!failure.empty()) body["failure"] = failure;
  return body.dump();
}

Json OwnedCompare(const std::string& key, int64_t create_revision) {
  return Json::array({{{"key", Base64Encode(key)},
                       {"target", "CREATE"},
                       {"result", "EQUAL"},
                       {"create_revision", std::to_string(create_revision)}}});
}

Json PutOp(const std::string& key, const std::string& value, int64_t lease) {
  Json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

Json RangeCompare(const std::string& key, const std::string& range_end, const char* target, const char* result,
                  const char* field, int64_t number) {
  return {{"key", Base64Encode(key)},
          {"range_end", Base64Encode(range_end)},
          {"target", target},
          {"result", result},
          {field, std::to_string(number)}};
}

Json DeleteOp(const std::string& key) { return {{"request_delete_range", {{"key", Base64Encode(key)}}}}; }

Status Malformed(const std::string& what) {
  return Status::BackendError("etcd answered " + what + " in a shape dlock does not know");
}

}  // namespace

bool ParseObject(std::string_view text, Json* out) {
  if (!JsonDepthWithin(text)) {  // before parsing: a container per '[' otherwise
    *out = Json();
    return false;
  }
  *out = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return out->is_object();
}

GatewayError ReadError(const Json& answer) {
  GatewayError e;
  const Json* error = Field(answer, "error");
  if (error == nullptr) return e;
  e.code = static_cast<int>(ReadInt(answer, "code", 0, 1000, 2));
  if (e.code == 0) e.code = 2;  // UNKNOWN: an error field says it is one
  e.message = ReadString(answer, "message");
  if (e.message.empty()) e.message = error->is_string() ? error->get<std::string>() : "an error without words";
  e.message = ServerText(e.message);  // capped, control bytes escaped: it reaches terminals
  return e;
}

int64_t ReadInt(const Json& object, const char* field, int64_t lo, int64_t hi, int64_t fallback) {
  const Json* f = Field(object, field);
  if (f == nullptr) return fallback;
  int64_t v = fallback;
  if (f->is_number_integer()) {
    if (f->is_number_unsigned()) {
      uint64_t u = f->get<uint64_t>();
      v = u > static_cast<uint64_t>(kMaxInt64) ? kMaxInt64 : static_cast<int64_t>(u);
    } else {
      v = f->get<int64_t>();
    }
  } else if (f->is_string()) {
    const std::string& s = f->get_ref<const std::string&>();
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc::result_out_of_range) {
      v = !s.empty() && s[0] == '-' ? lo : hi;
    } else if (ec != std::errc() || end != s.data() + s.size()) {
      return fallback;
    }
  } else {
    return fallback;
  }
  return std::clamp(v, lo, hi);
}

int64_t ReadRevision(const Json& answer) {
  const Json* header = Field(answer, "header");
  return header == nullptr ? 0 : ReadInt(*header, "revision", 0, kMaxInt64, 0);
}

bool ReadKeyValue(const Json& kv, KeyValue* out) {
  *out = KeyValue();
  if (!kv.is_object() || !ReadBytes(kv, "key", &out->key) || !ReadBytes(kv, "value", &out->value)) {
    return false;
  }
  out->create_revision = ReadInt(kv, "create_revision", 0, kMaxInt64, 0);
  out->mod_revision = ReadInt(kv, "mod_revision", 0, kMaxInt64, 0);
  out->lease = ReadInt(kv, "lease", std::numeric_limits<int64_t>::min(), kMaxInt64, 0);
  return true;
}

std::string IfOwnedMoveTxn(const std::string& key, int64_t create_revision, int64_t lease) {
  Json put = {{"key", Base64Encode(key)}, {"ignore_value", true}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return Txn(OwnedCompare(key, create_revision), Json::array({{{"request_put", put}}}), Json());
}

std::string IfOwnedSetTxn(const std::string& key, const std::string& value, int64_t create_revision) {
  Json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}, {"ignore_lease", true}};
  return Txn(OwnedCompare(key, create_revision), Json::array({{{"request_put", put}}}), Json());
}

std::string IfOwnedDeleteTxn(const std::string& key, int64_t create_revision) {
  return Txn(OwnedCompare(key, create_revision), Json::array({DeleteOp(key)}), Json());
}

std::string IfOnLeaseDeleteTxn(const std::string& key, int64_t lease) {
  Json compare = Json::array(
      {{{"key", Base64Encode(key)}, {"target", "LEASE"}, {"result", "EQUAL"}, {"lease", std::to_string(lease)}}});
  return Txn(compare, Json::array({DeleteOp(key)}), Json());
}

std::string IfValueDeleteTxn(const std::string& key, const std::string& value) {
  Json compare = Json::array(
      {{{"key", Base64Encode(key)}, {"target", "VALUE"}, {"result", "EQUAL"}, {"value", Base64Encode(value)}}});
  return Txn(compare, Json::array({DeleteOp(key)}), Json());
}

std::string RangeBody(const std::string& key) { return Json{{"key", Base64Encode(key)}}.dump(); }

std::string RangeBody(const std::string& key, const std::string& range_end) {
  return Json{{"key", Base64Encode(key)}, {"range_end", Base64Encode(range_end)}}.dump();
}

std::string PutBody(const std::string& key, const std::string& value, int64_t lease) {
  return PutOp(key, value, lease)["request_put"].dump();
}

Json CompareCreateEqual(const std::string& key, int64_t create_revision) {
  return {{"key", Base64Encode(key)},
          {"target", "CREATE"},
          {"result", "EQUAL"},
          {"create_revision", std::to_string(create_revision)}};
}

Json CompareRangeEmpty(const std::string& key, const std::string& range_end) {
  return RangeCompare(key, range_end, "VERSION", "EQUAL", "version", 0);
}

Json CompareRangeModAtMost(const std::string& key, const std::string& range_end, int64_t revision) {
  return RangeCompare(key, range_end, "MOD", "LESS", "mod_revision", revision < kMaxInt64 ? revision + 1 : revision);
}

Json CompareModAtMost(const std::string& key, int64_t revision) {
  return {{"key", Base64Encode(key)},
          {"target", "MOD"},
          {"result", "LESS"},
          {"mod_revision", std::to_string(revision < kMaxInt64 ? revision + 1 : revision)}};
}

Json CompareExists(const std::string& key) {
  return {{"key", Base64Encode(key)}, {"target", "VERSION"}, {"result", "GREATER"}, {"version", "0"}};
}

Json CompareRangeNotEmpty(const std::string& key, const std::string& range_end) {
  return RangeCompare(key, range_end, "VERSION", "GREATER", "version", 0);
}

Json PutRequest(const std::string& key, const std::string& value, int64_t lease) { return PutOp(key, value, lease); }

Json DeleteRangeRequest(const std::string& key, const std::string& range_end) {
  return {{"request_delete_range", {{"key", Base64Encode(key)}, {"range_end", Base64Encode(range_end)}}}};
}

Json DeleteRequest(const std::string& key) { return DeleteOp(key); }

Json RangeRequest(const std::string& key, const std::string& range_end) {
  return {{"request_range", {{"key", Base64Encode(key)}, {"range_end", Base64Encode(range_end)}}}};
}

Json RangeFirstCreatedRequest(const std::string& key, const std::string& range_end) {
  return {{"request_range",
           {{"key", Base64Encode(key)},
            {"range_end", Base64Encode(range_end)},
            {"limit", "1"},
            {"sort_order", "ASCEND"},
            {"sort_target", "CREATE"}}}};
}

Json RangeLastCreatedRequest(const std::string& key, const std::string& range_end, int64_t max_create_revision) {
  Json range = {{"key", Base64Encode(key)},
                {"range_end", Base64Encode(range_end)},
                {"limit", "1"},
                {"sort_order", "DESCEND"},
                {"sort_target", "CREATE"}};
  if (max_create_revision > 0) range["max_create_revision"] = std::to_string(max_create_revision);
  return {{"request_range", std::move(range)}};
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff) end.pop_back();
  if (end.empty()) return std::string(1, '\0');
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

std::string TxnBody(const Json& compare, const Json& success, const Json& failure) {
  return Txn(compare, success, failure);
}

Json TxnRequest(const Json& compare, const Json& success, const Json& failure) {
  Json txn = {{"compare", compare}, {"success", success}};
  if (!failure.empty()) txn["failure"] = failure;
  return {{"request_txn", std::move(txn)}};
}

std::string LeaseGrantBody(int64_t ttl_s) { return Json{{"TTL", std::to_string(ttl_s)}}.dump(); }

std::string LeaseIdBody(int64_t lease) { return Json{{"ID", std::to_string(lease)}}.dump(); }

std::string LeaseTimeToLiveBody(int64_t lease, bool keys) {
  Json body = {{"ID", std::to_string(lease)}};
  if (keys) body["keys"] = true;
  return body.dump();
}

std::string WatchDeletesBody(const std::string& key, const std::string& range_end) {
  return Json{{"create_request",
               {{"key", Base64Encode(key)},
                {"range_end", Base64Encode(range_end)},
                {"filters", Json::array({"NOPUT"})},
                {"progress_notify", true}}}}
      .dump();
}

std::string WatchPutsBody(const std::string& key, int64_t start_revision) {
  Json create = {{"key", Base64Encode(key)}, {"filters", Json::array({"NODELETE"})}, {"progress_notify", true}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  return Json{{"create_request", std::move(create)}}.dump();
}

Status ReadTxn(const Json& answer, TxnAnswer* out) {
  *out = TxnAnswer();
  out->succeeded = ReadBool(answer, "succeeded");
  out->revision = ReadRevision(answer);
  if (out->revision == 0) return Malformed("a transaction");
  const Json* responses = Field(answer, "responses");
  if (responses == nullptr) return Status::Ok();
  if (!responses->is_array()) return Malformed("a transaction");
  for (const Json& r : *responses) {
    const Json* range = Field(r, "response_range");
    if (range == nullptr) continue;
    const Json* kvs = Field(*range, "kvs");
    if (kvs == nullptr) continue;
    if (!kvs->is_array()) return Malformed("a transaction's read");
    for (const Json& kv : *kvs) {
      KeyValue v;
      if (!ReadKeyValue(kv, &v)) return Malformed("a transaction's read");
      out->kvs.push_back(std::move(v));
    }
  }
  return Status::Ok();
}

Status ReadRange(const Json& answer, KeyValue* out, bool* found) {
  *found = false;
  *out = KeyValue();
  if (ReadRevision(answer) == 0) return Malformed("a read");
  const Json* kvs = Field(answer, "kvs");
  if (kvs == nullptr) return Status::Ok();
  if (!kvs->is_array()) return Malformed("a read");
  if (kvs->empty()) return Status::Ok();
  if (!ReadKeyValue((*kvs)[0], out)) return Malformed("a read");
  *found = true;
  return Status::Ok();
}

Status ReadRangeAll(const Json& answer, std::vector<KeyValue>* out, int64_t* revision) {
  out->clear();
  *revision = ReadRevision(answer);
  if (*revision == 0) return Malformed("a read");
  const Json* kvs = Field(answer, "kvs");
  if (kvs == nullptr) return Status::Ok();
  if (!kvs->is_array()) return Malformed("a read");
  for (const Json& kv : *kvs) {
    KeyValue v;
    if (!ReadKeyValue(kv, &v)) {
      out->clear();
      return Malformed("a read");
    }
    out->push_back(std::move(v));
  }
  return Status::Ok();
}

Status ReadGrant(const Json& answer, int64_t* lease, int64_t* ttl_s) {
  *lease = ReadInt(answer, "ID", std::numeric_limits<int64_t>::min(), kMaxInt64, 0);
  *ttl_s = ReadInt(answer, "TTL", 0, kMaxLeaseTtlS, 0);
  std::string error = ReadString(answer, "error");
  if (!error.empty()) return Status::BackendError("etcd refused a lease: " + error);
  if (*lease == 0 || *ttl_s <= 0) return Malformed("a lease grant");
  return Status::Ok();
}

Status ReadKeepAlive(const Json& answer, int64_t* ttl_s) {
  const Json* result = Field(answer, "result");
  if (result == nullptr || !result->is_object()) return Malformed("a lease keepalive");
  *ttl_s = ReadInt(*result, "TTL", 0, kMaxLeaseTtlS, 0);
  return Status::Ok();
}

Status ReadTimeToLive(const Json& answer, int64_t* ttl_s, std::vector<std::string>* keys) {
  if (ReadRevision(answer) == 0) return Malformed("a lease's time to live");
  *ttl_s = ReadInt(answer, "TTL", -1, kMaxLeaseTtlS, 0);
  if (keys == nullptr) return Status::Ok();
  keys->clear();
  const Json* list = Field(answer, "keys");
  if (list == nullptr) return Status::Ok();
  if (!list->is_array()) return Malformed("a lease's keys");
  for (const Json& k : *list) {
    std::string key;
    if (!k.is_string() || !Base64Decode(k.get_ref<const std::string&>(), &key)) return Malformed("a lease's keys");
    keys->push_back(std::move(key));
  }
  return Status::Ok();
}

int64_t ReadGrantedTtl(const Json& answer) { return ReadInt(answer, "grantedTTL", 0, kMaxLeaseTtlS, 0); }

Status ReadWatchMessage(const Json& line, WatchMessage* out) {
  *out = WatchMessage();
  const Json* result = Field(line, "result");
  if (result == nullptr || !result->is_object()) return Malformed("a watch");
  out->created = ReadBool(*result, "created");
  out->canceled = ReadBool(*result, "canceled");
  out->compact_revision = ReadInt(*result, "compact_revision", 0, kMaxInt64, 0);
  out->cancel_reason = ReadString(*result, "cancel_reason");
  out->revision = ReadRevision(*result);
  const Json* events = Field(*result, "events");
  if (events == nullptr) return Status::Ok();
  if (!events->is_array()) return Malformed("a watch's events");
  for (const Json& e : *events) {
    if (!e.is_object()) return Malformed("a watch's events");
    ++out->events;
    if (ReadString(e, "type") == "DELETE") {
      ++out->deletes;
      const Json* kv = Field(e, "kv");
      std::string key;
      if (kv != nullptr && kv->is_object() && ReadBytes(*kv, "key", &key) && !key.empty()) {
        out->deleted.push_back(std::move(key));
      }
      continue;
    }
    // A PUT (the type at its zero value is left out).
    const Json* kv = Field(e, "kv");
    if (kv == nullptr) continue;
    KeyValue put;
    if (!ReadKeyValue(*kv, &put)) return Malformed("a watch's put");
    out->puts.push_back(std::move(put));
  }
  return Status::Ok();
}

Status TakeWatchLines(std::string* buffer, std::vector<WatchMessage>* out) {
  // A watch message is small (a deletion); a line longer than this is not etcd's.
  constexpr size_t kMaxLine = 1 << 20;
  size_t start = 0;
  Status status;
  for (size_t nl; (nl = buffer->find('\n', start)) != std::string::npos; start = nl + 1) {
    Json line;
    WatchMessage m;
    if (!ParseObject(std::string_view(*buffer).substr(start, nl - start), &line)) {
      status = Malformed("a watch line");
    } else {
      status = ReadWatchMessage(line, &m);
    }
    if (!status.ok()) break;
    out->push_back(std::move(m));
  }
  buffer->erase(0, start);
  if (status.ok() && buffer->size() > kMaxLine) status = Malformed("a watch line over 1 MiB");
  return status;
}

}  // namespace dlock::etcd
