// Nothing libcurl opens for dlock leaks into child processes: after blocking and async requests
// (kept-alive connections, each multi handle's wake-up pair, a name looked up by the threaded
// resolver), every descriptor the requests left open is close-on-exec. Seen as a child would:
// /proc/self/fd and fcntl(F_GETFD). Only descriptors opened after the test started count: the
// runner may hand the test inherited ones.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "http/async_client.h"
#include "http/blocking_client.h"
#include "http_test_util.h"
#include "loop/event_loop.h"

namespace dlock::http {
namespace {

using dlock_test::Echo;
using dlock_test::FakeHttpServer;

std::vector<int> ProcessFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && std::atoi(e->d_name) != dirfd(dir)) {
      fds.push_back(std::atoi(e->d_name));
    }
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

// The descriptors opened since before, with what they are, that an exec would keep.
std::vector<std::string> InheritableSince(const std::vector<int>& before) {
  std::vector<std::string> leaks;
  for (int fd : ProcessFds()) {
    if (std::binary_search(before.begin(), before.end(), fd)) continue;
    const int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) != 0) continue;
    char target[256] = {0};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    leaks.push_back(std::to_string(fd) + " -> " + (n > 0 ? std::string(target, n) : "?"));
  }
  return leaks;
}

std::string Join(const std::vector<std::string>& v) {
  std::string all;
  for (const auto& s : v) all += (all.empty() ? "" : ", ") + s;
  return all;
}

TEST(HttpCloexecTest, BlockingAndAsyncRequestsLeaveOnlyCloseOnExecDescriptors) {
  const std::vector<int> before = ProcessFds();
  ASSERT_FALSE(before.empty()) << "no /proc/self/fd";
  FakeHttpServer server(Echo);
  const std::string port = server.url().substr(server.url().rfind(':') + 1);

  BlockingClient blocking;  // kept alive: its pooled handle keeps its connection and multi
  for (const std::string& host : {std::string("127.0.0.1"), std::string("localhost")}) {
    Request request;
    request.method = "POST";
    request.url = "http://" + host + ":" + port + "/v3/kv/range";
    request.body = "{}";
    Response response;
    Status s = blocking.Perform(request, &response);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(response.status, 201);
  }

  std::unique_ptr<EventLoop> loop;
  ASSERT_TRUE(EventLoop::Start(&loop).ok());
  std::unique_ptr<AsyncClient> async;
  loop->RunSync([&] { async = std::make_unique<AsyncClient>(loop.get()); });
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  Request request;
  request.method = "POST";
  request.url = server.url() + "/v3/kv/put";
  request.body = "{}";
  loop->RunSync([&] {
    async->Start(request, [&](const Status& error, Response response) {
      EXPECT_TRUE(error.ok()) << error.message();
      EXPECT_EQ(response.status, 201);
      std::lock_guard<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
    });
  });
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done == 1; }));
  }
  // Both clients still hold their connections and multi handles here.
  const std::vector<std::string> leaks = InheritableSince(before);
  EXPECT_TRUE(leaks.empty()) << "a child process would inherit: " << Join(leaks);

  loop->RunSync([&] { async.reset(); });
  loop->Stop();
}

}  // namespace
}  // namespace dlock::http
