// loop/stream.h against peers made here (a TCP or unix socket, and a TLS server on OpenSSL): what
// the handler is told and in which order, writes made before the connection is up, a write too
// big for the kernel's buffer, failures while connecting (the next address is tried) and once
// up (a TLS close without close_notify is an end of stream), and a handler that closes or
// reconnects the stream from inside its callbacks.
#include "loop/stream.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/tls_certs.h"

namespace {

using namespace std::chrono_literals;
using dlock::EventLoop;
using dlock::Stream;
using dlock::StreamAddress;
using dlock::StreamFailure;

constexpr auto kStreamLimit = 10000ms;  // for what should happen within milliseconds

// What the handler was told, in order; hooks run on the loop thread inside the callbacks.
class Recorder : public Stream::Handler {
 public:
  struct Failed {
    StreamFailure failure;
    bool trying_next;
  };

  void OnStreamConnected() override {
    Note([&] { log_.push_back("connected"); });
    if (on_connected) on_connected();
  }
  void OnStreamData(const char* data, size_t len) override {
    Note([&] {
      if (log_.empty() || log_.back() != "data") log_.push_back("data");
      data_.append(data, len);
    });
    if (on_data) on_data();
  }
  void OnStreamFailed(const StreamFailure& failure, bool trying_next) override {
    Note([&] {
      log_.push_back(trying_next ? "failed, trying next" : "failed");
      failed_.push_back({failure, trying_next});
    });
    if (on_failed) on_failed();
  }

  // Waits until pred() (under the lock) holds; false after the limit.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kStreamLimit, [&] { return pred(); });
  }
  bool WaitForLog(const std::string& entry, int times = 1) {
    return WaitFor([&] {
      int n = 0;
      for (const auto& e : log_) n += e == entry;
      return n >= times;
    });
  }
  bool WaitForData(size_t len) {
    return WaitFor([&] { return data_.size() >= len; });
  }
  std::vector<std::string> log() {
    std::lock_guard<std::mutex> lock(mu_);
    return log_;
  }
  std::string data() {
    std::lock_guard<std::mutex> lock(mu_);
    return data_;
  }
  std::vector<Failed> failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

  std::function<void()> on_connected;
  std::function<void()> on_data;
  std::function<void()> on_failed;

 private:
  template <typename Fn>
  void Note(Fn fn) {
    std::lock_guard<std::mutex> lock(mu_);
    fn();
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> log_;
  std::string data_;
  std::vector<Failed> failed_;
};

// A listening loopback TCP socket (or one only bound: it refuses connections).
class Listener {
 public:
  explicit Listener(bool listening = true) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
    if (listening) {
      EXPECT_EQ(listen(fd_, 8), 0);
    }
    socklen_t len = sizeof address_.addr;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&address_.addr), &len);
    address_.len = len;
  }
  ~Listener() { close(fd_); }
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  const StreamAddress& address() const { return address_; }
  // The next connection, or -1 after the limit.
  int Accept() {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(kStreamLimit.count())) != 1) return -1;
    const int fd = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) {
      timeval tv{static_cast<time_t>(kStreamLimit.count() / 1000), 0};  // a stuck test fails
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return fd;
  }

 private:
  int fd_ = -1;
  StreamAddress address_{};
};

