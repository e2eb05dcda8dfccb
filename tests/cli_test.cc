// The dlock command, run as a user runs it (a process, its exit code, its output) against a
// real redis-server: exec's lock, token, exit codes, signals and loss handling; hold; inspect;
// bad input. Every backend's `dlock prepare`/exec/inspect is in conformance/cli_test.cc.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.h"
#include "support/pty.h"
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
  // The message names the cause (dlock_lock_lost_cause): the renewal was refused, and nobody held it.
  EXPECT_NE(dlock->output().find("lock 'doomed' was lost while CMD ran; stopping CMD: deleted: "), std::string::npos)
      << dlock->output();
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

// --max-hold is a job timeout across machines: CMD is signalled once the lock was held that
// long (SIGTERM, then SIGKILL after --kill-grace for a CMD that ignores it), the lock is
// released, and dlock exits 70 saying why.
TEST_F(CliTest, MaxHoldStopsCmdAsAJobTimeout) {
  const std::string log = Path("log"), status = Path("status");
  pid_t cmd;
  const auto start = Clock::now();
  auto dlock = ExecLongCmd({"exec", "--lease", "5s", "--max-hold", "1s", "--kill-grace", "400ms",
                            "--status-file", status, "timeboxed"},
                           "echo TERM >> " + log, &cmd);  // ignores SIGTERM
  ASSERT_GT(cmd, 0);
  const int code = dlock->Wait(20s);
  const int64_t took = MsSince(start);
  EXPECT_EQ(code, 70) << dlock->output();
  EXPECT_TRUE(Dead(cmd));
  EXPECT_EQ(ReadFile(log), "TERM\n") << "SIGTERM first, at --max-hold";
  EXPECT_GE(took, 1000 + 400) << "CMD was killed before --max-hold + --kill-grace";
  EXPECT_LT(took, 1000 + 400 + 3000) << "CMD outlived --max-hold + --kill-grace (slack 3 s)";
  EXPECT_NE(dlock->output().find("lock 'timeboxed' reached --max-hold (1000 ms) while CMD ran; stopping CMD"),
            std::string::npos)
      << dlock->output();
  EXPECT_EQ(ReadFile(status), "max-hold\n");
  EXPECT_FALSE(Held("timeboxed")) << "released once CMD was gone, not left to its lease";
  // A CMD that finishes in time is not touched.
  Outcome quick = Run({"exec", "--lease", "5s", "--max-hold", "5s", "timeboxed", "--", "true"});
  EXPECT_EQ(quick.code, 0) << quick.output;
  // Bad values name the option.
  Outcome zero = Run({"exec", "--max-hold", "0", "timeboxed", "--", "true"});
  EXPECT_EQ(zero.code, 64) << zero.output;
  EXPECT_NE(zero.output.find("--max-hold"), std::string::npos) << zero.output;
  Outcome no_lease = Run({"exec", "--lease", "0", "--max-hold", "1s", "timeboxed", "--", "true"});
  EXPECT_EQ(no_lease.code, 64) << no_lease.output;
  EXPECT_NE(no_lease.output.find("--max-hold needs a lease"), std::string::npos) << no_lease.output;
}

