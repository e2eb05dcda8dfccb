// The dlock command on every backend: `prepare` makes the backend ready (DynamoDB: a new
// table), `exec` runs CMD under the lock with its token, `inspect` shows the holder and then
// "free", `--wait 0` on a held lock is exit 75, and `request-release` reaches the CMD of an
// `exec --on-release-request`. What the command itself does (signals, exit codes, losses) is in
// tests/cli_test.cc, against Redis. CMD gets no descriptor of dlock's
// on any backend (only 0, 1 and 2). `exec a b -- CMD` holds both names while CMD runs, takes
// none when one is held elsewhere, and two such execs naming them in either order never deadlock.
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

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// "'a'": a path or name as one word of a POSIX shell's command line.
std::string ShellQuoted(const std::string& word) {
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
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
  EXPECT_EQ(seen["holders"][0]["fencing_token"].get<uint64_t>(), Shown(token)) << line;
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
  const uint64_t term = Shown(dlock_lock_fencing_token(l));
  const std::string led = name + ": led by 'leader-1', term " + (term != 0 ? std::to_string(term) : "unknown") +
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
  // Accepted forms run CMD as usual (exec and elect), where the backend delivers requests; a
  // usage error naming what it lacks elsewhere (etcd's layout=mutex).
  const bool delivers = (backend().capabilities & DLOCK_CAP_RELEASE_REQUEST) != 0;
  for (const std::string good : {"USR2", "SIGHUP", "term", "10"}) {
    Outcome o = Dlock({"--url", server().url(), "exec", "--on-release-request=" + good, name, "--", "true"});
    EXPECT_EQ(o.code, delivers ? 0 : 64) << good << ": " << o.output;
    if (!delivers) {
      EXPECT_NE(o.output.find("cannot deliver release requests"), std::string::npos) << o.output;
    }
  }
  Outcome elected = Dlock({"--url", server().url(), "elect", "--on-release-request", "TERM", name, "--", "true"});
  EXPECT_EQ(elected.code, delivers ? 0 : 64) << elected.output;

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

// `dlock exec A B -- CMD`: CMD runs while both are held (dlock inspect from CMD shows both,
// with the tokens CMD got), DLOCK_NAME and DLOCK_FENCING_TOKEN are the first name's as given,
// DLOCK_NAMES and DLOCK_FENCING_TOKENS list every name and token one per line in the order
// given (not the bytewise order they are taken in; a name may hold spaces), and both are free
// once CMD exited.
TEST_P(Cli, ExecHoldsSeveralNamesWhileCmdRuns) {
  const std::string first = Name("several z, first"), second = Name("several a, second");  // z > a
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-several", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string script =
      "printf '%s' \"$DLOCK_NAMES\" > " + ShellQuoted((dir / "names").string()) +
      "; printf '%s' \"$DLOCK_FENCING_TOKENS\" > " + ShellQuoted((dir / "tokens").string()) +
      "; printf '%s\\n%s' \"$DLOCK_NAME\" \"$DLOCK_FENCING_TOKEN\" > " + ShellQuoted((dir / "first").string()) +
      "; " + ShellQuoted(DLOCK_CLI) + " --url " + ShellQuoted(server().url()) + " inspect --json \"$1\" \"$2\" > " +
      ShellQuoted((dir / "seen").string());
  Outcome ran = Dlock({"--url", server().url(), "exec", "--owner", "both", first, second, "--", "sh", "-c", script,
                       "sh", first, second});
  ASSERT_EQ(ran.code, 0) << ran.output;
  EXPECT_EQ(Slurp(dir / "names"), first + "\n" + second);
  std::istringstream tokens_in(Slurp(dir / "tokens"));
  std::vector<uint64_t> tokens;
  for (std::string line; std::getline(tokens_in, line);) tokens.push_back(std::stoull(line));
  ASSERT_EQ(tokens.size(), 2u) << Slurp(dir / "tokens");
  EXPECT_GT(tokens[0], 0u);
  EXPECT_GT(tokens[1], 0u);
  EXPECT_EQ(Slurp(dir / "first"), first + "\n" + std::to_string(tokens[0]));
  std::istringstream seen_in(Slurp(dir / "seen"));
  std::vector<nlohmann::json> seen;
  for (std::string line; std::getline(seen_in, line);) seen.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(seen.size(), 2u) << Slurp(dir / "seen");
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(seen[k]["name"], k == 0 ? first : second) << seen[k];
    EXPECT_EQ(seen[k]["held"], true) << seen[k];
    ASSERT_EQ(seen[k]["holders"].size(), 1u) << seen[k];
    EXPECT_EQ(seen[k]["holders"][0]["owner"], "both") << seen[k];
    EXPECT_EQ(seen[k]["holders"][0]["fencing_token"].get<uint64_t>(), Shown(tokens[k])) << seen[k];
  }
  Client c(server().url());
  EXPECT_TRUE(Inspect(c.get(), first).free()) << Inspect(c.get(), first);
  EXPECT_TRUE(Inspect(c.get(), second).free()) << Inspect(c.get(), second);
  std::filesystem::remove_all(dir);
}

