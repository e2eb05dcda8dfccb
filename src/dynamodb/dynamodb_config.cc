#include "dynamodb/dynamodb_config.h"

#include <cctype>

#include "dynamodb/aws_profile.h"

namespace dlock::dynamodb {
namespace {

Status ParseBool(const std::string& key, const std::string& value, bool* out) {
  if (value == "1" || value == "true") {
    *out = true;
  } else if (value == "0" || value == "false") {
    *out = false;
  } else {
    return Status::InvalidArgument("URL parameter " + key + "='" + value + "' must be 0 or 1");
  }
  return Status::Ok();
}

Status CheckTableName(const std::string& table) {
  if (table.size() < 3 || table.size() > 255) {
    return Status::InvalidArgument("DynamoDB table name '" + table + "' must be 3 to 255 characters");
  }
  for (char c : table) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
      return Status::InvalidArgument("DynamoDB table name '" + table +
                                     "' may hold only letters, digits, '_', '-' and '.'");
    }
  }
  return Status::Ok();
}

Status CheckAttributeName(const std::string& param, const std::string& name) {
  if (name.empty() || name.size() > 255) {
    return Status::InvalidArgument("URL parameter " + param + " must be 1 to 255 bytes");
  }
  for (const char* reserved : {attr::kOwner, attr::kRecordVersion, attr::kLeaseMs,
                               attr::kRenewedAtMs, attr::kFence, attr::kHolds, attr::kPermits,
                               attr::kWriter, attr::kData, attr::kClosed, attr::kBroken,
                               attr::kMinHoldMs, attr::kLockDelayMs, attr::kReleaseRequest}) {
    if (name == reserved) {
      return Status::InvalidArgument(
          "URL parameter " + param + "='" + name + "' collides with an attribute the lock "
          "protocol writes (owner, recordVersion, leaseMs, renewedAtMs, fence, holds, permits, "
          "writer, data, closed, broken, minHoldMs, lockDelayMs, releaseRequest): pick another "
          "name");
    }
  }
  for (const char* marker : foreign::kMarkers) {
    if (name == marker) {
      // Every item would carry it, and be judged another lock client's (docs/dynamodb.md).
      return Status::InvalidArgument(
          "URL parameter " + param + "='" + name + "' is an attribute by which dlock knows other "
          "lock clients' items (ownerName, recordVersionNumber, leaseDuration, guid, "
          "fencingToken): pick another name");
    }
  }
  if (!IsValidUtf8(name)) return Status::InvalidArgument("URL parameter " + param + " is not UTF-8");
  return Status::Ok();
}

// Checks an endpoint URL and derives the Host header curl will send (and we sign).
Status ParseEndpoint(const std::string& endpoint, const std::string& from, DynamoConfig* out) {
  std::string e = endpoint;
  while (!e.empty() && e.back() == '/') e.pop_back();
  bool https = e.rfind("https://", 0) == 0;
  if (!https && e.rfind("http://", 0) != 0) {
    return Status::InvalidArgument("DynamoDB endpoint '" + endpoint + "' (from " + from +
                                   ") must start with http:// or https://");
  }
  std::string authority = e.substr(https ? 8 : 7);
  if (authority.empty() || authority.find_first_of("/?#@ ") != std::string::npos) {
    return Status::InvalidArgument("DynamoDB endpoint '" + endpoint + "' (from " + from +
                                   ") must be scheme://host[:port] with no path");
  }
  // Drop a default port: curl leaves it out of Host, and the signature must match.
  std::string default_port = https ? ":443" : ":80";
  if (authority.size() > default_port.size() &&
      authority.compare(authority.size() - default_port.size(), default_port.size(), default_port) == 0 &&
      authority.back() != ']') {
    authority.resize(authority.size() - default_port.size());
  }
  out->endpoint = (https ? "https://" : "http://") + authority;
  out->host_header = authority;
  return Status::Ok();
}

}  // namespace

std::string DynamoConfig::Describe() const {
  return "dynamodb table '" + table + "' at " + endpoint +
         TlsVerifyNote(endpoint.rfind("https://", 0) == 0, tls_verify);
}