// `dlock break`: shows the holder and asks first (stdin answers, a terminal or not); the broken
// `dlock exec` hears of it at its next renewal with the reason, stops CMD and exits 70; the name
// stays closed, with no holder, until the broken lease would have ended.
TEST_F(CliTest, BreakAsksFirstThenStopsTheBrokenExecWithTheReason) {
  const std::string status = Path("status");
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "--lease", "3s", "--owner", "nightly", "--status-file", status, "stuck"},
                           "exit 0", &cmd);
  ASSERT_GT(cmd, 0);
  auto shell = [&](const std::string& line) {
    ChildProcess p({"/bin/sh", "-c", line}, ChildOptions::Env(Env()));
    const int code = p.Wait(60s);
    return Outcome{code, p.output()};
  };
  Outcome declined = shell("'" + kDlock + "' break stuck < /dev/null");
  EXPECT_EQ(declined.code, 1) << declined.output;
  EXPECT_NE(declined.output.find("stuck: held by 'nightly', fencing token "), std::string::npos) << declined.output;
  EXPECT_NE(declined.output.find("not confirmed: nothing was broken"), std::string::npos) << declined.output;
  EXPECT_TRUE(Held("stuck")) << "broken without a yes";

  const auto broke_at = Clock::now();
  Outcome broke = shell("echo y | '" + kDlock + "' break --reason 'ticket 4411' stuck");
  EXPECT_EQ(broke.code, 0) << broke.output;
  EXPECT_NE(broke.output.find("broke stuck: 'nightly', fencing token "), std::string::npos) << broke.output;
  EXPECT_NE(broke.output.find("stuck: closed for "), std::string::npos) << broke.output;

  EXPECT_EQ(dlock->Wait(20s), 70) << dlock->output();
  EXPECT_LT(MsSince(broke_at), 1000 + 5000) << "heard later than a heartbeat period (1 s) + 5 s";
  EXPECT_NE(dlock->output().find("broken: an operator broke the lock: ticket 4411"), std::string::npos)
      << dlock->output();
  EXPECT_EQ(ReadFile(status), "lost\n");
  EXPECT_TRUE(Dead(cmd));

  // Closed with no holder until the broken lease would have ended: inspect says so, and a
  // one-try exec is refused.
  if (MsSince(broke_at) < 2000) {  // else a busy machine slept through the closed time
    Outcome closed = Run({"inspect", "stuck"});
    EXPECT_NE(closed.output.find("stuck: closed with no holder (broken), "), std::string::npos) << closed.output;
  }
  // Another break keeps the closed time (its broken holder may not know yet); --now clears it,
  // and a free name then breaks to nothing.
  Outcome again = Run({"break", "--yes", "--json", "stuck"});
  EXPECT_EQ(again.code, 0) << again.output;
  if (MsSince(broke_at) < 2000) {
    EXPECT_EQ(again.output.rfind("{\"name\":\"stuck\",\"broken\":[],\"closed_ms\":", 0), 0u) << again.output;
    EXPECT_EQ(again.output.find("\"closed_ms\":0}"), std::string::npos) << again.output;
  }
  Outcome cleared = Run({"break", "--yes", "--now", "--json", "stuck"});
  EXPECT_EQ(cleared.code, 0) << cleared.output;
  EXPECT_EQ(cleared.output, "{\"name\":\"stuck\",\"broken\":[],\"closed_ms\":0}\n");
  EXPECT_EQ(Run({"exec", "--wait", "0", "stuck", "--", "true"}).code, 0);
  Outcome nothing = shell("'" + kDlock + "' break stuck < /dev/null");
  EXPECT_EQ(nothing.code, 0) << nothing.output;
  EXPECT_NE(nothing.output.find("nothing to break"), std::string::npos) << nothing.output;

  // Bad input names what was wrong.
  EXPECT_EQ(Run({"break"}).code, 64);
  EXPECT_EQ(Run({"break", "a", "b"}).code, 64);
  Outcome long_reason = Run({"break", "--yes", "--reason", std::string(1025, 'r'), "stuck"});
  EXPECT_EQ(long_reason.code, 64) << long_reason.output;
  EXPECT_NE(long_reason.output.find("--reason is 1025 bytes"), std::string::npos) << long_reason.output;
}

// --min-hold: four shells trying a job every 50 ms for 10 s, each run quick, run it about once
// per 2 s between them: at most 6 runs (0, 2, 4, 6, 8 and 10 s), at least 4 on a busy machine.
TEST_F(CliTest, MinHoldRunsAJobOncePerPeriodAcrossShells) {
  const std::string runs = Path("runs");
  const std::string loop = "end=$(( $(date +%s%3N) + 10000 )); while [ $(date +%s%3N) -lt $end ]; do '" + kDlock +
                           "' exec --wait 0 --min-hold 2s --lease 5s periodic -- sh -c 'echo run >> " + runs +
                           "' 2>/dev/null; sleep 0.05; done";
  std::vector<std::unique_ptr<ChildProcess>> shells;
  for (int i = 0; i < 4; ++i) {
    shells.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{"/bin/sh", "-c", loop},
                                                    ChildOptions::Env(Env())));
  }
  for (auto& shell : shells) EXPECT_EQ(shell->Wait(60s), 0) << shell->output();
  std::istringstream lines(ReadFile(runs));
  int count = 0;
  for (std::string line; std::getline(lines, line);) count += line == "run";
  EXPECT_LE(count, 6) << "ran more often than once per --min-hold";
  EXPECT_GE(count, 4) << "ran less often than once per --min-hold (and a busy machine's slack)";
}

