// The backends the conformance suite runs against. Each factory starts a real server of its own
// for the suite and says how clients reach it; tests use the server only through the public
// ABI, except where a test must act behind the clients' backs (delete a lock, kill the server).
// A new backend joins the suite by adding its factory to AllBackends() (backends.cc).
#ifndef DLOCK_TESTS_CONFORMANCE_BACKEND_H_
#define DLOCK_TESTS_CONFORMANCE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "redis/wire/keys.h"
#include "support/redis_server.h"  // RedisPauseWritesCommand and the rest, for HoldAnswers

namespace dlock_test {

// One running server. The destructor stops it by pid (and reaps it).
class BackendServer {
 public:
  virtual ~BackendServer() = default;
  virtual bool running() const = 0;
  // The URL a client opens (the backend ready for use: tables made, and so on).
  virtual std::string url() const = 0;
  // A URL of this server that dlock_backend_prepare has not been run for (each call a new
  // one: DynamoDB, a table nobody made), or url() when the backend needs no preparing.
  virtual std::string UnpreparedUrl() { return url(); }
  // What an error message names when the server cannot be reached.
  virtual std::string address() const = 0;
  // Deletes lock `name`'s record on the server, as an operator or a bug might behind the
  // holder's back. True when the server did it.
  virtual bool DeleteLock(const std::string& name) = 0;
  // SIGKILLs the server (by pid): clients find it gone.
  virtual void Kill() = 0;
  // Starts it again at the same address, empty, and makes it ready for use. True on success.
  virtual bool Restart() = 0;
  // How many acquires wait in lock `name`'s line of fair waiters, as the server shows it, for
  // tests that must know a waiter took its place before they go on; -1 when the backend keeps
  // no line (it lacks DLOCK_CAP_FAIR).
  virtual int InLine(const std::string& /*name*/) { return -1; }
  // How many connections listen for lock `name`'s releases, as the server shows it, for tests
  // that must know a watch is live; -1 when the server cannot show it.
  virtual int Listening(const std::string& /*name*/) { return -1; }
  // How many client connections the server lists now, the one asking left out, for tests that
  // compare a client's count of its connections (dlock_connections) with the server's; -1 when
  // the deployment cannot show them in one list (several servers, or not Redis).
  virtual int ClientConnections() { return -1; }
  // Closes every client connection from the server's side, as a restart or a proxy would; the
  // clients find out on their next use. False when the deployment cannot.
  virtual bool DropClientConnections() { return false; }
  // Holding the server's answers back, for a test that needs a call provably in flight (sent,
  // its answer not yet read) when it acts. After HoldAnswers() no request is answered until
  // ReleaseAnswers(), and then each is, as if it had been slow: the Redis deployments pause
  // writes on every data node (CLIENT PAUSE WRITE: a lock script waits unanswered, and runs at
  // the release), dynalite and etcd are SIGSTOPped (a request waits unread in its socket).
  // HoldAnswers is true when every server holds; RequestHeld() once a request that arrived
  // after HoldAnswers waits on every server a lock call goes to (all of Redlock's masters; the
  // one master of the other deployments).
  virtual bool HoldAnswers() = 0;
  virtual bool RequestHeld() = 0;
  virtual void ReleaseAnswers() = 0;
};

// Holds a server's answers back for its lifetime (BackendServer::HoldAnswers), so that a test
// that stops at a failed assertion leaves the server answering for the next.
class AnswersHeld {
 public:
  explicit AnswersHeld(BackendServer& server) : server_(server), ok_(server.HoldAnswers()) {}
  ~AnswersHeld() { Release(); }
  AnswersHeld(const AnswersHeld&) = delete;
  AnswersHeld& operator=(const AnswersHeld&) = delete;
  bool ok() const { return ok_; }
  void Release() {
    if (!released_) server_.ReleaseAnswers();
    released_ = true;
  }