// All or none: with B held by another, `exec --wait 0 A B` exits 75 naming both, CMD never
// runs, A is left free and B with its holder. Once B is free, the same exec runs. A name given
// twice is a usage error (64) before anything is taken; elect and hold take one name.
TEST_P(Cli, ExecOfSeveralNamesTakesNoneWhenOneIsHeld) {
  const std::string a = Name("none a"), b = Name("none b");
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-none", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string ran = (dir / "ran").string();
  Client c(server().url());
  {
    HeldElsewhere held(server().url(), b);
    ASSERT_TRUE(held.held());
    Outcome refused = Dlock({"--url", server().url(), "exec", "--wait", "0", a, b, "--", "touch", ran});
    EXPECT_EQ(refused.code, 75) << refused.output;
    EXPECT_NE(refused.output.find("none of locks '" + a + "', '" + b + "' is held"), std::string::npos)
        << refused.output;
    EXPECT_FALSE(std::filesystem::exists(ran)) << "CMD ran without every lock";
    EXPECT_TRUE(Inspect(c.get(), a).free()) << Inspect(c.get(), a);
    EXPECT_TRUE(held.Undisturbed());
    // The other order gives up the same way (b is taken second either way).
    Outcome reversed = Dlock({"--url", server().url(), "exec", "--wait", "0", b, a, "--", "touch", ran});
    EXPECT_EQ(reversed.code, 75) << reversed.output;
    EXPECT_FALSE(std::filesystem::exists(ran));
    EXPECT_TRUE(Inspect(c.get(), a).free()) << Inspect(c.get(), a);
  }
  Outcome taken = Dlock({"--url", server().url(), "exec", "--wait", "0", a, b, "--", "touch", ran});
  EXPECT_EQ(taken.code, 0) << taken.output;
  EXPECT_TRUE(std::filesystem::exists(ran));
  std::filesystem::remove(ran);

  for (const auto& twice : {std::vector<std::string>{a, a}, std::vector<std::string>{a, b, a}}) {
    std::vector<std::string> args{"--url", server().url(), "exec", "--wait", "0"};
    args.insert(args.end(), twice.begin(), twice.end());
    args.insert(args.end(), {"--", "touch", ran});
    Outcome dup = Dlock(args);
    EXPECT_EQ(dup.code, 64) << dup.output;
    EXPECT_NE(dup.output.find("dlock exec: lock '" + a + "' is named twice"), std::string::npos) << dup.output;
    EXPECT_FALSE(std::filesystem::exists(ran));
  }
  Outcome elect = Dlock({"--url", server().url(), "elect", a, b, "--", "touch", ran});
  EXPECT_EQ(elect.code, 64) << elect.output;
  EXPECT_NE(elect.output.find("one lock NAME before '--'"), std::string::npos) << elect.output;
  Outcome hold = Dlock({"--url", server().url(), "hold", a, b});
  EXPECT_EQ(hold.code, 64) << hold.output;
  EXPECT_FALSE(std::filesystem::exists(ran));
  EXPECT_TRUE(Inspect(c.get(), a).free()) << Inspect(c.get(), a);
  EXPECT_TRUE(Inspect(c.get(), b).free()) << Inspect(c.get(), b);
  std::filesystem::remove_all(dir);
}