// --lock-delay: a holder SIGKILLed keeps the name closed for its lease + the delay (counted from
// its last renewal, at most a heartbeat, a third of the lease, before the kill); a clean end
// hands the name over at once.
TEST_F(CliTest, LockDelayKeepsAKilledHoldersNameClosed) {
  EXPECT_EQ(Run({"exec", "--lease", "1s", "--lock-delay", "1s", "delayed", "--", "true"}).code, 0);
  EXPECT_EQ(Run({"exec", "--wait", "0", "delayed", "--", "true"}).code, 0) << "a release has no delay";

  ChildProcess holder(Args({"hold", "--lease", "1s", "--lock-delay", "1s", "delayed"}), ChildOptions::Env(Env()));
  ASSERT_NE(holder.AwaitLine("", 20s), "") << holder.output();
  holder.Kill();
  const auto killed_at = Clock::now();
  int64_t took = -1;
  while (MsSince(killed_at) < 20000) {
    if (Run({"exec", "--wait", "0", "delayed", "--", "true"}).code == 0) {
      took = MsSince(killed_at);
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GE(took, 1000 + 1000 - 1000 / 3 - 100) << "taken before the lease + --lock-delay";
  EXPECT_LT(took, 1000 + 1000 + 5000) << "still closed long after the lease + --lock-delay";
  Outcome capped = Run({"exec", "--lock-delay", "61s", "delayed", "--", "true"});
  EXPECT_EQ(capped.code, 64) << capped.output;
  EXPECT_NE(capped.output.find("--lock-delay 61s is above its cap of 60s"), std::string::npos) << capped.output;
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
                   "echo $DLOCK_FENCING_TOKEN > " + seen + ".token; '" + kDlock + "' --url " +
                       redis_.url() + " inspect reports > " + seen + ".text; '" + kDlock +
                       "' --url " + redis_.url() + " inspect --json reports other > " + seen +
                       ".json"});
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

TEST_F(CliTest, TakeSeveralPermitsFromTheCommandLine) {
  // One exec takes both permits of 2 while its CMD waits for `go`, which the test creates only
  // once the other calls returned: no timing decides what they see.
  const std::string started = Path("started"), go = Path("go");
  ChildProcess both(Args({"exec", "--permits", "2", "--take", "2", "pool", "--", "sh", "-c",
                          "echo $$ > " + started + "; while [ ! -e " + go + " ]; do sleep 0.05; done"}),
                    ChildOptions::Env(Env()));
  ASSERT_TRUE(WaitForFile(started, 20s)) << both.output();
  Outcome one = Run({"exec", "--wait", "0", "--permits", "2", "--take", "1", "pool", "--", "true"});
  EXPECT_EQ(one.code, 75) << one.output;  // none left for a take of 1
  EXPECT_EQ(Run({"exec", "--wait", "0", "--permits", "2", "pool", "--", "true"}).code, 75);
  nlohmann::json info = nlohmann::json::parse(Run({"inspect", "--json", "pool"}).output);
  EXPECT_EQ(info["permits"], 2);
  EXPECT_EQ(info["holders"].size(), 1u) << info.dump();  // one hold for the 2
  EXPECT_EQ(info["holders"][0]["take"], 2) << info.dump();
  Outcome shown = Run({"inspect", "pool"});
  EXPECT_EQ(shown.output.rfind("pool: semaphore, 2 of 2 permits held\n", 0), 0u) << shown.output;
  EXPECT_NE(shown.output.find("2 permits, "), std::string::npos) << shown.output;
  std::ofstream(go).close();
  EXPECT_EQ(both.Wait(20s), 0) << both.output();
  EXPECT_FALSE(Held("pool"));
  // Its release freed both: a take of 2 gets them at once.
  EXPECT_EQ(Run({"exec", "--wait", "0", "--permits", "2", "--take", "2", "pool", "--", "true"}).code, 0);
  // --take 1 is the default said aloud.
  EXPECT_EQ(Run({"exec", "--wait", "0", "--permits", "2", "--take", "1", "pool", "--", "true"}).code, 0);
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
      {{"exec", "--permits", "2", "--take", "0", "job", "--", "true"}, "--take '0' is not a number"},
      {{"exec", "--permits", "2", "--take", "two", "job", "--", "true"}, "--take 'two' is not a number"},
      {{"exec", "--permits", "2", "--take", "4294967296", "job", "--", "true"}, "--take '4294967296'"},
      {{"exec", "--take", "2", "job", "--", "true"}, "--take needs --permits"},
      {{"hold", "--take", "1", "job"}, "--take needs --permits"},
      {{"exec", "--permits", "2", "--take", "3", "job", "--", "true"}, "--take 3 is more than --permits 2"},
      {{"elect", "--take", "2", "job", "--", "true"}, "--take"},
      {{"exec", "--frob", "job", "--", "true"}, "unknown option '--frob'"},
      {{"exec", "", "--", "true"}, "name"},
      {{"exec", long_name, "--", "true"}, "1024"},
      {{"--url", "bogus://x", "inspect", "job"}, "bogus"},
      {{"inspect"}, "no lock NAME"},
      {{"inspect", "--lease", "1s", "job"}, "unknown option '--lease'"},
      {{"hold"}, "no lock NAME"},
      {{"exec", "--stopped-grace", "soon", "job", "--", "true"}, "--stopped-grace 'soon' is not a duration"},
      {{"exec", "--status-file", "", "job", "--", "true"}, "--status-file needs a path"},
      {{"hold", "--status-file", "x", "job"}, "unknown option '--status-file'"},
      {{"inspect", "--stopped-grace", "1s", "job"}, "unknown option '--stopped-grace'"},
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


// ----- issue 30: what dlock exec gives CMD, and a CMD or dlock that stops -----------------------

// The descriptors a process has open, from /proc/PID/fd.
std::vector<int> OpenDescriptors(pid_t pid) {
  std::vector<int> fds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    fds.push_back(std::stoi(e.path().filename().string()));
  }
  std::sort(fds.begin(), fds.end());
  return fds;
}

std::string Comm(pid_t pid) {
  std::string comm = ReadFile("/proc/" + std::to_string(pid) + "/comm");
  return comm.substr(0, comm.find('\n'));
}

// Waits up to limit for what() to hold; true when it did.
template <typename F>
bool WaitUntil(F what, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  for (;;) {
    if (what()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(5ms);
  }
}

std::string Joined(const std::vector<int>& v) {
  std::string s;
  for (int x : v) s += std::to_string(x) + " ";
  return s;
}

TEST_F(CliTest, TheUrlIsNeitherInDlocksCommandLineNorInCmdsEnvironment) {
  RedisServer locked({"--requirepass", "Sekr1tPassw0rd"});
  ASSERT_TRUE(locked.running());
  const std::string url = "redis://:Sekr1tPassw0rd@127.0.0.1:" + std::to_string(locked.port());
  const std::string started = Path("started"), env = Path("env");
  // The test's environment has DLOCK_URL (Env()), and DLOCK_URL_FILE here: CMD gets neither.
  ChildProcess dlock(Args({"--url", url, "exec", "--lease", "0", "secret", "--", "sh", "-c",
                           "env > " + env + "; echo $$ > " + started + "; while :; do sleep 0.05; done"}),
                     ChildOptions::Env({"DLOCK_URL=" + redis_.url(), "DLOCK_URL_FILE=/nonexistent"}));
  ASSERT_TRUE(WaitForFile(started, 20s)) << dlock.output();
  const std::string cmdline = ReadFile("/proc/" + std::to_string(dlock.pid()) + "/cmdline");
  EXPECT_NE(cmdline.find("exec"), std::string::npos) << "read the wrong process";
  EXPECT_EQ(cmdline.find("Sekr1tPassw0rd"), std::string::npos) << "--url readable in /proc/PID/cmdline";
  const std::string seen = ReadFile(env);
  EXPECT_NE(seen.find("DLOCK_NAME=secret"), std::string::npos) << seen;
  EXPECT_EQ(seen.find("DLOCK_URL"), std::string::npos) << "CMD got dlock's URL: " << seen;
  EXPECT_EQ(locked.Cli({"EXISTS", "dlock:{secret}"}), "1");
  dlock.Signal(SIGTERM);
  EXPECT_EQ(dlock.Wait(20s), 128 + SIGTERM) << dlock.output();
  EXPECT_EQ(dlock.output().find("Sekr1tPassw0rd"), std::string::npos) << dlock.output();
}

TEST_F(CliTest, UrlFileIsReadAndItsErrorsNeverShowItsContent) {
  const std::string file = Path("url"), ran = Path("ran");
  std::ofstream(file) << redis_.url() << "\n";
  // --url-file, and DLOCK_URL_FILE when DLOCK_URL is not set.
  ChildProcess by_option(Args({"--url-file", file, "exec", "from-file", "--", "touch", ran}),
                         ChildOptions::Env({"DLOCK_URL="}));
  EXPECT_EQ(by_option.Wait(60s), 0) << by_option.output();
  EXPECT_TRUE(std::filesystem::exists(ran));
  ChildProcess by_env(Args({"exec", "--wait", "0", "from-file", "--", "true"}),
                      ChildOptions::Env({"DLOCK_URL=", "DLOCK_URL_FILE=" + file}));
  EXPECT_EQ(by_env.Wait(60s), 0) << by_env.output();
  ChildProcess inspect(Args({"inspect", "--url-file", file, "from-file"}), ChildOptions::Env({"DLOCK_URL="}));
  EXPECT_EQ(inspect.Wait(60s), 0) << inspect.output();
  EXPECT_EQ(inspect.output(), "from-file: free\n");

  const std::string secret = "redis://:Sekr1tPassw0rd@127.0.0.1:1";
  const std::string two_lines = Path("two-lines"), empty = Path("empty");
  std::ofstream(two_lines) << secret << "\nsecond line\n";
  std::ofstream(empty) << "\n";
  struct Case {
    std::vector<std::string> args;
    std::vector<std::string> env;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"--url-file", Path("missing"), "inspect", "x"}, {}, "cannot read --url-file"},
      {{"--url-file", dir_.string(), "inspect", "x"}, {}, "cannot read --url-file"},
      {{"--url-file", empty, "inspect", "x"}, {}, "is empty"},
      {{"--url-file", two_lines, "exec", "x", "--", "true"}, {}, "more than one line"},
      {{"--url", redis_.url(), "--url-file", file, "inspect", "x"}, {}, "cannot be combined"},
      {{"inspect", "x"}, {"DLOCK_URL_FILE=" + two_lines}, "DLOCK_URL_FILE"},
      {{"inspect", "x"}, {"DLOCK_URL=" + secret, "DLOCK_URL_FILE=" + file}, "both set"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> env = c.env;
    if (env.empty() || env[0].rfind("DLOCK_URL=", 0) != 0) env.push_back("DLOCK_URL=");
    ChildProcess p(Args(c.args), ChildOptions::Env(env));
    const int code = p.Wait(60s);
    const std::string out = p.output();
    EXPECT_EQ(code, 64) << c.args[1] << ": " << out;
    EXPECT_NE(out.find(c.says), std::string::npos) << c.args[1] << ": " << out;
    EXPECT_EQ(out.find("Sekr1t"), std::string::npos) << out;
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 1) << out;
  }
}

