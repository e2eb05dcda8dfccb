// A byte stream on the loop (a libevent bufferevent): TCP, a unix socket, or TLS through
// bufferevent_openssl, connected to the first of its addresses that answers, all within one
// deadline. Writes made in one loop turn leave together. It only connects, writes and reads:
// its user parses what arrives and puts failures into words (redis/stream_connection.h).
// Loop thread only.
#ifndef DLOCK_LOOP_STREAM_H_
#define DLOCK_LOOP_STREAM_H_

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "loop/event_loop.h"

struct bufferevent;

namespace dlock {

struct StreamAddress {
  sockaddr_storage addr;
  socklen_t len;
};

// Why a stream failed: what its user needs to say so, read before anything is freed.
struct StreamFailure {
  bool was_connected = false;      // it failed once up (else while connecting)
  bool out_of_memory = false;      // writing needed memory there was none of
  bool eof = false;                // the peer closed it (else an error)
  int error_number = 0;            // errno at the failure, 0 when none
  unsigned long tls_error = 0;     // OpenSSL's last error on it, 0 when none (or plain)
  long tls_verify_result = 0;      // SSL_get_verify_result, X509_V_OK (0) when none (or plain)
};

class Stream {
 public:
  // Called on the loop thread. Each may Close() the stream or Connect() it anew.
  class Handler {
   public:
    virtual ~Handler() = default;
    // Connected (the TLS handshake done).
    virtual void OnStreamConnected() = 0;
    // Bytes read; more may follow in the same turn unless the handler closed the stream.
    virtual void OnStreamData(const char* data, size_t len) = 0;
    // Connecting to one address failed and the next is tried when this returns
    // (trying_next), or the stream failed and is closed.
    virtual void OnStreamFailed(const StreamFailure& failure, bool trying_next) = 0;
  };
  // Makes the TLS session for a new socket (attached to it, not owning it); null with *why
  // when it cannot. An empty function: plain.
  using NewTls = std::function<SSL*(int fd, std::string* why)>;

  Stream(EventLoop* loop, Handler* handler) : loop_(loop), handler_(handler) {}
  ~Stream() { Close(); }  // no callback runs after
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  // Starts connecting to each address in turn until deadline. False, with *why, when none
  // could even start; else the outcome arrives through the handler.
  bool Connect(std::vector<StreamAddress> addresses, TimePoint deadline, NewTls tls,
               std::string* why);
  // Queues bytes; false only out of memory. Before the connection is up they wait in the
  // bufferevent and leave once it is.
  bool Write(const char* data, size_t len);
  // Closes now, no callback. Connect() may follow.
  void Close();

  bool open() const { return bev_ != nullptr; }
  bool connected() const { return connected_; }
  bool tls() const { return static_cast<bool>(tls_); }
  // Counts connections started: a caller holding a number knows whether it is still current.
  uint64_t generation() const { return generation_; }

 private:
  bool ConnectNext(std::string* why);
  void Flush();
  StreamFailure Failure(short events);  // drains OpenSSL's errors on it
  void Fail(const StreamFailure& failure);
  static void OnFlush(int fd, short events, void* arg);
  static void OnRead(bufferevent* bev, void* arg);
  static void OnEvent(bufferevent* bev, short events, void* arg);

  EventLoop* loop_;
  Handler* handler_;
  NewTls tls_;
  bufferevent* bev_ = nullptr;
  event* flush_ = nullptr;  // sends outgoing_ at the end of the loop turn (plain sockets)
  std::string outgoing_;    // bytes written this turn, not sent yet
  bool connected_ = false;
  uint64_t generation_ = 0;
  std::vector<StreamAddress> addresses_;
  size_t next_address_ = 0;
  TimePoint deadline_{};
};

}  // namespace dlock

#endif  // DLOCK_LOOP_STREAM_H_
