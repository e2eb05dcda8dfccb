#include "support/postgres_server.h"

#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

namespace dlock_test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kStartAttempts = 3;

// PostgreSQL's bin dir: DLOCK_PG_BIN, else the newest /usr/lib/postgresql/<major>/bin.
std::string FindPgBin() {
  if (const char* bin = std::getenv("DLOCK_PG_BIN"); bin != nullptr && *bin != '\0') return bin;
  int newest = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    const std::string major = entry.path().filename().string();
    if (major.empty() || major.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!fs::exists(entry.path() / "bin" / "postgres")) continue;
    newest = std::max(newest, std::atoi(major.c_str()));
  }
  return newest < 0 ? "" : "/usr/lib/postgresql/" + std::to_string(newest) + "/bin";
}

}  // namespace

PostgresServer::PostgresServer() { Init(nullptr); }

PostgresServer::PostgresServer(const PostgresServer& primary, StandbyOf) { Init(&primary); }

void PostgresServer::Init(const PostgresServer* primary) {
  bin_ = FindPgBin();
  if (bin_.empty()) {
    ADD_FAILURE() << "PostgresServer: no PostgreSQL in /usr/lib/postgresql (scripts/setup installs "
                     "postgresql; DLOCK_PG_BIN names another bin dir)";
    return;
  }
  std::string why;
  dir_ = MakeTempDir("postgres", &why);
  if (dir_.empty()) {
    ADD_FAILURE() << "PostgresServer: " << why;
    return;
  }
  as_root_ = geteuid() == 0;
  if (as_root_) {
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr) {
      ADD_FAILURE() << "PostgresServer: running as root, and there is no `postgres` user to run the "
                       "server as (Debian's postgresql package creates it)";
      return;
    }
    uid_ = pw->pw_uid;
    gid_ = pw->pw_gid;
    if (chown(dir_.c_str(), uid_, gid_) != 0) {
      ADD_FAILURE() << "PostgresServer: chown " << dir_ << " to the postgres user failed";
      return;
    }
  }
  if (primary != nullptr) {
    // A copy of the primary's data, streaming from it (-R: standby.signal, primary_conninfo).
    ChildProcess copy(AsServerUser({bin_ + "/pg_basebackup", "-h", "127.0.0.1", "-p", std::to_string(primary->port()),
                                    "-U", "dlock", "-D", dir_ + "/data", "-R", "-X", "stream", "--no-sync",
                                    "--checkpoint=fast"}));
    if (copy.Wait(120s) != 0) {
      ADD_FAILURE() << "PostgresServer: pg_basebackup failed: " << copy.error() << copy.output();
      return;
    }
  } else {
    ChildProcess initdb(AsServerUser({bin_ + "/initdb", "-D", dir_ + "/data", "-U", "dlock", "--auth=trust",
                                      "--encoding=UTF8", "--locale=C", "--no-sync"}));
    if (initdb.Wait(120s) != 0) {
      ADD_FAILURE() << "PostgresServer: initdb failed: " << initdb.error() << initdb.output();
      return;
    }
  }
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    port_ = FreeTcpPort();
    if (port_ > 0 && Start()) return;
    const std::string log = LogTail();
    Kill();
    if (log.find("could not bind") == std::string::npos && log.find("already in use") == std::string::npos) break;
  }
  ADD_FAILURE() << "PostgresServer: could not start postgres on port " << port_ << "\n--- server log ---\n"
                << LogTail();
}

bool PostgresServer::Promote() {
  ChildProcess promote(AsServerUser({bin_ + "/pg_ctl", "promote", "-D", dir_ + "/data", "-w", "-t", "60"}));
  return promote.Wait(70s) == 0;
}