TEST_F(CliTest, DlockLeavesNoCoreDumpWithItsSecrets) {
  const std::string pattern = ReadFile("/proc/sys/kernel/core_pattern");
  if (pattern.empty() || pattern[0] == '|' || pattern[0] == '/') {
    GTEST_SKIP() << "core dumps do not go to the working directory here: " << pattern;
  }
  // A dumpable dlock killed by SIGABRT would leave DIR/core* (its memory: the URL, its password).
  // coredump_filter 0 keeps such a core small; ulimit -c allows one.
  ChildProcess hold({"/bin/sh", "-c",
                     "cd '" + dir_.string() + "' && ulimit -c unlimited && echo 0 > /proc/self/coredump_filter && "
                     "exec '" + kDlock + "' hold dumped"},
                    ChildOptions::Env(Env()));
  ASSERT_FALSE(hold.AwaitLine("", 20s).empty()) << hold.output();
  hold.Signal(SIGABRT);
  EXPECT_EQ(hold.Wait(20s), 128 + SIGABRT) << hold.output();
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_NE(e.path().filename().string().rfind("core", 0), 0u) << "dlock dumped core: " << e.path();
  }
}

TEST_F(CliTest, CmdGetsTheDescriptorsDlockInheritedAndNoOther) {
  const std::string started = Path("started");
  // fd 7 is the caller's, passed on like 0, 1 and 2.
  ChildProcess dlock({"/bin/sh", "-c",
                      "exec 7</dev/null; exec '" + kDlock + "' exec fds -- sh -c 'echo $$ > " + started +
                          "; exec sleep 100'"},
                     ChildOptions::Env(Env()));
  ASSERT_TRUE(WaitForFile(started, 20s)) << dlock.output();
  const pid_t cmd = std::stoi(ReadFile(started));
  // Past sleep's own start-up (it opens and closes files): what it has now, dlock gave it.
  ASSERT_TRUE(WaitUntil([&] { return Comm(cmd) == "sleep" && AsleepInNanosleep(cmd); }, 20s));
  EXPECT_EQ(OpenDescriptors(cmd), (std::vector<int>{0, 1, 2, 7})) << Joined(OpenDescriptors(cmd));
  dlock.Signal(SIGTERM);
  EXPECT_EQ(dlock.Wait(20s), 128 + SIGTERM) << dlock.output();
}

