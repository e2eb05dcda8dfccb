#include "http/cloexec.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace dlock::http {
namespace {

// The process's open descriptors, sorted; empty when /proc is not mounted.
std::vector<int> OpenFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const int fd = std::atoi(e->d_name);
    if (fd != own) fds.push_back(fd);
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

}  // namespace

curl_socket_t OpenSocketCloexec(void*, curlsocktype, curl_sockaddr* address) {
  return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
}

CURLM* NewMultiCloexec() {
  // One at a time: two threads' scans would otherwise see (and fstat) each other's /proc
  // directory descriptor while it is being closed, and each other's new pairs.
  static std::mutex scanning;
  std::lock_guard<std::mutex> lock(scanning);
  const std::vector<int> before = OpenFds();
  CURLM* multi = curl_multi_init();
  if (multi == nullptr || before.empty()) return multi;
  for (int fd : OpenFds()) {
    if (std::binary_search(before.begin(), before.end(), fd)) continue;
    // A socket, as /proc names it ("socket:[inode]"). Read by path, not by fstat on the fd: the
    // fd may be another thread's, made just now (ThreadSanitizer counts an fstat of it as a race
    // with its creation), and only curl's socket pair is ours to mark.
    char target[32] = {0};
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(path.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string_view(target, static_cast<size_t>(n)).rfind("socket:[", 0) != 0) continue;
    const int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return multi;
}

}  // namespace dlock::http
