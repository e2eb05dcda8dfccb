#include "support/fake_http_server.h"
#include "support/harness_util.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace dlock_test {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool WriteAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

// The status line and headers of response, with framing ("Content-Length: 12") last.
std::string Head(const FakeResponse& response, const std::string& framing) {
  return "HTTP/1.1 " + std::to_string(response.status) + " " + Reason(response.status) +
         "\r\nContent-Type: " + response.content_type + "\r\n" + framing +
         "\r\nConnection: keep-alive\r\n\r\n";
}


}  // namespace

void ChunkFeed::Push(std::string chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  chunks_.push_back(std::move(chunk));
  cv_.notify_all();
}

void ChunkFeed::End() {
  std::lock_guard<std::mutex> lock(mu_);
  ended_ = true;
  cv_.notify_all();
}

bool ChunkFeed::Next(const std::atomic<bool>& stopping, std::string* chunk) {
  std::unique_lock<std::mutex> lock(mu_);
  while (chunks_.empty() && !ended_) {
    if (stopping) return false;
    cv_.wait_for(lock, std::chrono::milliseconds(20));  // and look at stopping again
  }
  if (chunks_.empty()) return false;
  *chunk = std::move(chunks_.front());
  chunks_.pop_front();
  return true;
}

FakeHttpServer::FakeHttpServer(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      listen(listen_fd_, 64) != 0 ||
      getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return;
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
}

FakeHttpServer::~FakeHttpServer() {
  stopping_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int fd : connections_) shutdown(fd, SHUT_RDWR);
  }
  for (auto& t : workers_) t.join();
  if (listen_fd_ >= 0) close(listen_fd_);
}

void FakeHttpServer::AcceptLoop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard<std::mutex> lock(mu_);
    connections_.push_back(fd);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeHttpServer::Serve(int fd) {
  std::string buffer;
  char chunk[8192];
  while (!stopping_) {
    size_t header_end;
    while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) goto done;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    {
      FakeRequest request;
      std::string head = buffer.substr(0, header_end);
      size_t line_end = head.find("\r\n");
      std::string first = head.substr(0, line_end);
      size_t sp1 = first.find(' '), sp2 = first.rfind(' ');
      request.method = first.substr(0, sp1);
      request.path = first.substr(sp1 + 1, sp2 - sp1 - 1);
      size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
      while (pos < head.size()) {
        size_t end = head.find("\r\n", pos);
        if (end == std::string::npos) end = head.size();
        std::string line = head.substr(pos, end - pos);
        size_t colon = line.find(':');
        if (colon != std::string::npos) {
          request.headers[Lower(Trim(line.substr(0, colon)))] = Trim(line.substr(colon + 1));
        }
        pos = end + 2;
      }
      size_t length = 0;
      if (auto it = request.headers.find("content-length"); it != request.headers.end()) {
        length = std::stoul(it->second);
      }
      buffer.erase(0, header_end + 4);
      while (buffer.size() < length) {
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) goto done;
        buffer.append(chunk, static_cast<size_t>(n));
      }
      request.body = buffer.substr(0, length);
      buffer.erase(0, length);
      requests_++;
      FakeResponse response = handler_(request);
      if (response.feed != nullptr) {
        if (!SendFed(fd, response)) break;
        continue;
      }
      std::string out = Head(response, "Content-Length: " + std::to_string(response.body.size())) +
                        response.body;
      if (!WriteAll(fd, out)) break;
    }
  }
done:
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (*it == fd) {
      connections_.erase(it);
      break;
    }
  }
  close(fd);
}

bool FakeHttpServer::SendFed(int fd, const FakeResponse& response) {
  if (!WriteAll(fd, Head(response, "Transfer-Encoding: chunked"))) return false;
  std::string chunk;
  while (response.feed->Next(stopping_, &chunk)) {
    if (chunk.empty()) continue;  // an empty chunk would end the body
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
    if (!WriteAll(fd, size + chunk + "\r\n")) return false;
  }
  return !stopping_ && WriteAll(fd, "0\r\n\r\n");
}

FakeResponse ForwardTo(const std::string& base_url, const FakeRequest& request) {
  FakeResponse out;
  CURL* curl = curl_easy_init();
  std::string url = base_url + request.path;
  curl_slist* headers = nullptr;
  for (const auto& [name, value] : request.headers) {
    if (name == "host" || name == "content-length" || name == "expect") continue;
    headers = curl_slist_append(headers, (name + ": " + value).c_str());
  }
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (!request.body.empty() || request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &AppendToString);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &out.body);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROXY, "");
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  long status = 502;
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  out.status = static_cast<int>(status);
  out.content_type = "application/x-amz-json-1.0";
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return out;
}

}  // namespace dlock_test
