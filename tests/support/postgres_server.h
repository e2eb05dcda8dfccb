// A real, throwaway PostgreSQL server for integration tests (Debian's postgresql).
//
//   dlock_test::PostgresServer pg;                // initdb in a temp dir, postgres on a free
//   ASSERT_TRUE(pg.running());                    // loopback port; or ADD_FAILURE()s
//   pg.url();                                     // "postgres://dlock@127.0.0.1:PORT/dlock"
//   pg.Sql("SELECT 1");                           // psql's answer (unaligned, tuples only)
//   pg.Kill();  pg.Restart();                     // a crash, then back on its port and data
//   pg.Stop();  pg.Cont();                        // SIGSTOP, SIGCONT: a server that hangs
//
// PostgreSQL refuses to run as root. As root, initdb, postgres and psql run as the `postgres`
// system user that Debian's postgresql package creates, through setpriv (which execs: the
// pid is the server's own), and the temp dir is handed to that user. The binaries are
// PostgreSQL's, /usr/lib/postgresql/<newest major>/bin (DLOCK_PG_BIN overrides). The server
// listens on 127.0.0.1 only, trusts every local connection (the superuser is `dlock`, its
// database `dlock`), keeps its socket in its temp dir, and runs with fsync off: its data need
// not survive the machine, only the process (Kill, then Restart, keeps what was committed).
// It dies with the thread that started it (ChildProcess's PR_SET_PDEATHSIG) and is stopped by
// pid, and its temp dir removed, by the destructor.
#ifndef DLOCK_TESTS_SUPPORT_POSTGRES_SERVER_H_
#define DLOCK_TESTS_SUPPORT_POSTGRES_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "support/child_process.h"

namespace dlock_test {

class PostgresServer {
 public:
  PostgresServer();
  // A hot standby of primary, streaming from it (pg_basebackup -R), on a port of its own.
  struct StandbyOf {};
  PostgresServer(const PostgresServer& primary, StandbyOf);
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  bool running() const { return server_ != nullptr; }
  int port() const { return port_; }
  pid_t pid() const;  // -1 when it is not running
  // "postgres://dlock@127.0.0.1:PORT/dlock"
  std::string url() const;
  // Runs sql through psql as the superuser, in database (the clients' `dlock` by default): its output, unaligned and without headers (rows one
  // a line, columns joined by '|'); nullopt when psql failed (its message is in *error).
  std::optional<std::string> Sql(const std::string& sql, std::string* error = nullptr,
                                 const std::string& database = "dlock");
  // The same psql, started and left running (a session that holds something, or waits).
  std::unique_ptr<ChildProcess> SqlInBackground(const std::string& sql);

  void Kill();     // SIGKILL to it and every backend it forked: its clients' connections reset
  bool Restart();  // after Kill: the same port and data dir (crash recovery runs)
  void Stop();     // SIGSTOP to it and every backend it forked: it hangs, connections stay open
  void Cont();     // SIGCONT to the same
  // A standby becomes a primary (pg_ctl promote, waited for). True on success.
  bool Promote();
  // TLS on its TCP port from now on (ssl=on, a configuration reload): cert and key are PEM files,
  // copied into its dir. With client_ca, TCP connections must also show a client certificate
  // issued by that CA (pg_hba: hostssl ... clientcert=verify-ca; hostnossl ... reject). Its own
  // psql goes through the socket, unchanged. True once new connections get it.
  bool EnableTls(const std::string& cert, const std::string& key, const std::string& client_ca = "");
  // Debian's PgBouncer in front of it, in transaction pooling (pool_size server connections
  // shared by every client), as the server's user: its port, or -1 (after ADD_FAILURE). Stopped
  // by pid with the server.
  int StartPgBouncer(int pool_size = 4);

  // The end of its log, for a failure message.
  std::string LogTail() const;

 private:
  void Init(const PostgresServer* primary);
  bool Start();
  // argv run as the server's user (setpriv as root; as is otherwise).
  std::vector<std::string> AsServerUser(std::vector<std::string> argv) const;
  std::vector<std::string> PsqlArgs(const std::string& sql, const std::string& database = "dlock") const;
  void SignalAll(int sig);

  std::string bin_;  // PostgreSQL's bin dir
  std::string dir_;  // temp dir: data/, the socket, server.log
  int port_ = -1;
  bool as_root_ = false;
  uid_t uid_ = 0;
  gid_t gid_ = 0;
  std::unique_ptr<ChildProcess> server_;
  std::unique_ptr<ChildProcess> bouncer_;
};

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_POSTGRES_SERVER_H_
