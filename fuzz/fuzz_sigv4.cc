// SigV4 canonicalisation over arbitrary requests: method, path, query, headers and body cut
// from the input at NUL bytes. Signing never crashes, whatever it is given.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dynamodb/sigv4.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0 && parts.size() < 12) {
      parts.emplace_back();
    } else {
      parts.back().push_back(static_cast<char>(data[i]));
    }
  }
  parts.resize(12);
  dlock::dynamodb::SigningRequest request;
  request.method = parts[0];
  request.path = parts[1];
  request.query = parts[2];
  for (size_t i = 3; i + 1 < 11; i += 2) request.headers.emplace_back(parts[i], parts[i + 1]);
  request.body = parts[11];
  dlock::dynamodb::Credentials credentials{"AKID", "secret", parts[2].size() % 2 ? "token" : "", 0, "fuzz"};
  dlock::dynamodb::SigningOptions options;
  options.region = "us-east-1";
  options.service = "dynamodb";
  options.timestamp = static_cast<std::time_t>(size * 7919);
  options.normalize_path = size % 2 == 0;
  dlock::dynamodb::Signer signer;
  (void)signer.Sign(request, credentials, options);
  (void)dlock::dynamodb::UriEncode(parts[1], true);
  return 0;
}
