// The dlock command, run as a user runs it (a process, its exit code, its output) against a
// real redis-server: exec's lock, token, exit codes, signals and loss handling; hold; inspect;
// bad input. Every backend's `dlock prepare`/exec/inspect is in conformance/cli_test.cc.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/redis_server.h"
#include "test_util.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kDlock = DLOCK_CLI;

int64_t MsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

bool WaitForFile(const std::string& path, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    if (std::filesystem::exists(path) && std::filesystem::file_size(path) > 0) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Whether pid is gone or a zombie (dead, not yet reaped by dlock).
bool Dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || line.size() < paren + 3 || line[paren + 2] == 'Z';
}

struct Outcome {
  int code;
  std::string output;  // stdout and stderr
};

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.running());
    dir_ = std::filesystem::temp_directory_path() /
           ("dlock-cli-" + std::to_string(getpid()) + "-" + std::to_string(++counter_));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<std::string> Env() const { return {"DLOCK_URL=" + redis_.url()}; }
  std::vector<std::string> Args(std::vector<std::string> args) const {
    args.insert(args.begin(), kDlock);
    return args;
  }
  Outcome Run(const std::vector<std::string>& args, std::chrono::milliseconds limit = 60s) const {
    ChildProcess p(Args(args), ChildOptions::Env(Env()));
    const int code = p.Wait(limit);
    return {code, p.output()};
  }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

  // `dlock exec OPTIONS... NAME -- sh -c ...`: a CMD that runs until signalled, with on_term as
  // its SIGTERM trap ("" = none). Returns once CMD runs, with its pid in *cmd.
  std::unique_ptr<ChildProcess> ExecLongCmd(std::vector<std::string> args, const std::string& on_term,
                                            pid_t* cmd) const {
    const std::string started = Path("started");
    const std::string trap = on_term.empty() ? "" : "trap '" + on_term + "' TERM; ";
    for (const char* word : {"--", "sh", "-c"}) args.push_back(word);
    args.push_back(trap + "echo $$ > " + started + "; while :; do sleep 0.05; done");
    auto dlock = std::make_unique<ChildProcess>(Args(args), ChildOptions::Env(Env()));
    EXPECT_TRUE(WaitForFile(started, 20s)) << dlock->output();
    *cmd = std::filesystem::exists(started) ? std::stoi(ReadFile(started)) : -1;
    return dlock;
  }
  bool Held(const std::string& name) const { return redis_.Cli({"EXISTS", "dlock:{" + name + "}"}) == "1"; }

  RedisServer redis_;
  std::filesystem::path dir_;
  static inline int counter_ = 0;
};

TEST_F(CliTest, ExecGivesCmdTheLocksNameTokenAndLease) {
  const std::string out = Path("env");
  Outcome r = Run({"exec", "--lease", "2s", "nightly", "--", "sh", "-c",
                   "echo \"$DLOCK_NAME $DLOCK_FENCING_TOKEN $DLOCK_LEASE_MS\" > " + out});
  ASSERT_EQ(r.code, 0) << r.output;
  std::istringstream words(ReadFile(out));
  std::string name;
  uint64_t token = 0;
  int64_t lease = 0;
  words >> name >> token >> lease;
  EXPECT_EQ(name, "nightly");
  EXPECT_GT(token, 0u);
  EXPECT_EQ(lease, 2000);
  EXPECT_FALSE(Held("nightly")) << "released when CMD exited";
}

TEST_F(CliTest, ConcurrentExecsOfAReadModifyWriteLoseNoUpdate) {
  const int loops = 4, rounds = kUnderSanitizer ? 15 : 50;
  const std::string count = Path("count"), tokens = Path("tokens");
  std::ofstream(count) << 0;
  // Read, pause, write: without the lock, 4 at a time lose updates nearly every round.
  const std::string snippet = "n=$(cat " + count + "); echo \"$DLOCK_FENCING_TOKEN\" >> " + tokens +
                              "; sleep 0.005; echo $((n + 1)) > " + count;
  const std::string loop = "for i in $(seq " + std::to_string(rounds) + "); do '" + kDlock +
                           "' exec counter -- sh -c '" + snippet + "' || exit $?; done";
  std::vector<std::unique_ptr<ChildProcess>> shells;
  for (int i = 0; i < loops; ++i) {
    shells.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", loop},
                                                    ChildOptions::Env(Env())));
  }
  for (auto& s : shells) EXPECT_EQ(s->Wait(300s), 0) << s->output();
  EXPECT_EQ(std::stoi(ReadFile(count)), loops * rounds) << "a lost update";
  std::istringstream lines(ReadFile(tokens));
  uint64_t previous = 0, token = 0;
  int seen = 0;
  while (lines >> token) {
    EXPECT_GT(token, previous) << "tokens must rise in the order the holders ran";
    previous = token;
    ++seen;
  }
  EXPECT_EQ(seen, loops * rounds);
}