TEST_F(CliTest, AStoppedCmdWithoutATerminalHoldsTheLockOnlyForTheStoppedGrace) {
  const std::string setsid = FindOnPath("setsid", "DLOCK_TEST_SETSID");
  ASSERT_FALSE(setsid.empty()) << "setsid(1) from util-linux";
  const std::string started = Path("started"), status = Path("status");
  // setsid: no controlling terminal, as under cron, even when the test runs on one.
  ChildProcess dlock({setsid, kDlock, "exec", "--stopped-grace", "1s", "--status-file", status, "stopped",
                      "--", "sh", "-c", "echo $$ > " + started + "; while :; do sleep 0.05; done"},
                     ChildOptions::Env(Env()));
  ASSERT_TRUE(WaitForFile(started, 20s)) << dlock.output();
  const pid_t cmd = std::stoi(ReadFile(started));
  ASSERT_EQ(kill(cmd, SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  const int code = dlock.Wait(std::chrono::milliseconds(1000 + kSlackMs));
  const int64_t took = MsSince(stopped_at);
  kill(cmd, SIGCONT);
  EXPECT_EQ(code, 70) << "the lock is held while CMD is stopped: " << dlock.output();
  EXPECT_GE(took, 950) << "killed before --stopped-grace ran out";
  EXPECT_TRUE(WaitUntil([&] { return Dead(cmd); }, 20s));
  EXPECT_FALSE(Held("stopped")) << "released when CMD was killed";
  EXPECT_EQ(ReadFile(status), "stopped\n");
  EXPECT_NE(dlock.output().find("--stopped-grace"), std::string::npos) << dlock.output();
  dlock.Kill();
}

TEST_F(CliTest, SigkilledDlockLeavesNoProcessOfCmdsGroup) {
  const std::string started = Path("started");
  ChildProcess dlock(Args({"exec", "group", "--", "sh", "-c",
                           "echo $$ > " + started + "; sleep 100 & sleep 100; wait"}),
                     ChildOptions::Env(Env()));
  ASSERT_TRUE(WaitForFile(started, 20s)) << dlock.output();
  const pid_t cmd = std::stoi(ReadFile(started));
  const pid_t group = (pid_t)StatField(cmd, 5);
  ASSERT_GT(group, 0);
  auto sleeps = [&] {
    int n = 0;
    for (pid_t p : LiveGroupMembers(group)) n += Comm(p) == "sleep";
    return n;
  };
  ASSERT_TRUE(WaitUntil([&] { return sleeps() == 2; }, 20s));
  dlock.Kill();
  const bool gone = WaitUntil([&] { return LiveGroupMembers(group).empty(); }, std::chrono::milliseconds(1000 + kSlackMs));
  const std::vector<pid_t> left = LiveGroupMembers(group);
  for (pid_t p : left) kill(p, SIGKILL);
  EXPECT_TRUE(gone) << "left running after dlock died: " << Joined(std::vector<int>(left.begin(), left.end()));
}

TEST_F(CliTest, SigstoppedDlocksCmdIsDeadBeforeTheServersLeaseEnds) {
  pid_t cmd;
  auto dlock = ExecLongCmd({"exec", "--lease", "2s", "frozen"}, "", &cmd);
  ASSERT_GT(cmd, 0);
  dlock->Signal(SIGSTOP);
  ASSERT_TRUE(WaitUntil([&] { return ProcessState(dlock->pid()) == 'T'; }, 20s));
  const auto stopped_at = Clock::now();
  // Whenever the server shows the lease ended, CMD must already be dead.
  bool freed = false, dead_when_freed = false;
  std::string seen;  // what the server said, and when
  while (MsSince(stopped_at) < 2000 + kSlackMs) {
    const std::string exists = redis_.Cli({"EXISTS", "dlock:{frozen}"});
    if (exists == "0") {
      freed = true;
      dead_when_freed = Dead(cmd);
      seen = "freed " + std::to_string(MsSince(stopped_at)) + " ms after the stop; CMD " +
             std::string(1, ProcessState(cmd) ? ProcessState(cmd) : '-');
      break;
    }
    if (exists != "1") seen += exists + "; ";
    std::this_thread::sleep_for(5ms);
  }
  const bool dead = Dead(cmd);
  if (!dead) kill(cmd, SIGKILL);
  dlock->Signal(SIGCONT);
  EXPECT_TRUE(freed) << "the lease did not end on the server: " << seen;
  EXPECT_TRUE(dead_when_freed) << "CMD ran on after its lease ended on the server: " << seen;
  EXPECT_EQ(dlock->Wait(20s), 70) << dlock->output();
}

TEST_F(CliTest, StatusFileSaysWhatHappened) {
  const std::string status = Path("status"), seen = Path("seen");
  auto run = [&](std::vector<std::string> args) {
    std::filesystem::remove(status);
    const auto exec = std::find(args.begin(), args.end(), std::string("exec"));
    args.insert(exec + 1, {"--status-file", status});
    return Run(args).code;
  };
  EXPECT_EQ(run({"exec", "job", "--", "sh", "-c", "cat " + status + " > " + seen + "; exit 3"}), 3);
  EXPECT_EQ(ReadFile(status), "cmd-exited 3\n");
  std::string during = ReadFile(seen);
  EXPECT_EQ(during.rfind("acquired ", 0), 0u) << during;
  EXPECT_GT(std::stoull(during.substr(9)), 0u) << "the fencing token: " << during;
  EXPECT_EQ(run({"exec", "job", "--", "sh", "-c", "exit 70"}), 70);
  EXPECT_EQ(ReadFile(status), "cmd-exited 70\n") << "CMD's own 70 is not a lost lock";
  EXPECT_EQ(run({"exec", "job", "--", "sh", "-c", "kill -TERM $$"}), 128 + SIGTERM);
  EXPECT_EQ(ReadFile(status), "cmd-signalled 15\n");
  EXPECT_EQ(run({"exec", "job", "--", "sh", "-c", "'" + kDlock + "' --url " + redis_.url() +
                                               " exec --wait 0 job -- true; exit $?"}),
            75);
  EXPECT_EQ(ReadFile(status), "cmd-exited 75\n") << "CMD's own 75 is not dlock's";
  EXPECT_EQ(run({"exec", "job", "--", "no-such-command-here"}), 127);
  EXPECT_EQ(ReadFile(status), "not-found\n");
  EXPECT_EQ(run({"exec", "--lease", "x", "job", "--", "true"}), 64);
  EXPECT_EQ(ReadFile(status), "usage\n");

  Client holder(redis_.url());
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(run({"exec", "--wait", "0", "busy", "--", "true"}), 75);
  EXPECT_EQ(ReadFile(status), "not-acquired\n");
  EXPECT_EQ(dlock_release(held), DLOCK_OK);

  pid_t cmd;
  std::filesystem::remove(status);
  auto lost = ExecLongCmd({"exec", "--status-file", status, "--lease", "3s", "doomed"}, "exit 0", &cmd);
  ASSERT_GT(cmd, 0);
  ASSERT_EQ(redis_.Cli({"DEL", "dlock:{doomed}"}), "1");
  EXPECT_EQ(lost->Wait(20s), 70) << lost->output();
  EXPECT_EQ(ReadFile(status), "lost\n");

  RedisServer gone;
  ASSERT_TRUE(gone.running());
  const std::string down = gone.url();
  gone.Stop();
  EXPECT_EQ(run({"--url", down, "exec", "job", "--", "true"}), 69);
  EXPECT_EQ(ReadFile(status), "backend-error\n");
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind("status.", 0), std::string::npos) << "left behind: " << e.path();
  }
}

