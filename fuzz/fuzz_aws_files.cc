// What dlock reads from AWS files and endpoints: the shared config/credentials INI text, the
// JSON that container and instance-metadata endpoints answer, and their ISO 8601 expiry times.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dynamodb/aws_profile.h"
#include "dynamodb/credentials.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  (void)dlock::dynamodb::ParseIni(text);
  (void)dlock::dynamodb::ParseIsoTime(text);
  dlock::dynamodb::Credentials credentials;
  (void)dlock::dynamodb::ParseCredentialsJson(text, "fuzz", &credentials);
  return 0;
}