TEST_F(CliTest, ExitStatusIsCmdsOwn) {
  EXPECT_EQ(Run({"exec", "job", "--", "true"}).code, 0);
  EXPECT_EQ(Run({"exec", "job", "--", "sh", "-c", "exit 3"}).code, 3);
  EXPECT_EQ(Run({"exec", "job", "--", "sh", "-c", "kill -KILL $$"}).code, 128 + SIGKILL);
  EXPECT_EQ(Run({"exec", "job", "--", "sh", "-c", "kill -TERM $$"}).code, 128 + SIGTERM);
  Outcome missing = Run({"exec", "job", "--", "no-such-command-here"});
  EXPECT_EQ(missing.code, 127) << missing.output;
  EXPECT_NE(missing.output.find("no-such-command-here: command not found"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(Held("job"));
}

TEST_F(CliTest, WaitZeroOnAHeldLockExitsNotAcquiredAtOnce) {
  Client holder(redis_.url());
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK) << dlock_last_error();
  const std::string ran = Path("ran");
  const auto start = Clock::now();
  Outcome once = Run({"exec", "--wait", "0", "busy", "--", "touch", ran});
  EXPECT_EQ(once.code, 75) << once.output;
  // An open and a one-try acquire: each at most connect_timeout_ms + timeout_ms (dlock.h).
  EXPECT_LT(MsSince(start), 2 * kCallBoundMs + kSlackMs) << "one try, not a wait";
  EXPECT_NE(once.output.find("busy"), std::string::npos) << once.output;
  const auto waited_from = Clock::now();
  Outcome bounded = Run({"exec", "--wait", "500ms", "busy", "--", "touch", ran});
  EXPECT_EQ(bounded.code, 75) << bounded.output;
  EXPECT_GE(MsSince(waited_from), 450) << "--wait 500ms waits";
  EXPECT_FALSE(std::filesystem::exists(ran)) << "CMD ran without the lock";
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
}

TEST_F(CliTest, ALossTheServerReportsStopsCmdWithinAHeartbeat) {
  const std::string got_term = Path("term");
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "--lease", "3s", "doomed"}, "echo TERM > " + got_term + "; exit 0", &cmd);
  ASSERT_GT(cmd, 0);
  const auto deleted_at = Clock::now();
  ASSERT_EQ(redis_.Cli({"DEL", "dlock:{doomed}"}), "1");
  const int code = dlock->Wait(20s);
  const int64_t took = MsSince(deleted_at);
  EXPECT_EQ(code, 70) << dlock->output();
  EXPECT_EQ(ReadFile(got_term), "TERM\n") << "CMD was not sent SIGTERM";
  // Heartbeats every second (lease/3 or less): the loss is seen within one or two. Generous
  // for sanitizers on busy cores; measured about 0.4 s.
  EXPECT_LT(took, 5000) << dlock->output();
  EXPECT_NE(dlock->output().find("lost"), std::string::npos) << dlock->output();
}

TEST_F(CliTest, FailingRenewalsStopCmdBeforeTheLeaseCanRunOut) {
  const std::string log = Path("log");
  // CMD ignores SIGTERM: only the SIGKILL at the local deadline ends it.
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "--lease", "2s", "--kill-grace", "500ms", "stalled"},
                           "echo TERM >> " + log, &cmd);
  ASSERT_GT(cmd, 0);
  std::this_thread::sleep_for(300ms);
  const auto stopped_at = Clock::now();
  kill(redis_.pid(), SIGSTOP);  // renewals go unanswered
  // The server's lease ends at most 2 s after the last renewal, which came before the stop.
  while (!Dead(cmd) && MsSince(stopped_at) < 10000) std::this_thread::sleep_for(5ms);
  const int64_t dead_after = MsSince(stopped_at);
  const int code = dlock->Wait(20s);
  kill(redis_.pid(), SIGCONT);
  EXPECT_TRUE(Dead(cmd));
  EXPECT_LT(dead_after, 2000 + 700) << "CMD outlived the lease on the server (slack 700 ms)";
  EXPECT_GT(dead_after, 500) << "CMD was stopped although renewals had only just failed";
  EXPECT_EQ(ReadFile(log), "TERM\n") << "SIGTERM first, kill-grace before the deadline";
  EXPECT_EQ(code, 70) << dlock->output();
  EXPECT_NE(dlock->output().find("renewals of lock 'stalled' are failing"), std::string::npos)
      << dlock->output();
}