bool PostgresServer::EnableTls(const std::string& cert, const std::string& key, const std::string& client_ca) {
  // The server reads them as its user, and refuses a key others may read.
  auto place = [&](const std::string& from, const std::string& name) {
    const std::string to = dir_ + "/" + name;
    std::error_code ec;
    fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec || chmod(to.c_str(), 0600) != 0 || (as_root_ && chown(to.c_str(), uid_, gid_) != 0)) {
      ADD_FAILURE() << "PostgresServer: cannot place " << from << " as " << to << ": " << ec.message();
      return std::string();
    }
    return to;
  };
  std::vector<std::string> settings = {"ssl_cert_file = '" + place(cert, "tls_server.crt") + "'",
                                       "ssl_key_file = '" + place(key, "tls_server.key") + "'"};
  if (!client_ca.empty()) {
    settings.push_back("ssl_ca_file = '" + place(client_ca, "tls_client_ca.crt") + "'");
    const std::string hba = dir_ + "/data/pg_hba.conf";
    std::ifstream in(hba);
    const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(hba, std::ios::trunc);
    out << "hostssl all all 127.0.0.1/32 trust clientcert=verify-ca\nhostnossl all all 127.0.0.1/32 reject\n" << rest;
  }
  settings.push_back("ssl = on");
  std::string error;
  for (const std::string& setting : settings) {
    if (!Sql("ALTER SYSTEM SET " + setting, &error)) {
      ADD_FAILURE() << "PostgresServer: ALTER SYSTEM SET " << setting << ": " << error;
      return false;
    }
  }
  if (!Sql("SELECT pg_reload_conf()", &error)) {
    ADD_FAILURE() << "PostgresServer: reload: " << error;
    return false;
  }
  // The postmaster rereads its files when it gets to the signal: until then, new sessions say off.
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < until) {
    if (Sql("SHOW ssl").value_or("") == "on\n") return true;
    std::this_thread::sleep_for(50ms);
  }
  ADD_FAILURE() << "PostgresServer: ssl still off after a reload\n" << LogTail();
  return false;
}

int PostgresServer::StartPgBouncer(int pool_size) {
  // A free port may be taken by someone else before pgbouncer binds it: then it exits, and a
  // new port is tried.
  for (int tries = 0; tries < 3; ++tries) {
    const int port = FreeTcpPort();
    const std::string ini = dir_ + "/pgbouncer.ini";
    {
      std::ofstream out(ini);
      out << "[databases]\ndlock = host=127.0.0.1 port=" << port_ << " dbname=dlock user=dlock\n"
          << "[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = " << port << "\nunix_socket_dir =\n"
          << "auth_type = any\npool_mode = transaction\ndefault_pool_size = " << pool_size
          << "\nmax_client_conn = 500\nlogfile = " << dir_ << "/pgbouncer.log\n";
    }
    if (as_root_ && chown(ini.c_str(), uid_, gid_) != 0) return -1;
    bouncer_ = std::make_unique<ChildProcess>(AsServerUser({"/usr/sbin/pgbouncer", ini}),
                                              ChildOptions::LogTo(dir_ + "/pgbouncer.out"));
    const auto until = std::chrono::steady_clock::now() + 20s;
    bool exited = false;
    while (!exited && std::chrono::steady_clock::now() < until) {
      ChildProcess psql(AsServerUser({bin_ + "/psql", "-X", "-q", "-A", "-t", "-h", "127.0.0.1", "-p",
                                      std::to_string(port), "-U", "dlock", "-d", "dlock", "-c", "SELECT 1"}));
      if (psql.Wait(10s) == 0) return port;
      exited = bouncer_->Wait(0ms) != -1;
      if (!exited) std::this_thread::sleep_for(50ms);
    }
    if (!exited) break;  // running, and not answering
  }
  ADD_FAILURE() << "PostgresServer: pgbouncer did not start\n" << ReadTail(dir_ + "/pgbouncer.log", 2000)
                << ReadTail(dir_ + "/pgbouncer.out", 2000);
  bouncer_.reset();
  return -1;
}