bool IsValidUtf8(const std::string& text) {
  size_t i = 0, n = text.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(text[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

namespace {

Status ReadDynamoUrl(const Url& url, DynamoConfig* out) {
  *out = DynamoConfig();
  std::vector<std::pair<std::string, std::string>> values;
  Status s = ParseCommonParams(url,
                               {"region", "endpoint", "partition_key", "sort_key",
                                "trust_local_time", "tls_verify"},
                               &out->params, &values);
  if (!s.ok()) return s;
  if (url.user.has_value() || url.password.has_value()) {
    return Status::InvalidArgument(
        "dynamodb:// URLs take no user or password: credentials come from the AWS chain "
        "(environment, ~/.aws files, container or instance credentials)");
  }
  if (url.hosts.size() != 1 || url.hosts[0].port != 0 || (!url.path.empty() && url.path != "/")) {
    return Status::InvalidArgument(
        "dynamodb:// URL must name one table and nothing else before '?' "
        "(dynamodb://TABLE?region=R[&endpoint=URL])");
  }
  out->table = url.hosts[0].host;
  s = CheckTableName(out->table);
  if (!s.ok()) return s;

  std::string endpoint;
  for (const auto& [key, value] : values) {
    if (key == "region") {
      if (value.empty()) return Status::InvalidArgument("URL parameter region is empty");
      out->region = value;
    } else if (key == "endpoint") {
      endpoint = value;
      if (endpoint.empty()) return Status::InvalidArgument("URL parameter endpoint is empty");
    } else if (key == "partition_key") {
      s = CheckAttributeName(key, value);
      if (!s.ok()) return s;
      out->partition_key = value;
    } else if (key == "sort_key") {
      s = CheckAttributeName(key, value);
      if (!s.ok()) return s;
      out->sort_key = value;
    } else if (key == "trust_local_time") {
      s = ParseBool(key, value, &out->trust_local_time);
      if (!s.ok()) return s;
    } else if (key == "tls_verify") {
      s = ParseBool(key, value, &out->tls_verify);
      if (!s.ok()) return s;
    }
  }
  if (!out->sort_key.empty() && out->sort_key == out->partition_key) {
    return Status::InvalidArgument("URL parameters partition_key and sort_key are both '" +
                                   out->sort_key + "'");
  }
  for (char c : out->region) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) {
      return Status::InvalidArgument("region '" + out->region + "' is not an AWS region name");
    }
  }

  // What the URL leaves out comes from the environment, then the shared config file.
  AwsProfile profile;
  bool need_profile = out->region.empty() || endpoint.empty();
  if (need_profile) {
    s = LoadAwsProfile(&profile);
    if (!s.ok()) return s;
  }
  std::string region_from = "URL";
  if (out->region.empty()) {
    for (const char* var : {"AWS_REGION", "AWS_DEFAULT_REGION"}) {
      if (!Env(var).empty()) {
        out->region = Env(var);
        region_from = var;
        break;
      }
    }
  }
  if (out->region.empty()) out->region = profile.Get("region");
  if (out->region.empty()) {
    return Status::InvalidArgument(
        "no AWS region: add region= to the dynamodb:// URL, or set AWS_REGION, or region in "
        "~/.aws/config");
  }
  std::string endpoint_from = "URL parameter endpoint";
  if (endpoint.empty() && !IsTrue(Env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))) {
    for (const char* var : {"AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL"}) {
      if (!Env(var).empty()) {
        endpoint = Env(var);
        endpoint_from = var;
        break;
      }
    }
    if (endpoint.empty() && !profile.Get("endpoint_url").empty()) {
      endpoint = profile.Get("endpoint_url");
      endpoint_from = "endpoint_url of profile '" + profile.name + "'";
    }
  }
  if (endpoint.empty()) {
    bool china = out->region.rfind("cn-", 0) == 0;
    endpoint = "https://dynamodb." + out->region + (china ? ".amazonaws.com.cn" : ".amazonaws.com");
    endpoint_from = "region " + out->region;
  }
  return ParseEndpoint(endpoint, endpoint_from, out);
}

}  // namespace

Status ParseDynamoUrl(const Url& url, DynamoConfig* out) {
  return UrlError(url, ReadDynamoUrl(url, out));
}

Status SplitLockName(const DynamoConfig& config, const std::string& name, std::string* partition,
                     std::string* sort) {
  if (!IsValidUtf8(name)) {
    return Status::InvalidArgument("lock name is not valid UTF-8, which DynamoDB string keys require");
  }
  if (config.sort_key.empty()) {
    *partition = config.params.prefix + name;
    sort->clear();
    return Status::Ok();
  }
  size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size()) {
    return Status::InvalidArgument("lock name '" + name + "' must be PARTITION/SORT (both non-empty) " +
                                   "for a table with sort key '" + config.sort_key + "'");
  }
  *partition = config.params.prefix + name.substr(0, slash);
  *sort = name.substr(slash + 1);
  return Status::Ok();
}

}  // namespace dlock::dynamodb
