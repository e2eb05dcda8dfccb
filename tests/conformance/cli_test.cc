// The dlock command on every backend: `prepare` makes the backend ready (DynamoDB: a new
// table), `exec` runs CMD under the lock with its token, `inspect` shows the holder and then
// "free", `--wait 0` on a held lock is exit 75, and `request-release` reaches the CMD of an
// `exec --on-release-request`. What the command itself does (signals, exit codes, losses) is in
// tests/cli_test.cc, against Redis. CMD gets no descriptor of dlock's
// on any backend (only 0, 1 and 2).
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "conformance/conformance.h"
#include "support/child_process.h"
#include "support/pty.h"

namespace dlock_test {
namespace {

struct Outcome {
  int code;
  std::string output;
};

Outcome Dlock(std::vector<std::string> args) {
  args.insert(args.begin(), DLOCK_CLI);
  ChildProcess p(args);
  const int code = p.Wait(std::chrono::seconds(120));
  return {code, p.output()};
}

class Cli : public BackendTest {};

TEST_P(Cli, PrepareExecAndInspect) {
  const std::string target = server().UnpreparedUrl();  // DynamoDB: prepare must make the table
  Outcome prepared = Dlock({"--url", target, "prepare"});
  ASSERT_EQ(prepared.code, 0) << prepared.output;
  EXPECT_EQ(prepared.output.rfind("ready: ", 0), 0u) << prepared.output;

  const std::string name = Name("cli");
  const auto dir = std::filesystem::temp_directory_path() / ("dlock-cli-conf-" + name);
  std::filesystem::create_directories(dir);
  const std::string token_file = (dir / "token").string(), seen_file = (dir / "seen").string();
  Outcome ran = Dlock({"--url", target, "exec", "--owner", "conformance", "--value", "10.0.0.7:80 \xc3\xa9t\xc3\xa9",
                       name, "--", "sh", "-c",
                       "echo $DLOCK_FENCING_TOKEN > " + token_file + "; '" DLOCK_CLI "' --url '" +
                           target + "' inspect --json '" + name + "' > " + seen_file});
  ASSERT_EQ(ran.code, 0) << ran.output;
  std::ifstream token_in(token_file), seen_in(seen_file);
  uint64_t token = 0;
  token_in >> token;
  std::string line;
  ASSERT_TRUE(std::getline(seen_in, line)) << ran.output;
  nlohmann::json seen = nlohmann::json::parse(line);
  ASSERT_EQ(seen["holders"].size(), 1u) << line;
  EXPECT_EQ(seen["holders"][0]["owner"], "conformance") << line;
  EXPECT_EQ(seen["holders"][0]["fencing_token"].get<uint64_t>(), token) << line;
  EXPECT_EQ(seen["holders"][0]["value"], "10.0.0.7:80 \xc3\xa9t\xc3\xa9") << line;
  std::filesystem::remove_all(dir);

  Outcome after = Dlock({"--url", target, "inspect", name});
  EXPECT_EQ(after.code, 0) << after.output;
  EXPECT_EQ(after.output, name + ": free\n");

  Client holder(target);
  dlock_lock* held = nullptr;
  Options binary;
  binary.value(std::string("\x01\xff\0z", 4));
  ASSERT_EQ(dlock_acquire(holder.get(), name.c_str(), binary.get(), &held), DLOCK_OK) << dlock_last_error();
  Outcome shown = Dlock({"--url", target, "inspect", name});
  EXPECT_NE(shown.output.find(", value of 4 bytes (binary"), std::string::npos) << shown.output;
  shown = Dlock({"--url", target, "inspect", "--json", name});
  EXPECT_NE(shown.output.find("\"value_base64\":\"Af8Aeg==\""), std::string::npos) << shown.output;
  Outcome refused = Dlock({"--url", target, "exec", "--wait", "0", name, "--", "true"});
  EXPECT_EQ(refused.code, 75) << refused.output;
  EXPECT_EQ(dlock_release(held), DLOCK_OK);
}

// CMD gets stdin, stdout and stderr and nothing of dlock's: no connection to the backend (curl's
// sockets, watches, wake-up pipes), no pipe of the library's.
TEST_P(Cli, CmdGetsNoDescriptorOfDlocks) {
  const std::string name = Name("fds");
  const auto dir = std::filesystem::temp_directory_path() / ("dlock-cli-fds-" + name);
  std::filesystem::create_directories(dir);
  const std::string started = (dir / "started").string();
  ChildProcess dlock({DLOCK_CLI, "--url", server().url(), "exec", name, "--", "sh", "-c",
                      "echo $$ > " + started + "; exec sleep 100"});
  pid_t cmd = -1;
  std::vector<int> fds;
  const auto start = Clock::now();
  while (MsSince(start) < 60000) {
    std::ifstream in(started);
    std::string comm;
    if (cmd < 0 && !(in >> cmd)) cmd = -1;
    if (cmd > 0) std::getline(std::ifstream("/proc/" + std::to_string(cmd) + "/comm"), comm);
    if (comm == "sleep" && AsleepInNanosleep(cmd)) {  // exec'd and past its start-up
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(cmd) + "/fd", ec)) {
        fds.push_back(std::stoi(e.path().filename().string()));
      }
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  std::sort(fds.begin(), fds.end());
  std::string shown;
  for (int fd : fds) {
    shown += std::to_string(fd) + " -> " +
             std::filesystem::read_symlink("/proc/" + std::to_string(cmd) + "/fd/" + std::to_string(fd)).string() + "; ";
  }
  EXPECT_EQ(fds, (std::vector<int>{0, 1, 2})) << shown;
  dlock.Signal(SIGTERM);
  EXPECT_EQ(dlock.Wait(60s), 128 + SIGTERM) << dlock.output();
  std::filesystem::remove_all(dir);
}

// Three shells each run `dlock elect` in a loop: one CMD leads at a time (a CMD that finds
// another's mark fails the run), and the terms the CMDs see, in the order they ran, strictly
// rise. Backends without release notifications wake their candidates by retry: fewer rounds.
TEST_P(Cli, ElectRunsOneLeaderAtATimeWithRisingTerms) {
  const bool notifies = (GetParam().capabilities & DLOCK_CAP_NOTIFIES) != 0;
  const int rounds_per_shell = notifies ? 67 : 10;  // 200 elections in all, or 30
  const std::string name = Name("elect");
  // A private directory: a fixed path would be shared with the same test of another build
  // running on the machine, whose leaders would then look like a second leader of this one.
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-elect", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string mark = (dir / "leading").string(), terms = (dir / "terms").string(),
                    overlaps = (dir / "overlaps").string();
  // CMD: take the mark (mkdir fails if another leader holds it), note the term, give it back.
  const std::string cmd = "mkdir " + mark + " || echo $DLOCK_FENCING_TOKEN >> " + overlaps +
                          "; echo $DLOCK_FENCING_TOKEN >> " + terms + "; rmdir " + mark;
  const std::string loop = "for i in $(seq " + std::to_string(rounds_per_shell) + "); do '" DLOCK_CLI
                           "' --url '" + server().url() + "' elect --lease 5s --value \"shell $1\" '" + name +
                           "' -- sh -c '" + cmd + "' || exit 1; done";
  std::vector<std::unique_ptr<ChildProcess>> shells;
  for (int k = 0; k < 3; ++k) {
    shells.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{"/bin/sh", "-c", loop, "shell", std::to_string(k)}));
  }
  for (auto& shell : shells) EXPECT_EQ(shell->Wait(std::chrono::seconds(300)), 0) << shell->output();
  std::ifstream overlap_in(overlaps);
  std::string overlap;
  EXPECT_FALSE(std::getline(overlap_in, overlap)) << "two leaders at once, one with term " << overlap;
  std::ifstream terms_in(terms);
  std::vector<uint64_t> seen;
  for (uint64_t t; terms_in >> t;) seen.push_back(t);
  EXPECT_EQ(seen.size(), static_cast<size_t>(3 * rounds_per_shell));
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i], seen[i - 1]) << "term " << i << " did not rise";
  }
  EXPECT_TRUE(Inspect(Client(server().url()).get(), name).free());
  std::filesystem::remove_all(dir);
}