// Reads exactly len bytes (less when the peer closes or the limit passes).
std::string ReadExactly(int fd, size_t len) {
  std::string out;
  char buf[65536];
  while (out.size() < len) {
    const ssize_t n = read(fd, buf, std::min(sizeof buf, len - out.size()));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void WriteAll(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = send(fd, s.data() + done, s.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// A pattern that shows a lost, doubled or reordered piece.
std::string Pattern(size_t len, char salt) {
  std::string s(len, '\0');
  for (size_t i = 0; i < len; ++i) s[i] = static_cast<char>('a' + (i / 7 + salt) % 26);
  return s;
}

// CPU time of the calling thread.
std::chrono::microseconds ThreadCpu() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return std::chrono::seconds(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         std::chrono::microseconds(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(EventLoop::Start(&loop_).ok()); }
  void TearDown() override {
    loop_->RunSync([this] { stream_.reset(); });
    loop_->Stop();
  }

  // Makes the stream and starts connecting, on the loop thread; writes `early` at once.
  bool Connect(std::vector<StreamAddress> addresses, Stream::NewTls tls = {},
               const std::string& early = "") {
    bool started = false;
    loop_->RunSync([&] {
      stream_ = std::make_unique<Stream>(loop_.get(), &recorder_);
      std::string why;
      started = stream_->Connect(std::move(addresses), dlock::Now() + kStreamLimit,
                                 std::move(tls), &why);
      EXPECT_TRUE(started) << why;
      if (started && !early.empty()) {
        EXPECT_TRUE(stream_->Write(early.data(), early.size()));
      }
    });
    return started;
  }
  void Write(const std::string& s) {
    loop_->RunSync([&] { EXPECT_TRUE(stream_->Write(s.data(), s.size())); });
  }
  template <typename T>
  T OnLoop(const std::function<T()>& fn) {
    T out{};
    loop_->RunSync([&] { out = fn(); });
    return out;
  }

  std::unique_ptr<EventLoop> loop_;
  Recorder recorder_;
  std::unique_ptr<Stream> stream_;  // made, used and freed on the loop thread
};

TEST_F(StreamTest, WritesBeforeTheConnectionLeaveOnceItIsUpAndThePeersCloseIsAnEof) {
  Listener listener;
  ASSERT_TRUE(Connect({listener.address()}, {}, "PING\r\n"));
  Write("ECHO x\r\n");  // still before the connection, or just after: the order holds
  const int peer = listener.Accept();
  ASSERT_GE(peer, 0);
  EXPECT_EQ(ReadExactly(peer, 14), "PING\r\nECHO x\r\n");
  ASSERT_TRUE(recorder_.WaitForLog("connected"));
  EXPECT_TRUE(OnLoop<bool>([&] { return stream_->connected() && stream_->open(); }));
  WriteAll(peer, "+PONG\r\n");
  ASSERT_TRUE(recorder_.WaitForData(7));
  EXPECT_EQ(recorder_.data(), "+PONG\r\n");
  close(peer);
  ASSERT_TRUE(recorder_.WaitForLog("failed"));
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"connected", "data", "failed"}));
  const StreamFailure f = recorder_.failed()[0].failure;
  EXPECT_TRUE(f.was_connected);
  EXPECT_TRUE(f.eof);
  EXPECT_FALSE(f.out_of_memory);
  EXPECT_EQ(f.tls_error, 0u);
  EXPECT_FALSE(OnLoop<bool>([&] { return stream_->open() || stream_->connected(); }));
}

TEST_F(StreamTest, AWriteTooBigForTheKernelArrivesWholeAndInOrderThenTheLoopIsQuiet) {
  Listener listener;
  ASSERT_TRUE(Connect({listener.address()}));
  const int peer = listener.Accept();
  ASSERT_GE(peer, 0);
  ASSERT_TRUE(recorder_.WaitForLog("connected"));
  // The peer reads nothing yet: most of the first write waits in the stream, and so does all
  // of the second, written in another turn.
  const std::string first = Pattern(8 << 20, 0);
  const std::string second = Pattern(3 << 20, 5);
  Write(first);
  std::this_thread::sleep_for(50ms);
  Write(second);
  EXPECT_EQ(ReadExactly(peer, first.size() + second.size()), first + second);
  // Everything sent: the stream no longer asks for writability, which would wake the loop
  // thread at once, every turn (a busy loop).
  std::this_thread::sleep_for(50ms);
  const auto before = OnLoop<std::chrono::microseconds>(ThreadCpu);
  std::this_thread::sleep_for(500ms);
  const auto after = OnLoop<std::chrono::microseconds>(ThreadCpu);
  EXPECT_LT(after - before, 250ms) << "the loop thread spun while idle";
  // Still a working stream.
  Write("after\r\n");
  EXPECT_EQ(ReadExactly(peer, 7), "after\r\n");
  close(peer);
}

TEST_F(StreamTest, AnAddressThatRefusesIsToldAndTheNextIsTried) {
  Listener refusing(/*listening=*/false);
  Listener listener;
  ASSERT_TRUE(Connect({refusing.address(), listener.address()}, {}, "hello"));
  const int peer = listener.Accept();
  ASSERT_GE(peer, 0);
  EXPECT_EQ(ReadExactly(peer, 5), "hello");  // the early write went to the one that answered
  ASSERT_TRUE(recorder_.WaitForLog("connected"));
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"failed, trying next", "connected"}));
  const StreamFailure f = recorder_.failed()[0].failure;
  EXPECT_FALSE(f.was_connected);
  EXPECT_FALSE(f.eof);
  EXPECT_EQ(f.error_number, ECONNREFUSED);
  close(peer);
}

