// What clients sent a server that it has not read yet: the receive queues of its TCP
// connections, as /proc/net/tcp and /proc/net/tcp6 show them. A SIGSTOPped server reads
// nothing, so a request sent to it afterwards shows here, byte for byte, until it runs again.
#ifndef DLOCK_TESTS_SUPPORT_UNREAD_BYTES_H_
#define DLOCK_TESTS_SUPPORT_UNREAD_BYTES_H_

#include <dirent.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dlock_test {

// The bytes waiting unread on the established TCP connections whose local port is one of ports
// (the server's ends of its clients' connections; this host's network namespace).
inline int64_t UnreadBytesOnPorts(const std::vector<int>& ports) {
  int64_t unread = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // the heading
    while (std::getline(in, line)) {
      // "  sl: LOCAL_HEX_ADDR:PORT REMOTE:PORT ST TX_QUEUE:RX_QUEUE ...", in hex.
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues;
      if (!(fields >> slot >> local >> remote >> state >> queues)) continue;
      if (state != "01") continue;  // TCP_ESTABLISHED
      const size_t colon = local.rfind(':'), split = queues.find(':');
      if (colon == std::string::npos || split == std::string::npos) continue;
      const int port = static_cast<int>(std::stol(local.substr(colon + 1), nullptr, 16));
      for (int p : ports) {
        if (p == port) unread += std::stoll(queues.substr(split + 1), nullptr, 16);
      }
    }
  }
  return unread;
}

// Waits (up to limit) until every thread of process pid is stopped (SIGSTOP takes effect when
// the process is next scheduled, not when kill returns); true when they all are.
inline bool WaitStopped(pid_t pid, std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (;;) {
    bool all = true, any = false;
    if (DIR* d = opendir(tasks.c_str())) {
      while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::ifstream stat(tasks + "/" + e->d_name + "/stat");
        std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
        const size_t paren = text.rfind(')');  // "pid (comm) STATE ...": comm may hold anything
        if (paren == std::string::npos || paren + 2 >= text.size()) continue;
        any = true;
        all = all && text[paren + 2] == 'T';
      }
      closedir(d);
    }
    if (any && all) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace dlock_test

#endif  // DLOCK_TESTS_SUPPORT_UNREAD_BYTES_H_
