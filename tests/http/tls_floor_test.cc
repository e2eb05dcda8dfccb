// libcurl gets the TLS 1.2 floor the Redis path has (CURLOPT_SSLVERSION): a server that speaks
// only TLS 1.1 is refused. The system's OpenSSL configuration may refuse TLS 1.1 by itself
// (Debian's does), which would hide a missing floor: the server and dlock's side (a probe
// process, tls_floor_probe.cc) both run with a configuration that allows TLS 1.0 at security
// level 0, and `openssl s_client -tls1_1` under it shows that the server is reachable that way.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

// Runs argv with extra environment entries; its exit status and combined output.
struct Ran {
  int status = -1;
  std::string output;
};

Ran RunWithEnv(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string cmd;
  for (const std::string& e : env) cmd += e + " ";
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  cmd += "</dev/null 2>&1";
  Ran ran;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return ran;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) ran.output.append(buf.data(), n);
  int st = pclose(p);
  ran.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return ran;
}

// A port nothing listens on now (the kernel's pick for port 0).
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

class TlsFloorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dlock-tls-floor-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    conf_ = dir_ + "/lax.cnf";
    std::ofstream(conf_) << "openssl_conf = d\n[d]\nssl_conf = s\n[s]\nsystem_default = sd\n"
                            "[sd]\nMinProtocol = TLSv1\nCipherString = DEFAULT@SECLEVEL=0\n";
    Ran cert = RunWithEnv({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                           dir_ + "/key.pem", "-out", dir_ + "/cert.pem", "-days", "1", "-subj",
                           "/CN=127.0.0.1"},
                          {});
    ASSERT_EQ(cert.status, 0) << cert.output;
  }
  void TearDown() override {
    if (server_ > 0) {
      kill(server_, SIGTERM);
      waitpid(server_, nullptr, 0);
    }
    RunWithEnv({"rm", "-rf", dir_}, {});
  }

  // openssl s_server speaking TLS 1.1 only; true once it accepts a TLS 1.1 handshake.
  bool StartTls11Server() {
    port_ = FreePort();
    if (port_ == 0) return false;
    std::vector<std::string> args = {"openssl", "s_server", "-accept", std::to_string(port_), "-tls1_1",
                                     "-cipher", "DEFAULT@SECLEVEL=0", "-cert", dir_ + "/cert.pem",
                                     "-key", dir_ + "/key.pem", "-www", "-quiet"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = {"OPENSSL_CONF=" + conf_, "PATH=" + std::string(getenv("PATH"))};
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(&server_, "openssl", &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) return false;
    // Ready when a TLS 1.1 client gets through (bounded: 20 s).
    for (int i = 0; i < 200; ++i) {
      Ran hello = RunWithEnv({"openssl", "s_client", "-connect", "127.0.0.1:" + std::to_string(port_),
                              "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"},
                             {"OPENSSL_CONF=" + conf_});
      if (hello.status == 0 && hello.output.find("TLSv1.1") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  std::string dir_, conf_;
  pid_t server_ = 0;
  int port_ = 0;
};

TEST_F(TlsFloorTest, AServerSpeakingOnlyTls11IsRefused) {
  ASSERT_TRUE(StartTls11Server()) << "openssl s_server -tls1_1 did not come up";
  Ran probe = RunWithEnv({DLOCK_TLS_FLOOR_PROBE, "https://127.0.0.1:" + std::to_string(port_) + "/"},
                         {"OPENSSL_CONF=" + conf_});
  EXPECT_EQ(probe.status, 1) << "TLS 1.1 was accepted: " << probe.output;
  EXPECT_NE(probe.output.find("refused: "), std::string::npos) << probe.output;
}

}  // namespace