TEST_F(StreamTest, AUnixSocketNobodyListensOnFailsThroughTheHandler) {
  char dir[] = "/tmp/dlock-stream-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/s";
  const int bound = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  StreamAddress a{};
  auto* un = reinterpret_cast<sockaddr_un*>(&a.addr);
  un->sun_family = AF_UNIX;
  std::memcpy(un->sun_path, path.c_str(), path.size() + 1);
  a.len = sizeof(sockaddr_un);
  ASSERT_EQ(bind(bound, reinterpret_cast<sockaddr*>(un), sizeof(sockaddr_un)), 0);
  // Refused at once by connect(): still told through the handler, later.
  ASSERT_TRUE(Connect({a}));
  ASSERT_TRUE(recorder_.WaitForLog("failed"));
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"failed"}));
  EXPECT_EQ(recorder_.failed()[0].failure.error_number, ECONNREFUSED);
  EXPECT_FALSE(recorder_.failed()[0].failure.was_connected);
  // With a listener there, it connects.
  ASSERT_EQ(listen(bound, 4), 0);
  ASSERT_TRUE(Connect({a}, {}, "x"));
  ASSERT_TRUE(recorder_.WaitForLog("connected"));
  const int peer = accept4(bound, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(peer, 0);
  EXPECT_EQ(ReadExactly(peer, 1), "x");
  close(peer);
  close(bound);
  unlink(path.c_str());
  rmdir(dir);
}

TEST_F(StreamTest, TheHandlerMayCloseOrReconnectFromInsideItsCallbacks) {
  Listener listener;
  // Closed from inside OnStreamData: nothing more is delivered, though more was there.
  recorder_.on_data = [this] { stream_->Close(); };
  ASSERT_TRUE(Connect({listener.address()}));
  int peer = listener.Accept();
  ASSERT_GE(peer, 0);
  WriteAll(peer, Pattern(256 << 10, 1));
  ASSERT_TRUE(recorder_.WaitForLog("data"));
  std::this_thread::sleep_for(50ms);
  EXPECT_LE(recorder_.data().size(), 16384u);
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"connected", "data"}));
  EXPECT_FALSE(OnLoop<bool>([&] { return stream_->open(); }));
  close(peer);
  // Reconnected from inside OnStreamFailed: the new connection carries on, with what the
  // handler wrote before it was up.
  bool reconnected = false;  // loop thread
  loop_->RunSync([&] {
    recorder_.on_data = nullptr;
    recorder_.on_failed = [&] {
      if (reconnected) return;
      reconnected = true;
      std::string why;
      EXPECT_TRUE(stream_->Connect({listener.address()}, dlock::Now() + kStreamLimit, {}, &why));
      EXPECT_TRUE(stream_->Write("again", 5));
    };
    std::string why;
    EXPECT_TRUE(stream_->Connect({listener.address()}, dlock::Now() + kStreamLimit, {}, &why));
  });
  peer = listener.Accept();
  ASSERT_GE(peer, 0);
  ASSERT_TRUE(recorder_.WaitForLog("connected", 2));
  close(peer);  // the stream fails, and the handler reconnects it
  const int second = listener.Accept();
  ASSERT_GE(second, 0);
  EXPECT_EQ(ReadExactly(second, 5), "again");
  ASSERT_TRUE(recorder_.WaitForLog("connected", 3));
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"connected", "data", "connected", "failed",
                                                       "connected"}));
  EXPECT_TRUE(OnLoop<bool>([&] { return stream_->connected(); }));
  close(second);
}

// A TLS server on one accepted connection, on its own thread.
class TlsPeer {
 public:
  TlsPeer(const dlock_test::TestCertificates& certs, Listener* listener) {
    ctx_ = SSL_CTX_new(TLS_server_method());
    EXPECT_EQ(SSL_CTX_use_certificate_chain_file(ctx_, certs.server_cert().c_str()), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx_, certs.server_key().c_str(), SSL_FILETYPE_PEM), 1);
    listener_ = listener;
  }
  ~TlsPeer() {
    if (ssl_ != nullptr) SSL_free(ssl_);
    if (fd_ >= 0) close(fd_);
    SSL_CTX_free(ctx_);
  }
  // Accepts and does the handshake; false when it failed.
  bool Accept() {
    fd_ = listener_->Accept();
    if (fd_ < 0) return false;
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    return SSL_accept(ssl_) == 1;
  }
  std::string Read(size_t len) {
    std::string out;
    char buf[65536];
    while (out.size() < len) {
      const int n = SSL_read(ssl_, buf, static_cast<int>(std::min(sizeof buf, len - out.size())));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    return out;
  }
  void Write(const std::string& s) { SSL_write(ssl_, s.data(), static_cast<int>(s.size())); }
  // Closes the socket without close_notify, as Redis does.
  void CloseDirty() {
    close(fd_);
    fd_ = -1;
  }

 private:
  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  Listener* listener_ = nullptr;
};