// --metrics-textfile: node_exporter's textfile format, written atomically when dlock ends, for
// the run that ran CMD and for one that never took the lock; it passes promtool's check.
TEST_F(CliTest, MetricsTextfileSaysWhatTheRunDid) {
  const std::string prom = Path("job.prom"), token_file = Path("token");
  Outcome ran = Run({"exec", "--metrics-textfile", prom, "nightly \"job\"", "--", "sh", "-c",
                     "echo $DLOCK_FENCING_TOKEN > " + token_file + "; sleep 0.2; exit 3"});
  ASSERT_EQ(ran.code, 3) << ran.output;
  const std::string text = ReadFile(prom);
  const std::string label = "{name=\"nightly \\\"job\\\"\"";
  const std::string token = ReadFile(token_file).substr(0, ReadFile(token_file).size() - 1);
  for (const std::string& line :
       {"dlock_exec_success" + label + "} 0", "dlock_exec_outcome" + label + ",outcome=\"cmd-exited\"} 1",
        "dlock_exec_exit_code" + label + "} 3", "dlock_exec_fencing_token" + label + "} " + token}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << " not in:\n" << text;
  }
  const size_t held_at = text.find("dlock_exec_hold_seconds" + label + "} ");
  ASSERT_NE(held_at, std::string::npos) << text;
  EXPECT_GE(std::stod(text.substr(text.find("} ", held_at) + 2)), 0.2) << text;
  const int rc = std::system(("promtool check metrics < " + prom + " > " + Path("promtool.out") + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadFile(Path("promtool.out")) << text;

  Client holder(redis_.url());
  dlock_lock* held = nullptr;
  ASSERT_EQ(dlock_acquire(holder.get(), "busy", nullptr, &held), DLOCK_OK) << dlock_last_error();
  EXPECT_EQ(Run({"exec", "--metrics-textfile", prom, "--wait", "100ms", "busy", "--", "true"}).code, 75);
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
  const std::string refused = ReadFile(prom);
  for (const char* line : {"dlock_exec_success{name=\"busy\"} 0", "dlock_exec_outcome{name=\"busy\",outcome=\"not-acquired\"} 1",
                           "dlock_exec_exit_code{name=\"busy\"} 75", "dlock_exec_fencing_token{name=\"busy\"} 0",
                           "dlock_exec_hold_seconds{name=\"busy\"} 0"}) {
    EXPECT_NE(refused.find(std::string(line) + "\n"), std::string::npos) << line << " not in:\n" << refused;
  }
  EXPECT_EQ(Run({"exec", "--metrics-textfile", prom, "job", "--", "true"}).code, 0);
  EXPECT_NE(ReadFile(prom).find("dlock_exec_success{name=\"job\"} 1\n"), std::string::npos) << ReadFile(prom);
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename().string().rfind("job.prom.", 0), std::string::npos) << "left behind: " << e.path();
  }
}

