// Shared fixture and helpers for the DynamoDB integration tests.
#ifndef DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_
#define DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>

#include "support/dynalite_server.h"
#include "support/fake_http_server.h"
#include "test_util.h"

namespace dlock_test {

// Sets the test credentials before anything else in the fixture is built.
struct TestCredentials {
  TestCredentials() { UseTestCredentials(); }
};

// A dynalite with the table "locks" (key "id"), fresh for each test.
class DynamoTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(ddb_.running() && ddb_.CreateTable("locks")); }
  std::string url(const std::string& extra = "") const { return ddb_.url("locks", extra); }
  // The stored item of lock `name` in "locks" (default prefix), as JSON; null when none.
  nlohmann::json Item(const std::string& name) const {
    std::string text = ddb_.GetItem("locks", R"({"id":{"S":"dlock:)" + name + R"("}})");
    return text.empty() ? nlohmann::json() : nlohmann::json::parse(text);
  }
  static std::string S(const nlohmann::json& item, const char* attr) {
    return item.contains(attr) ? item[attr]["S"].get<std::string>() : std::string();
  }
  static uint64_t N(const nlohmann::json& item, const char* attr) {
    return item.contains(attr) ? std::stoull(item[attr]["N"].get<std::string>()) : 0;
  }

  TestCredentials credentials_;
  DynaliteServer ddb_;
};

inline int64_t ElapsedMs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_