// The loss of any one of several names is a loss: `dlock break --now B` while `exec A B` runs
// reaches B's holder at its next renewal; CMD gets SIGTERM (--on-lost term), dlock exits 70
// naming B, and A is given back.
TEST_P(Cli, ExecOfSeveralNamesStopsCmdWhenAnyIsLost) {
  const std::string a = Name("lost a"), b = Name("lost b");
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-lost", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string started = (dir / "started").string(), termed = (dir / "termed").string();
  ChildProcess exec({DLOCK_CLI, "--url", server().url(), "exec", "--lease", "2s", a, b, "--", "sh", "-c",
                     "trap 'echo term > " + ShellQuoted(termed) + "; exit 0' TERM; echo $$ > " + ShellQuoted(started) +
                         "; while :; do sleep 0.05; done"});
  auto start = Clock::now();
  while (!std::filesystem::exists(started) && MsSince(start) < 60000) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(std::filesystem::exists(started)) << exec.output();
  // Where there is no break (etcd's layout=mutex), B's key is deleted behind its holder's back.
  const bool breaks = (backend().capabilities & DLOCK_CAP_BREAK) != 0;
  if (breaks) {
    Outcome broke = Dlock({"--url", server().url(), "break", "--yes", "--now", "--reason", "test", b});
    ASSERT_EQ(broke.code, 0) << broke.output;
  } else {
    ASSERT_TRUE(server().DeleteLock(b));
  }
  EXPECT_EQ(exec.Wait(30s), 70) << exec.output();
  EXPECT_TRUE(std::filesystem::exists(termed)) << "CMD was not sent SIGTERM: " << exec.output();
  EXPECT_NE(exec.output().find("dlock exec: lock '" + b + "' was lost while CMD ran; stopping CMD: " +
                               (breaks ? "broken: " : "deleted: ")),
            std::string::npos)
      << exec.output();
  Client c(server().url());
  Snapshot seen;
  EXPECT_TRUE(WaitFor([&] { return (seen = Inspect(c.get(), a)).free(); }, 5s)) << seen;
  std::filesystem::remove_all(dir);
}

// `dlock exec A B` and `dlock exec B A` made to meet: both names are held elsewhere while the
// two start, so both wait, and then both are released at once. Taken in one fixed order, both
// execs wait for A first (-v says which lock each waits for), neither can hold B while waiting
// for A, and both finish (taken in the order given, each would win its first name and wait for
// the other's forever: --wait 20s turns that into a failure). Their CMDs never overlap: each
// writes a start and an end mark, and the marks never interleave.
TEST_P(Cli, ExecsOfSeveralNamesInEitherOrderNeverDeadlock) {
  const int rounds = 3;
  const std::string a = Name("order a"), b = Name("order b");  // a < b: a is taken first
  std::string why;
  const std::filesystem::path dir = MakeTempDir("cli-order", &why);
  ASSERT_FALSE(dir.empty()) << why;
  const std::string marks = ShellQuoted((dir / "marks").string());
  const std::string cmd = "echo \"start $0\" >> " + marks + "; sleep 0.1; echo \"end $0\" >> " + marks;
  auto exec = [&](const std::string& first, const std::string& second, const std::string& id) {
    return std::make_unique<ChildProcess>(std::vector<std::string>{
        DLOCK_CLI, "--url", server().url(), "-v", "exec", "--wait", "20s", "--lease", "5s", first, second, "--",
        "sh", "-c", cmd, id});
  };
  for (int round = 0; round < rounds; ++round) {
    auto held_a = std::make_unique<HeldElsewhere>(server().url(), a);
    auto held_b = std::make_unique<HeldElsewhere>(server().url(), b);
    ASSERT_TRUE(held_a->held() && held_b->held());
    auto forward = exec(a, b, "ab"), backward = exec(b, a, "ba");
    const std::string waits_for_a = "dlock exec: waiting for lock '" + a + "'";
    EXPECT_NE(forward->AwaitLine(waits_for_a, 30s), "") << forward->output();
    EXPECT_NE(backward->AwaitLine(waits_for_a, 30s), "") << "not the fixed order: " << backward->output();
    std::thread release_b([&] { held_b->Release(); });
    held_a->Release();
    release_b.join();
    EXPECT_EQ(forward->Wait(60s), 0) << forward->output();
    EXPECT_EQ(backward->Wait(60s), 0) << backward->output();
  }
  std::istringstream in(Slurp(dir / "marks"));
  std::vector<std::string> seen;
  for (std::string line; std::getline(in, line);) seen.push_back(line);
  ASSERT_EQ(seen.size(), static_cast<size_t>(4 * rounds));
  int forward_runs = 0;
  for (size_t k = 0; k + 1 < seen.size(); k += 2) {
    const bool paired = seen[k].rfind("start ", 0) == 0 && seen[k + 1] == "end " + seen[k].substr(6);
    EXPECT_TRUE(paired) << "marks interleave at line " << k << ": " << seen[k] << " / " << seen[k + 1];
    forward_runs += seen[k] == "start ab";
  }
  EXPECT_EQ(forward_runs, rounds);
  Client c(server().url());
  EXPECT_TRUE(Inspect(c.get(), a).free()) << Inspect(c.get(), a);
  EXPECT_TRUE(Inspect(c.get(), b).free()) << Inspect(c.get(), b);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Cli, ::testing::ValuesIn(AllBackends()), BackendTestName);

}  // namespace
}  // namespace dlock_test
