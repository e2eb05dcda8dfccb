// A byte stream on the loop: TCP, a unix socket, or TLS (OpenSSL over the socket), connected to
// the first of its addresses that answers, all within one deadline. Writes made in one loop turn
// leave together. It only connects, writes and reads: its user parses what arrives and puts
// failures into words (redis/stream_connection.h). It needs of the loop only what any loop has
// (loop/fd_watch.h: readiness of its socket, and a call at the end of the turn). Loop thread only.
#ifndef DLOCK_LOOP_STREAM_H_
#define DLOCK_LOOP_STREAM_H_

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/clock.h"
#include "loop/fd_watch.h"  // and the loop, TurnEnd

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
  // Queues bytes; false only out of memory. Before the connection is up they wait, and leave
  // once it is.
  bool Write(const char* data, size_t len);
  // Closes now, no callback. Connect() may follow.
  void Close();

  bool open() const { return fd_ >= 0; }
  bool connected() const { return state_ == State::kConnected; }
  bool tls() const { return static_cast<bool>(tls_); }
  // Counts connections started: a caller holding a number knows whether it is still current.
  uint64_t generation() const { return generation_; }

 private:
  enum class State { kClosed, kConnecting, kHandshaking, kConnected };

  bool ConnectNext(std::string* why);
  static void OnReady(void* arg, bool readable, bool writable);
  void OnConnectDone(bool writable);
  void Handshake();
  void BecomeConnected();
  void OnIo(bool readable, bool writable);
  bool ReadPlain(uint64_t generation);
  bool ReadTls(uint64_t generation);
  void Flush();
  bool Send(StreamFailure* failure);
  bool SendPlain(StreamFailure* failure);
  bool SendTls(StreamFailure* failure);
  void Sent();
  void UpdateWatch();
  StreamFailure TlsFailure(int err, int ret, int error_number);  // drains OpenSSL's errors
  StreamFailure SocketFailure(int error_number, bool eof) const;
  void Lose(const StreamFailure& failure);  // connecting: the next address; else closes
  bool Current(uint64_t generation) const { return generation_ == generation && fd_ >= 0; }

  EventLoop* loop_;
  Handler* handler_;
  NewTls tls_;
  int fd_ = -1;
  SSL* ssl_ = nullptr;  // ours: freed on Close()
  std::unique_ptr<FdWatch> watch_;
  std::unique_ptr<TurnEnd> flush_;  // sends outgoing_ at the end of the loop turn
  State state_ = State::kClosed;
  bool flush_scheduled_ = false;
  bool watching_read_ = false;
  bool watching_write_ = false;
  // The kernel (or TLS) took part of outgoing_: the rest leaves when the socket is writable.
  bool write_blocked_ = false;
  bool tls_write_wants_read_ = false;  // SSL_write waits for the socket to be readable
  bool tls_read_wants_write_ = false;  // SSL_read waits for it to be writable
  bool handshake_wants_write_ = false;
  int connect_error_ = 0;  // connect() failed at once: told once the socket says so
  // A send at the end of a turn failed: told from the socket's next readiness (the handler is
  // never called from the end-of-turn call).
  bool send_failed_ = false;
  StreamFailure send_failure_;
  std::string outgoing_;  // bytes written and not sent yet, from outgoing_[sent_]
  size_t sent_ = 0;
  uint64_t generation_ = 0;
  std::vector<StreamAddress> addresses_;
  size_t next_address_ = 0;
  TimePoint deadline_{};
};

}  // namespace dlock

#endif  // DLOCK_LOOP_STREAM_H_