PostgresServer::~PostgresServer() {
  bouncer_.reset();
  if (::testing::Test::HasFailure() && running()) {
    fprintf(stderr, "--- postgres on port %d (pid %d), end of its log ---\n%s\n", port_, static_cast<int>(pid()),
            LogTail().c_str());
  }
  if (server_ != nullptr) {
    Cont();
    server_->Stop(SIGQUIT, 5000ms);  // immediate shutdown; SIGKILL after the grace
    server_.reset();
  }
  if (!dir_.empty()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

std::vector<std::string> PostgresServer::AsServerUser(std::vector<std::string> argv) const {
  if (!as_root_) return argv;
  std::vector<std::string> wrapped{"/usr/bin/setpriv", "--reuid=" + std::to_string(uid_),
                                   "--regid=" + std::to_string(gid_), "--clear-groups", "--"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  return wrapped;
}

bool PostgresServer::Start() {
  server_ = std::make_unique<ChildProcess>(
      AsServerUser({bin_ + "/postgres", "-D", dir_ + "/data", "-p", std::to_string(port_), "-c",
                    "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + dir_, "-c", "fsync=off",
                    "-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "log_min_messages=warning"}),
      ChildOptions::LogTo(dir_ + "/server.log"));
  if (!server_->started()) return false;
  // Ready once a query through its socket answers.
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < until) {
    if (Sql("SELECT 1", nullptr, "postgres") == "1\n") {
      // The clients' database, made once (a restart finds it).
      if (Sql("SELECT datname FROM pg_database WHERE datname = 'dlock'", nullptr, "postgres") == "dlock\n") return true;
      return Sql("CREATE DATABASE dlock", nullptr, "postgres").has_value();
    }
    if (server_->Wait(0ms) != -1) return false;  // it exited (a port taken, a bad setting)
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

pid_t PostgresServer::pid() const { return server_ == nullptr ? -1 : server_->pid(); }

std::string PostgresServer::url() const { return "postgres://dlock@127.0.0.1:" + std::to_string(port_) + "/dlock"; }

std::vector<std::string> PostgresServer::PsqlArgs(const std::string& sql, const std::string& database) const {
  return AsServerUser({bin_ + "/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", dir_, "-p",
                       std::to_string(port_), "-U", "dlock", "-d", database, "-c", sql});
}

std::unique_ptr<ChildProcess> PostgresServer::SqlInBackground(const std::string& sql) {
  return std::make_unique<ChildProcess>(PsqlArgs(sql));
}

std::optional<std::string> PostgresServer::Sql(const std::string& sql, std::string* error, const std::string& database) {
  ChildProcess psql(PsqlArgs(sql, database));
  const int code = psql.Wait(30s);
  if (code != 0) {
    if (error != nullptr) *error = psql.error() + psql.output();
    return std::nullopt;
  }
  return psql.output();
}

void PostgresServer::Kill() {
  if (server_ == nullptr) return;
  // Every process of it at once, as a crash of its machine: a backend left alone answers its
  // client until it notices the postmaster gone (a statement sent just after the kill could
  // still succeed).
  SignalAll(SIGKILL);
  server_->Kill();
  server_.reset();
}

bool PostgresServer::Restart() {
  Kill();
  // The killed processes may hold its shared memory a moment longer (until they are reaped);
  // until then a new postmaster refuses to start.
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (!Start()) {
    const std::string log = LogTail();
    Kill();
    if (std::chrono::steady_clock::now() >= until ||
        (log.find("shared memory block") == std::string::npos && log.find("lock file") == std::string::npos)) {
      return false;
    }
    std::this_thread::sleep_for(200ms);
  }
  return true;
}

void PostgresServer::SignalAll(int sig) {
  if (server_ == nullptr || server_->pid() <= 0) return;
  // The postmaster and every process it forked: each client's backend is a child of its own.
  std::vector<pid_t> pids{server_->pid()};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == server_->pid()) pids.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  for (pid_t pid : pids) kill(pid, sig);
}

void PostgresServer::Stop() { SignalAll(SIGSTOP); }

void PostgresServer::Cont() { SignalAll(SIGCONT); }

std::string PostgresServer::LogTail() const { return dir_.empty() ? "" : ReadTail(dir_ + "/server.log", 4000); }

}  // namespace dlock_test