 private:
  BackendServer& server_;
  bool ok_;
  bool released_ = false;
};

struct BackendFactory {
  std::string name;       // the tests' name suffix: "redis", "redis_cluster", "dynamodb"
  uint32_t capabilities;  // what dlock_client_capabilities must say for this backend
  // Starts a server; ADD_FAILURE()s and returns one that is not running() when it cannot.
  std::function<std::unique_ptr<BackendServer>()> start;
  // dlock_inspect shows each holder's fencing token (etcd's layout=mutex cannot: 0, unknown).
  bool inspect_shows_tokens = true;
};

inline void PrintTo(const BackendFactory& f, std::ostream* os) { *os << f.name; }

// The redis-cli words that delete every key of Redis lock `name` (its exclusive holder and its
// shared or semaphore holds): DeleteLock on the Redis deployments.
inline std::vector<std::string> RedisDeleteLockCommand(const std::string& name) {
  const dlock::redis::LockKeys keys("dlock:", name);
  return {"DEL", keys.holder, keys.holds, keys.hold_data};
}
// The redis-cli words that count the fair waiters in Redis lock `name`'s line: InLine.
inline std::vector<std::string> RedisLineCommand(const std::string& name) {
  return {"ZCARD", dlock::redis::LockKeys("dlock:", name).line};
}
// The redis-cli words that count the subscribers to Redis lock `name`'s release channel, plain
// (one server, Sentinel) or sharded (Cluster): Listening.
inline std::vector<std::string> RedisListenersCommand(const std::string& name, bool sharded) {
  return {"PUBSUB", sharded ? "SHARDNUMSUB" : "NUMSUB", dlock::redis::LockKeys::Channel("dlock:", name)};
}
// The redis-cli words that list the clients, and the count of other clients in the answer (a
// line each, the asking one left out): ClientConnections on one Redis server.
inline std::vector<std::string> RedisClientsCommand() { return {"CLIENT", "LIST"}; }
inline int RedisOtherClients(const std::string& answer) {
  if (answer.find("id=") != 0) return -1;  // an error, or nothing listening
  int lines = 0;
  for (size_t at = 0; at != std::string::npos; at = answer.find("\nid=", at + 1)) ++lines;
  return lines - 1;
}
// The redis-cli calls that close every client connection but the asking one (CLIENT KILL skips
// its caller): plain and pub/sub ones. DropClientConnections on one Redis server.
inline std::vector<std::vector<std::string>> RedisDropClientsCommands() {
  return {{"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "KILL", "TYPE", "pubsub"}};
}
// redis-cli's answer to it as a count; -1 for anything else (a cluster node's MOVED).
inline int RedisCount(const std::string& answer) {
  if (answer.empty() || answer.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoi(answer);
}
// redis-cli's answer to it ("CHANNEL\nCOUNT") as the count; -1 for anything else.
inline int RedisListeners(const std::string& answer) {
  const size_t newline = answer.rfind('\n');
  return newline == std::string::npos ? -1 : RedisCount(answer.substr(newline + 1));
}
// Whether redis-cli's answer to it says it deleted something (a count, not 0 and not an error
// such as a cluster node's MOVED).
inline bool RedisDeletedSome(const std::string& answer) {
  return !answer.empty() && answer != "0" &&
         answer.find_first_not_of("0123456789") == std::string::npos;
}

// Every backend of this build.
const std::vector<BackendFactory>& AllBackends();

// The factories, one per backend (each in its own file).
BackendFactory RedisTcpBackend();
BackendFactory RedisUnixBackend();
BackendFactory RedisClusterBackendFactory();
BackendFactory RedisSentinelBackendFactory();
BackendFactory RedisTlsBackendFactory();
BackendFactory RedisTlsClientCertBackendFactory();
BackendFactory Redlock3BackendFactory();
BackendFactory Redlock5BackendFactory();
BackendFactory DynamoDbBackend();
BackendFactory EtcdBackendFactory();
BackendFactory EtcdMutexBackendFactory();  // etcd with layout=mutex
BackendFactory PostgresBackendFactory();

}  // namespace dlock_test

#endif  // DLOCK_TESTS_CONFORMANCE_BACKEND_H_
