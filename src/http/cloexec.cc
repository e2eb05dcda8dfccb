#include "http/cloexec.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
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
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    const int flags = fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  return multi;
}

}  // namespace dlock::http