// `dlock observe` prints nobody, then the leader with its term and value, then nobody again,
// until it is told to stop.
TEST_P(Cli, ObservePrintsEachChangeOfLeader) {
  const std::string name = Name("observe");
  ChildProcess observer({DLOCK_CLI, "--url", server().url(), "observe", name});
  EXPECT_NE(observer.AwaitLine(name + ": nobody leads", 20s), "") << observer.output();
  Client c(server().url());
  Options o;
  o.owner("leader-1").value("10.0.0.7:80");
  dlock_lock* l = nullptr;
  ASSERT_EQ(dlock_campaign(c.get(), name.c_str(), o.get(), &l), DLOCK_OK) << dlock_last_error();
  const std::string led = name + ": led by 'leader-1', term " + std::to_string(dlock_lock_fencing_token(l)) +
                          ", value '10.0.0.7:80'";
  EXPECT_EQ(observer.AwaitLine(led, 20s), led) << observer.output();
  ASSERT_EQ(dlock_release(l), DLOCK_OK) << dlock_last_error();
  EXPECT_NE(observer.AwaitLine(name + ": nobody leads", 20s), "") << observer.output();
  observer.Signal(SIGTERM);
  EXPECT_EQ(observer.Wait(20s), 0) << observer.output();
}

// `dlock exec --on-release-request USR1` passes a release request (`dlock request-release`) on
// to CMD as SIGUSR1 and nothing more: CMD decides, lets go by exiting 0, and the lock is then
// free. The holder listens from one round trip after its acquire (DynamoDB: hears at its next
// renewal), so the request is repeated every 200 ms until CMD has heard it.
TEST_P(Cli, ReleaseRequestReachesExecsCmdWhichLetsGo) {
  if ((dlock_client_capabilities(Client(server().url()).get()) & DLOCK_CAP_RELEASE_REQUEST) == 0) {
    GTEST_SKIP() << "no release requests";
  }
  const std::string name = Name("asked");
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-release", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string started = (dir / "started").string(), got = (dir / "got").string();
  ChildProcess exec({DLOCK_CLI, "--url", server().url(), "exec", "--lease", "4s", "--on-release-request", "USR1",
                     name, "--", "sh", "-c",
                     "trap 'echo got > " + got + "; exit 0' USR1; echo $$ > " + started +
                         "; while :; do sleep 0.05; done"});
  auto start = Clock::now();
  while (!std::filesystem::exists(started) && MsSince(start) < 60000) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(std::filesystem::exists(started)) << exec.output();

  std::string first_asked;  // the first request that found the holder
  Outcome last{-1, ""};
  start = Clock::now();
  while (!std::filesystem::exists(got) && MsSince(start) < 15000) {
    last = Dlock({"--url", server().url(), "request-release", "--reason", "maintenance 7", name});
    // 1 only once CMD heard an earlier request, exited and dlock released the lock.
    if (last.code != 0) {
      EXPECT_TRUE(last.code == 1 && std::filesystem::exists(got)) << last.code << ": " << last.output;
      break;
    }
    if (first_asked.empty()) first_asked = last.output;
    std::this_thread::sleep_for(200ms);
  }
  ASSERT_TRUE(std::filesystem::exists(got)) << "CMD never got SIGUSR1: " << exec.output() << last.output;
  EXPECT_EQ(first_asked, "asked the holder of " + name + " to let go\n");
  EXPECT_EQ(exec.Wait(60s), 0) << exec.output();
  EXPECT_NE(exec.output().find("dlock exec: asked to let go of lock '" + name +
                               "', reason 'maintenance 7'; sending SIGUSR1 to CMD"),
            std::string::npos)
      << exec.output();
  EXPECT_TRUE(Inspect(Client(server().url()).get(), name).free());

  // Nobody holds it now: exit 1, naming the lock (--json: asked false).
  Outcome nobody = Dlock({"--url", server().url(), "request-release", name});
  EXPECT_EQ(nobody.code, 1) << nobody.output;
  EXPECT_NE(nobody.output.find("dlock request-release: nobody holds lock '" + name + "'"), std::string::npos)
      << nobody.output;
  Outcome nobody_json = Dlock({"--url", server().url(), "request-release", "--json", name});
  EXPECT_EQ(nobody_json.code, 1) << nobody_json.output;
  EXPECT_NE(nobody_json.output.find("{\"name\":\"" + name + "\",\"asked\":false}\n"), std::string::npos)
      << nobody_json.output;

  // A holder that does not listen is asked all the same (it never hears): exit 0.
  Client holder(server().url());
  Hold held(holder.get(), name, nullptr);
  ASSERT_EQ(held.status(), DLOCK_OK) << held.error();
  Outcome json = Dlock({"--url", server().url(), "request-release", "--json", name});
  EXPECT_EQ(json.code, 0) << json.output;
  EXPECT_EQ(json.output, "{\"name\":\"" + name + "\",\"asked\":true}\n");
  EXPECT_TRUE(held.get() && dlock_lock_is_valid(held.get()));
  std::filesystem::remove_all(dir);
}

