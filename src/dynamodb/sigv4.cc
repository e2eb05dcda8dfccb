#include "dynamodb/sigv4.h"

#include "core/text.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <algorithm>
#include <cctype>
#include <map>

namespace dlock::dynamodb {
namespace {

constexpr char kHexUpper[] = "0123456789ABCDEF";
constexpr char kAlgorithm[] = "AWS4-HMAC-SHA256";

// A Secret: the keys derived from the secret key sign requests as well as the secret does.
Secret Hmac(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out, &len);
  Secret mac(std::string(reinterpret_cast<char*>(out), len));
  OPENSSL_cleanse(out, sizeof out);
  return mac;
}

bool Unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

// Query components may arrive percent-encoded or raw: decode first so that both canonicalize
// the same way. A '%' that starts no valid escape is taken literally.
std::string Decoded(std::string_view in) {
  std::string out;
  PercentDecode(in, /*strict=*/false, &out);
  return out;
}

// RFC 3986 dot-segment removal plus collapsing of empty segments, as AWS's normalization does.
std::string NormalizePath(const std::string& path) {
  std::vector<std::string_view> segments;
  std::string_view rest(path);
  while (!rest.empty()) {
    size_t slash = rest.find('/');
    std::string_view seg = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.push_back(seg);
  }
  std::string out = "/";
  for (size_t i = 0; i < segments.size(); ++i) {
    if (i > 0) out += '/';
    out.append(segments[i]);
  }
  if (!segments.empty() && path.size() > 1 && path.back() == '/') out += '/';
  return out;
}

std::string CanonicalQuery(const std::string& query) {
  std::vector<std::pair<std::string, std::string>> params;
  std::string_view rest(query);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view item = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : item.substr(eq + 1);
    params.emplace_back(UriEncode(Decoded(key), false), UriEncode(Decoded(value), false));
  }
  std::sort(params.begin(), params.end());
  std::string out;
  for (const auto& [key, value] : params) {
    if (!out.empty()) out += '&';
    out += key;
    out += '=';
    out += value;
  }
  return out;
}

// Trims and collapses every run of whitespace (including folded lines) to one space.
std::string CanonicalHeaderValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  bool pending_space = false;
  for (char c : value) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space) out += ' ';
    pending_space = false;
    out += c;
  }
  return out;
}

}  // namespace

std::string AmzDate(std::time_t t) {
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  return HexBytes(digest, len);
}

std::string UriEncode(std::string_view in, bool keep_slash) {
  std::string out;
  out.reserve(in.size());
  for (char ch : in) {
    auto c = static_cast<unsigned char>(ch);
    if (Unreserved(c) || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 15];
    }
  }
  return out;
}

Secret Signer::SigningKey(const std::string& secret, const std::string& date,
                          const std::string& region, const std::string& service) {
  std::string scope = date + '/' + region + '/' + service;
  std::lock_guard<std::mutex> lock(mu_);
  if (scope != cached_scope_ || secret != cached_secret_) {
    Secret first;  // "AWS4" + secret, built in one buffer that is wiped
    first.reserve(4 + secret.size());
    first.append("AWS4").append(secret);
    Secret k = Hmac(first, date);
    k = Hmac(k, region);
    k = Hmac(k, service);
    cached_key_ = Hmac(k, "aws4_request");
    cached_secret_ = Secret(secret);
    cached_scope_ = std::move(scope);
  }
  return cached_key_;
}

SignedParts Signer::Sign(const SigningRequest& request, const Credentials& credentials,
                         const SigningOptions& options) {
  SignedParts out;
  const std::string amz_date = AmzDate(options.timestamp);
  const std::string date = amz_date.substr(0, 8);
  const std::string payload_hash = Sha256Hex(request.body);

  out.add_headers.emplace_back("X-Amz-Date", amz_date);
  if (!credentials.session_token.empty() && !options.omit_session_token) {
    out.add_headers.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  if (options.sign_body) out.add_headers.emplace_back("x-amz-content-sha256", payload_hash);

  // Lowercase name -> values in order; std::map keeps the names sorted.
  std::map<std::string, std::vector<std::string>> headers;
  for (const auto& [name, value] : request.headers) {
    headers[Lower(name)].push_back(CanonicalHeaderValue(value));
  }
  for (const auto& [name, value] : out.add_headers) headers[Lower(name)].push_back(value);

  std::string canonical_headers, signed_headers;
  for (const auto& [name, values] : headers) {
    canonical_headers += name;
    canonical_headers += ':';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) canonical_headers += ',';
      canonical_headers += values[i];
    }
    canonical_headers += '\n';
    if (!signed_headers.empty()) signed_headers += ';';
    signed_headers += name;
  }

  const std::string path = options.normalize_path ? NormalizePath(request.path) : request.path;
  out.canonical_request = request.method + '\n' + UriEncode(path, true) + '\n' +
                          CanonicalQuery(request.query) + '\n' + canonical_headers + '\n' +
                          signed_headers + '\n' + payload_hash;

  const std::string scope = date + '/' + options.region + '/' + options.service + "/aws4_request";
  out.string_to_sign = std::string(kAlgorithm) + '\n' + amz_date + '\n' + scope + '\n' +
                       Sha256Hex(out.canonical_request);
  const Secret key =
      SigningKey(credentials.secret_access_key, date, options.region, options.service);
  std::string mac = Hmac(key, out.string_to_sign);
  out.signature = HexBytes(reinterpret_cast<const unsigned char*>(mac.data()), mac.size());
  out.authorization = std::string(kAlgorithm) + " Credential=" + credentials.access_key_id + '/' +
                      scope + ", SignedHeaders=" + signed_headers + ", Signature=" + out.signature;
  if (!credentials.session_token.empty() && options.omit_session_token) {
    out.add_headers.emplace_back("X-Amz-Security-Token", credentials.session_token);
  }
  out.add_headers.emplace_back("Authorization", out.authorization);
  return out;
}

}  // namespace dlock::dynamodb