// -v --json: every line on stderr is one JSON object: the library's events (acquiring,
// acquired with the token CMD got, released) and dlock's own notes.
TEST_F(CliTest, VerboseJsonPrintsEventsAsJsonLines) {
  const std::string token_file = Path("token");
  ChildProcess p(Args({"-v", "--json", "exec", "report", "--", "sh", "-c", "echo $DLOCK_FENCING_TOKEN > " + token_file}),
                 ChildOptions::Env(Env()));
  ASSERT_EQ(p.Wait(60s), 0) << p.output();
  const uint64_t token = std::stoull(ReadFile(token_file));
  std::istringstream lines(p.output());
  std::string line, events;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << "not JSON: " << line << "\nin:\n" << p.output();
    ASSERT_TRUE(j.contains("event") && j.contains("unix_ms")) << line;
    if (j["event"] == "note") continue;
    events += (events.empty() ? "" : " ") + j["event"].get<std::string>();
    EXPECT_EQ(j["name"], "report") << line;
    if (j["event"] == "acquired" || j["event"] == "released") {
      EXPECT_EQ(j["fencing_token"].get<uint64_t>(), token) << line;
      EXPECT_EQ(j["status"], "DLOCK_OK") << line;
    }
  }
  EXPECT_EQ(events, "acquiring acquired released") << p.output();
  // Plain -v keeps its human lines.
  Outcome plain = Run({"-v", "exec", "report", "--", "true"});
  EXPECT_NE(plain.output.find("dlock exec: acquired lock 'report'"), std::string::npos) << plain.output;
}