TEST_F(CliTest, SigtermToDlockReachesCmdAndTheLockIsReleased) {
  const std::string got_term = Path("term");
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "--lease", "0", "deploy"}, "echo TERM > " + got_term + "; exit 0", &cmd);
  ASSERT_GT(cmd, 0);
  EXPECT_TRUE(Held("deploy"));
  dlock->Signal(SIGTERM);
  EXPECT_EQ(dlock->Wait(20s), 0) << dlock->output();
  EXPECT_EQ(ReadFile(got_term), "TERM\n");
  EXPECT_FALSE(Held("deploy")) << "a lock without a lease must be released by dlock itself";
}

TEST_F(CliTest, CmdDiesWithDlock) {
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "orphan"}, "", &cmd);
  ASSERT_GT(cmd, 0);
  dlock->Kill();
  const auto killed_at = Clock::now();
  while (!Dead(cmd) && MsSince(killed_at) < 20000) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(Dead(cmd)) << "CMD outlived dlock";
}

TEST_F(CliTest, BackendDownIsExit69NamingTheServerNeverItsPassword) {
  RedisServer gone;
  ASSERT_TRUE(gone.running());
  const int port = gone.port();
  gone.Stop();
  const std::string url = "redis://:sekrit-pw@127.0.0.1:" + std::to_string(port);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--url", url, "exec", "x", "--", "true"},
        std::vector<std::string>{"--url", url, "inspect", "x"},
        std::vector<std::string>{"--url", url, "hold", "x"},
        std::vector<std::string>{"--url", url, "-v", "prepare"}}) {
    Outcome r = Run(args);
    EXPECT_EQ(r.code, 69) << args[2] << ": " << r.output;
    EXPECT_NE(r.output.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("sekrit-pw"), std::string::npos) << r.output;
  }
}

TEST_F(CliTest, InspectShowsTheHolderWhileCmdRunsAndFreeAfter) {
  const std::string seen = Path("seen");
  Outcome r = Run({"exec", "--owner", "nightly report", "reports", "--", "sh", "-c",
                   "echo $DLOCK_FENCING_TOKEN > " + seen + ".token; '" + kDlock +
                       "' inspect reports > " + seen + ".text; '" + kDlock +
                       "' inspect --json reports other > " + seen + ".json"});
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string token = ReadFile(seen + ".token").substr(0, ReadFile(seen + ".token").find('\n'));
  const std::string text = ReadFile(seen + ".text");
  EXPECT_EQ(text.rfind("reports: held by 'nightly report', fencing token " + token + ", ", 0), 0u)
      << text;
  std::istringstream lines(ReadFile(seen + ".json"));
  std::string line;
  ASSERT_TRUE(std::getline(lines, line));
  nlohmann::json held = nlohmann::json::parse(line);
  EXPECT_EQ(held["name"], "reports");
  EXPECT_EQ(held["held"], true);
  EXPECT_EQ(held["kind"], "exclusive");
  ASSERT_EQ(held["holders"].size(), 1u) << line;
  EXPECT_EQ(held["holders"][0]["owner"], "nightly report");
  EXPECT_EQ(held["holders"][0]["fencing_token"].get<uint64_t>(), std::stoull(token));
  EXPECT_GT(held["holders"][0]["remaining_ms"].get<int64_t>(), 5000);
  ASSERT_TRUE(std::getline(lines, line));
  EXPECT_EQ(nlohmann::json::parse(line)["held"], false) << line;

  Outcome after = Run({"inspect", "reports"});
  EXPECT_EQ(after.code, 0);
  EXPECT_EQ(after.output, "reports: free\n");
}

