// Shared fixture and helpers for the DynamoDB integration tests.
#ifndef DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_
#define DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/dynalite_server.h"
#include "support/fake_http_server.h"
#include "test_util.h"

extern char** environ;

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

// A running worker process (ddb_worker.c); killed and reaped by the destructor.
class Worker {
 public:
  explicit Worker(std::vector<std::string> args) {
    args.insert(args.begin(), DLOCK_DDB_WORKER);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    if (posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    stdout_ = fdopen(out[0], "r");
  }
  ~Worker() {
    Kill();
    if (stdout_ != nullptr) fclose(stdout_);
  }
  // Reads "ACQUIRED <token>" from the worker; 0 when it did not say so.
  uint64_t AwaitAcquired() {
    unsigned long long token = 0;
    if (stdout_ == nullptr || fscanf(stdout_, "ACQUIRED %llu", &token) != 1) return 0;
    return token;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Waits for it to exit; its exit status (-1 when killed).
  int Wait() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, 0) != pid_) return -1;
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* stdout_ = nullptr;
};

inline int64_t ElapsedMs(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_DYNAMODB_DDB_TEST_UTIL_H_