// The client's TLS: verifying the server against ca, as 127.0.0.1.
Stream::NewTls ClientTls(const std::string& ca) {
  std::shared_ptr<SSL_CTX> ctx(SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  EXPECT_EQ(SSL_CTX_load_verify_locations(ctx.get(), ca.c_str(), nullptr), 1);
  return [ctx](int fd, std::string* why) -> SSL* {
    SSL* ssl = SSL_new(ctx.get());
    if (ssl == nullptr) {
      *why = "SSL_new failed";
      return nullptr;
    }
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
    SSL_set_fd(ssl, fd);
    return ssl;
  };
}

class StreamTlsTest : public StreamTest {
 protected:
  void SetUp() override {
    StreamTest::SetUp();
    ASSERT_TRUE(certs_.ok());
  }
  dlock_test::TestCertificates certs_;
};

TEST_F(StreamTlsTest, ConnectsAfterTheHandshakeSendsReadsAndADirtyCloseIsAnEof) {
  Listener listener;
  TlsPeer peer(certs_, &listener);
  ASSERT_TRUE(Connect({listener.address()}, ClientTls(certs_.ca_cert()), "PING\r\n"));
  ASSERT_TRUE(peer.Accept());
  EXPECT_EQ(peer.Read(6), "PING\r\n");  // written before the handshake
  ASSERT_TRUE(recorder_.WaitForLog("connected"));
  EXPECT_TRUE(OnLoop<bool>([&] { return stream_->tls() && stream_->connected(); }));
  // A big write: TLS takes it a record at a time while the peer is slow.
  const std::string big = Pattern(4 << 20, 2);
  Write(big.substr(0, 3 << 20));
  std::this_thread::sleep_for(50ms);
  Write(big.substr(3 << 20));
  EXPECT_EQ(peer.Read(big.size()), big);
  const std::string reply = Pattern(100000, 3);  // several records
  peer.Write(reply);
  ASSERT_TRUE(recorder_.WaitForData(reply.size()));
  EXPECT_EQ(recorder_.data(), reply);
  peer.CloseDirty();
  ASSERT_TRUE(recorder_.WaitForLog("failed"));
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"connected", "data", "failed"}));
  const StreamFailure f = recorder_.failed()[0].failure;
  EXPECT_TRUE(f.was_connected);
  EXPECT_TRUE(f.eof);
  EXPECT_EQ(f.tls_error, 0u) << ERR_reason_error_string(f.tls_error);
  EXPECT_EQ(f.tls_verify_result, X509_V_OK);
}

TEST_F(StreamTlsTest, AnUntrustedServerFailsTheHandshakeWithItsVerifyResult) {
  Listener listener;
  TlsPeer peer(certs_, &listener);
  ASSERT_TRUE(Connect({listener.address()}, ClientTls(certs_.other_ca_cert()), "PING\r\n"));
  std::thread server([&] { peer.Accept(); });
  ASSERT_TRUE(recorder_.WaitForLog("failed"));
  server.join();
  EXPECT_EQ(recorder_.log(), (std::vector<std::string>{"failed"}));
  const StreamFailure f = recorder_.failed()[0].failure;
  EXPECT_FALSE(f.was_connected);
  EXPECT_NE(f.tls_verify_result, X509_V_OK);
  EXPECT_NE(f.tls_error, 0u);
}

TEST_F(StreamTlsTest, APlainServerFailsTheHandshake) {
  Listener listener;
  ASSERT_TRUE(Connect({listener.address()}, ClientTls(certs_.ca_cert())));
  const int peer = listener.Accept();
  ASSERT_GE(peer, 0);
  WriteAll(peer, "-ERR not TLS\r\n");
  ASSERT_TRUE(recorder_.WaitForLog("failed"));
  const StreamFailure f = recorder_.failed()[0].failure;
  EXPECT_FALSE(f.was_connected);
  const int reason = ERR_GET_REASON(f.tls_error);
  EXPECT_TRUE(reason == SSL_R_WRONG_VERSION_NUMBER || reason == SSL_R_PACKET_LENGTH_TOO_LONG)
      << ERR_reason_error_string(f.tls_error);
  close(peer);
}

}  // namespace
