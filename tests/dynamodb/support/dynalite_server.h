// A real, throwaway dynalite (the npm local DynamoDB, pinned in tests/dynamodb/package-lock.json)
// for integration tests.
//
//   dlock_test::DynaliteServer ddb;                 // starts it, or ADD_FAILURE()s
//   ASSERT_TRUE(ddb.running());
//   ASSERT_TRUE(ddb.CreateTable("locks"));
//   dlock_client_open(ddb.url("locks").c_str(), &c);
//   auto item = ddb.GetItem("locks", "dlock:job");  // the raw item JSON, "" when none
//   ddb.Stop();  ddb.Restart();                       // gone, then back empty on the same port
//
// Each server listens on a free 127.0.0.1 port, keeps its data in memory, and makes tables
// ACTIVE at once. It is started with PR_SET_PDEATHSIG, so it dies with the thread that created
// it even if the test process is killed. Always stopped (and reaped) by the destructor.
#ifndef DLOCK_TESTS_DYNAMODB_SUPPORT_DYNALITE_SERVER_H_
#define DLOCK_TESTS_DYNAMODB_SUPPORT_DYNALITE_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "support/child_process.h"

namespace dlock_test {

struct RawResponse {
  long status = 0;      // 0 when the request failed
  std::string body;     // or curl's error when status is 0
};

class DynaliteServer {
 public:
  // extra_args go to dynalite's command line (e.g. {"--createTableMs", "300"}).
  explicit DynaliteServer(std::vector<std::string> extra_args = {});
  ~DynaliteServer();
  DynaliteServer(const DynaliteServer&) = delete;
  DynaliteServer& operator=(const DynaliteServer&) = delete;

  bool running() const { return pid() > 0; }
  pid_t pid() const { return process_ ? process_->pid() : -1; }  // for SIGSTOP / SIGCONT
  int port() const { return port_; }
  std::string endpoint() const;  // "http://127.0.0.1:PORT" ("https://" with --ssl)
  // "dynamodb://TABLE?region=us-east-1&endpoint=http://127.0.0.1:PORT" + "&" + extra params.
  std::string url(const std::string& table, const std::string& extra_params = "") const;

  // SIGKILL + reap; running() becomes false.
  void Kill();
  // SIGTERM (SIGKILL after 2 s) + reap.
  void Stop();
  // Starts again on the same port, empty. True when it answers within 10 s.
  bool Restart();

  // One DynamoDB call with a well-formed (unchecked by dynalite) signature.
  RawResponse Call(const std::string& operation, const std::string& json) const;
  // Creates a table with string key attributes (sort_key "" for none); true when ACTIVE.
  bool CreateTable(const std::string& table, const std::string& partition_key = "id",
                   const std::string& sort_key = "") const;
  // The item's JSON ("Item" of a consistent GetItem), "" when there is none.
  std::string GetItem(const std::string& table, const std::string& key_json) const;

 private:
  void Spawn();
  bool WaitReady(std::string* why);

  std::vector<std::string> extra_args_;
  bool tls_ = false;  // started with --ssl (dynalite's self-signed certificate)
  std::string node_;
  std::string log_path_;
  int port_ = -1;
  std::unique_ptr<ChildProcess> process_;
};

// Sets AWS credentials for the tests in this process and its children (dummy keys, region
// us-east-1), and turns off every source the chain would otherwise probe: no shared files,
// no container endpoint, no EC2 metadata service.
void UseTestCredentials();

}  // namespace dlock_test

#endif  // DLOCK_TESTS_DYNAMODB_SUPPORT_DYNALITE_SERVER_H_