// Bad signals and reasons are usage errors (64) naming the option, before any lock is taken;
// a signal is a name (with or without SIG, any case) or a number.
TEST_P(Cli, ReleaseRequestBadInputIsTheUsageCode) {
  const std::string name = Name("bad");
  for (const std::string bad : {"NOPE", "SIGNOPE", "0", "65", "-1", "", "USR1x", "STOP", "SIGTSTP", "ttou"}) {
    Outcome o = Dlock({"--url", server().url(), "exec", "--on-release-request", bad, name, "--", "true"});
    EXPECT_EQ(o.code, 64) << bad << ": " << o.output;
    EXPECT_NE(o.output.find("--on-release-request '" + bad + "' is not a signal"), std::string::npos)
        << bad << ": " << o.output;
  }
  Outcome on_hold = Dlock({"--url", server().url(), "hold", "--on-release-request", "USR1", name});
  EXPECT_EQ(on_hold.code, 64) << on_hold.output;
  EXPECT_NE(on_hold.output.find("unknown option '--on-release-request'"), std::string::npos) << on_hold.output;
  // Accepted forms run CMD as usual (exec and elect).
  for (const std::string good : {"USR2", "SIGHUP", "term", "10"}) {
    Outcome o = Dlock({"--url", server().url(), "exec", "--on-release-request=" + good, name, "--", "true"});
    EXPECT_EQ(o.code, 0) << good << ": " << o.output;
  }
  Outcome elected = Dlock({"--url", server().url(), "elect", "--on-release-request", "TERM", name, "--", "true"});
  EXPECT_EQ(elected.code, 0) << elected.output;

  Outcome long_reason = Dlock({"--url", server().url(), "request-release", "--reason", std::string(1025, 'r'), name});
  EXPECT_EQ(long_reason.code, 64) << long_reason.output;
  EXPECT_NE(long_reason.output.find("--reason is 1025 bytes, longer than 1024"), std::string::npos)
      << long_reason.output;
  Outcome no_name = Dlock({"--url", server().url(), "request-release"});
  EXPECT_EQ(no_name.code, 64) << no_name.output;
  EXPECT_NE(no_name.output.find("no lock NAME"), std::string::npos) << no_name.output;
  EXPECT_EQ(Dlock({"--url", server().url(), "request-release", "a", "b"}).code, 64);
  EXPECT_EQ(Dlock({"--url", server().url(), "request-release", "--yes", name}).code, 64);
  EXPECT_EQ(Dlock({"--url", server().url(), "exec", "--reason", "r", name, "--", "true"}).code, 64);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Cli, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