TEST_F(CliTest, CtrlZStopsCmdAndDlockAndContinuingDlockContinuesCmd) {
  const std::string started = Path("started"), status = Path("status");
  // CMD is sleep itself (exec), not a shell looping over sleeps: Ctrl-Z on a shell that is
  // vforking stops the child before its exec and leaves the shell waiting for it, unstopped.
  PtyJob job({kDlock, "exec", "--status-file", status, "tty-job", "--", "sh", "-c",
              "echo $$ > " + started + "; exec sleep 100"},
             Env(), /*background=*/false);
  ASSERT_TRUE(job.started()) << job.error();
  ASSERT_TRUE(WaitForFile(started, 20s)) << job.output();
  const pid_t cmd = std::stoi(ReadFile(started)), dlock = job.pid();
  const pid_t group = (pid_t)StatField(cmd, 5);
  EXPECT_NE(group, dlock);
  // The terminal's foreground group (tpgid, field 8) is CMD's: the terminal's signals reach it.
  EXPECT_TRUE(WaitUntil([&] { return StatField(cmd, 8) == group; }, 20s)) << StatField(cmd, 8);
  job.Type("\x1a");  // Ctrl-Z
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(cmd) == 'T'; }, 20s))
      << "CMD did not stop: " << ReadFile("/proc/" + std::to_string(cmd) + "/status")
      << ReadFile("/proc/" + std::to_string(cmd) + "/stack") << ReadFile("/proc/" + std::to_string(cmd) + "/wchan");
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(dlock) == 'T'; }, 20s)) << "dlock did not follow";
  EXPECT_EQ(StatField(dlock, 8), dlock) << "dlock takes the terminal back, as a shell does";
  EXPECT_TRUE(Held("tty-job"));
  kill(dlock, SIGCONT);  // fg, the lease still valid: CMD goes on, in the foreground
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(cmd) != 'T' && ProcessState(dlock) != 'T'; }, 20s));
  EXPECT_TRUE(WaitUntil([&] { return StatField(cmd, 8) == group; }, 20s));
  EXPECT_TRUE(Held("tty-job"));
  job.Type("\x03");  // Ctrl-C reaches CMD's group
  EXPECT_EQ(job.Wait(20s), 128 + SIGINT) << job.output();
  EXPECT_EQ(ReadFile(status), "cmd-signalled 2\n");
  EXPECT_FALSE(Held("tty-job"));
}

TEST_F(CliTest, ACmdStoppedByReadingTheTerminalInTheBackgroundDoesNotKeepTheLock) {
  const std::string started = Path("started"), status = Path("status");
  PtyJob job({kDlock, "exec", "--lease", "2s", "--status-file", status, "tty-bg", "--", "sh", "-c",
              "echo $$ > " + started + "; exec cat"},
             Env(), /*background=*/true);
  ASSERT_TRUE(job.started()) << job.error();
  ASSERT_TRUE(WaitForFile(started, 20s)) << job.output();
  const pid_t cmd = std::stoi(ReadFile(started)), dlock = job.pid();
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(cmd) == 'T'; }, 20s)) << "cat got no SIGTTIN";
  EXPECT_TRUE(WaitUntil([&] { return ProcessState(dlock) == 'T'; }, 20s)) << "dlock did not follow";
  const auto stopped_at = Clock::now();
  EXPECT_TRUE(WaitUntil([&] { return !Held("tty-bg"); }, std::chrono::milliseconds(2000 + kSlackMs)))
      << "a stopped job kept the lock";
  EXPECT_TRUE(Dead(cmd)) << "CMD outlived the lease, " << MsSince(stopped_at) << " ms";
  kill(dlock, SIGCONT);  // too late: the lease is over
  EXPECT_EQ(job.Wait(20s), 70) << job.output();
  EXPECT_EQ(ReadFile(status), "stopped\n");
}

}  // namespace
}  // namespace dlock_test
