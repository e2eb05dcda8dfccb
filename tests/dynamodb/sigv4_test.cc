// SigV4 against AWS's published test suite and against golden DynamoDB vectors, read from
// tests/dynamodb/testdata at test time: the canonical request, the string to sign and the signature
// (or the whole Authorization header) must match byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "dynamodb/sigv4.h"

namespace dlock::dynamodb {
namespace {

namespace fs = std::filesystem;

const fs::path kTestData = DLOCK_TESTDATA_DIR;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::time_t ParseTimestamp(const std::string& iso) {  // "2015-08-30T12:36:00Z"
  std::tm tm{};
  std::istringstream in(iso);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  EXPECT_FALSE(in.fail()) << iso;
  return timegm(&tm);
}

// request.txt: "METHOD TARGET HTTP/1.1", "Name:value" lines (a line starting with whitespace
// continues the previous value), a blank line, the body.
SigningRequest ParseRequest(const std::string& text, std::string* body) {
  SigningRequest request;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);
  size_t space = line.find(' ');
  size_t version = line.rfind(" HTTP/");
  std::string target = line.substr(space + 1, version - space - 1);
  request.method = line.substr(0, space);
  size_t question = target.find('?');
  request.path = target.substr(0, question);
  if (question != std::string::npos) request.query = target.substr(question + 1);
  while (std::getline(in, line) && !line.empty()) {
    if (line[0] == ' ' || line[0] == '\t') {
      request.headers.back().second += "\n" + line;
      continue;
    }
    size_t colon = line.find(':');
    request.headers.emplace_back(line.substr(0, colon), line.substr(colon + 1));
  }
  std::ostringstream rest;
  rest << in.rdbuf();
  *body = rest.str();
  return request;
}

std::string AuthorizationLine(const std::string& signed_request) {
  std::istringstream in(signed_request);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Authorization:", 0) == 0) return line.substr(strlen("Authorization:"));
  }
  return "";
}

std::vector<std::string> CaseNames(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(SigV4, AwsSuiteHeaderSigning) {
  // Every header-signing case of the suite: the post-*, get-vanilla* and session-token cases
  // the issue names, and the path/header normalization cases besides.
  std::vector<std::string> cases = CaseNames(kTestData / "aws-sigv4");
  ASSERT_GE(cases.size(), 30u) << "test data missing under " << kTestData;
  int checked = 0;
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    fs::path dir = kTestData / "aws-sigv4" / name;
    nlohmann::json context = nlohmann::json::parse(ReadFile(dir / "context.json"));
    std::string body;
    SigningRequest request = ParseRequest(ReadFile(dir / "request.txt"), &body);
    request.body = body;
    Credentials credentials;
    credentials.access_key_id = context["credentials"]["access_key_id"];
    credentials.secret_access_key = context["credentials"]["secret_access_key"];
    if (context["credentials"].contains("token")) {
      credentials.session_token = context["credentials"]["token"];
    }
    SigningOptions options;
    options.region = context["region"];
    options.service = context["service"];
    options.timestamp = ParseTimestamp(context["timestamp"]);
    options.normalize_path = context.value("normalize", true);
    options.sign_body = context.value("sign_body", false);
    options.omit_session_token = context.value("omit_session_token", false);

    Signer signer;
    SignedParts parts = signer.Sign(request, credentials, options);
    EXPECT_EQ(parts.canonical_request, ReadFile(dir / "header-canonical-request.txt"));
    EXPECT_EQ(parts.string_to_sign, ReadFile(dir / "header-string-to-sign.txt"));
    EXPECT_EQ(parts.signature, ReadFile(dir / "header-signature.txt"));
    EXPECT_EQ(parts.authorization, AuthorizationLine(ReadFile(dir / "header-signed-request.txt")));
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(SigV4, NamedAwsCasesArePresent) {
  // The cases the issue requires must really be in the data set that the test above walks.
  for (const char* name : {"post-vanilla", "post-header-key-sort", "post-sts-header-before",
                           "post-sts-header-after", "get-vanilla-with-session-token",
                           "get-vanilla-query-order-encoded", "post-x-www-form-urlencoded"}) {
    EXPECT_TRUE(fs::exists(kTestData / "aws-sigv4" / name / "header-signature.txt")) << name;
  }
}

TEST(SigV4, DynamoDbGoldenVectors) {
  std::vector<std::string> cases = CaseNames(kTestData / "dynamodb-sigv4");
  ASSERT_EQ(cases.size(), 4u) << "test data missing under " << kTestData;
  Signer signer;  // one signer for all: its key cache must not leak between scopes
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    fs::path dir = kTestData / "dynamodb-sigv4" / name;
    nlohmann::json context = nlohmann::json::parse(ReadFile(dir / "context.json"));
    std::string body = ReadFile(dir / "body.json");
    SigningRequest request;
    request.method = "POST";
    request.path = "/";
    request.headers = {{"Content-Length", std::to_string(body.size())},
                       {"Content-Type", "application/x-amz-json-1.0"},
                       {"Host", context["host"]},
                       {"X-Amz-Target", context["target"]}};
    request.body = body;
    Credentials credentials;
    credentials.access_key_id = context["credentials"]["access_key_id"];
    credentials.secret_access_key = context["credentials"]["secret_access_key"];
    if (context["credentials"]["token"].is_string()) {
      credentials.session_token = context["credentials"]["token"];
    }
    SigningOptions options;
    options.region = context["region"];
    options.service = context["service"];
    options.timestamp = ParseTimestamp(context["timestamp"]);
    SignedParts parts = signer.Sign(request, credentials, options);
    EXPECT_EQ(parts.canonical_request, ReadFile(dir / "canonical-request.txt"));
    EXPECT_EQ(parts.string_to_sign, ReadFile(dir / "string-to-sign.txt"));
    EXPECT_EQ(parts.authorization, ReadFile(dir / "authorization.txt"));
  }
}

TEST(SigV4, SessionTokenIsSentAndSignedUnlessOmitted) {
  Credentials credentials{"AKID", "secret", "TOKEN", 0, "test"};
  SigningRequest request;
  request.method = "POST";
  request.headers = {{"Host", "example.com"}};
  SigningOptions options;
  options.region = "us-east-1";
  options.service = "dynamodb";
  options.timestamp = 0;
  Signer signer;
  SignedParts signed_token = signer.Sign(request, credentials, options);
  EXPECT_NE(signed_token.authorization.find("x-amz-security-token"), std::string::npos);
  options.omit_session_token = true;
  SignedParts unsigned_token = signer.Sign(request, credentials, options);
  EXPECT_EQ(unsigned_token.authorization.find("x-amz-security-token"), std::string::npos);
  bool sent = false;
  for (const auto& [name, value] : unsigned_token.add_headers) {
    if (name == "X-Amz-Security-Token") sent = value == "TOKEN";
  }
  EXPECT_TRUE(sent);
  EXPECT_NE(signed_token.signature, unsigned_token.signature);
}

TEST(SigV4, UriEncodeKeepsOnlyUnreserved) {
  EXPECT_EQ(UriEncode("a-b_c.d~e/f g", true), "a-b_c.d~e/f%20g");
  EXPECT_EQ(UriEncode("a/b", false), "a%2Fb");
  EXPECT_EQ(UriEncode("\xE1\x88\xB4", false), "%E1%88%B4");
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace dlock::dynamodb