TEST_F(CliTest, HoldPrintsTheTokenAndReleasesOnSigint) {
  ChildProcess hold(Args({"hold", "--owner", "ops", "maintenance"}), ChildOptions::Env(Env()));
  const std::string line = hold.AwaitLine("", 20s);
  ASSERT_FALSE(line.empty()) << hold.output();
  const uint64_t token = std::stoull(line);
  Outcome seen = Run({"inspect", "--json", "maintenance"});
  nlohmann::json info = nlohmann::json::parse(seen.output);
  EXPECT_EQ(info["holders"][0]["fencing_token"].get<uint64_t>(), token);
  EXPECT_EQ(info["holders"][0]["owner"], "ops");
  hold.Signal(SIGINT);
  EXPECT_EQ(hold.Wait(20s), 0) << hold.output();
  EXPECT_FALSE(Held("maintenance"));
}

TEST_F(CliTest, SharedHoldsAndPermitsFromTheCommandLine) {
  ChildProcess a(Args({"hold", "--permits", "2", "pool"}), ChildOptions::Env(Env()));
  ChildProcess b(Args({"hold", "--permits", "2", "pool"}), ChildOptions::Env(Env()));
  ASSERT_FALSE(a.AwaitLine("", 20s).empty()) << a.output();
  ASSERT_FALSE(b.AwaitLine("", 20s).empty()) << b.output();
  EXPECT_EQ(Run({"exec", "--wait", "0", "--permits", "2", "pool", "--", "true"}).code, 75);
  Outcome shown = Run({"inspect", "pool"});
  EXPECT_EQ(shown.output.rfind("pool: semaphore, 2 of 2 permits held\n", 0), 0u) << shown.output;
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(20s), 0);
  EXPECT_EQ(Run({"exec", "--wait", "0", "--permits", "2", "pool", "--", "true"}).code, 0);

  ChildProcess r1(Args({"hold", "--shared", "table"}), ChildOptions::Env(Env()));
  ASSERT_FALSE(r1.AwaitLine("", 20s).empty()) << r1.output();
  EXPECT_EQ(Run({"exec", "--wait", "0", "--shared", "table", "--", "true"}).code, 0);
  EXPECT_EQ(Run({"exec", "--wait", "0", "table", "--", "true"}).code, 75) << "a writer among readers";
}

TEST_F(CliTest, BadInputIsOneLineAndTheUsageCode) {
  struct Case {
    std::vector<std::string> args;
    std::string says;
  };
  const std::string long_name(DLOCK_MAX_NAME_BYTES + 1, 'n');
  const std::vector<Case> cases = {
      {{}, "usage: dlock"},
      {{"frobnicate"}, "unknown command 'frobnicate'"},
      {{"exec", "job"}, "CMD must follow '--'"},
      {{"exec", "--", "true"}, "no lock NAME"},
      {{"exec", "job", "--"}, "no CMD after '--'"},
      {{"exec", "--lease", "10x", "job", "--", "true"}, "--lease '10x' is not a duration"},
      {{"exec", "--wait", "-2", "job", "--", "true"}, "--wait '-2' is not a duration"},
      {{"exec", "--kill-grace", "20s", "job", "--", "true"}, "must be shorter than --lease"},
      {{"exec", "--on-lost", "maybe", "job", "--", "true"}, "not one of term, kill, ignore"},
      {{"exec", "--permits", "0", "job", "--", "true"}, "--permits '0'"},
      {{"exec", "--shared", "--permits", "2", "job", "--", "true"}, "cannot be combined"},
      {{"exec", "--frob", "job", "--", "true"}, "unknown option '--frob'"},
      {{"exec", "", "--", "true"}, "name"},
      {{"exec", long_name, "--", "true"}, "1024"},
      {{"--url", "bogus://x", "inspect", "job"}, "bogus"},
      {{"inspect"}, "no lock NAME"},
      {{"inspect", "--lease", "1s", "job"}, "unknown option '--lease'"},
      {{"hold"}, "no lock NAME"},
  };
  for (const Case& c : cases) {
    Outcome r = Run(c.args);
    std::string shown;
    for (const std::string& a : c.args) shown += (a.size() > 40 ? a.substr(0, 40) + "..." : a) + " ";
    EXPECT_EQ(r.code, 64) << shown << "-> " << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << shown << "-> " << r.output;
    if (!c.args.empty()) {
      EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << shown << "-> " << r.output;
    }
  }
  Outcome help = Run({"exec", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_EQ(help.output.rfind("usage: dlock exec", 0), 0u) << help.output;
  Outcome version = Run({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.output, std::string("dlock ") + dlock_version() + "\n");
}

}  // namespace
}  // namespace dlock_test
