// HTTP over libcurl, the async half: transfers on the client's loop (one curl multi handle,
// multi_on_loop.h), many in flight at once over kept-alive connections (heartbeat renewals,
// async calls, watches). Two kinds:
//   Start   a request whose answer comes whole, bounded as the blocking client's are;
//   Stream  a response whose body is handed over piece by piece as it arrives, for as long as
//           the server keeps it open (etcd's watch: newline-delimited JSON).
// Loop thread only. Every callback runs on the loop thread, never inside the call that started
// the transfer and never inside a curl callback: a callback may Start, Stream, Cancel (its own
// stream too) and Shutdown.
//
// A watch, as etcd's backend holds one:
//   watch_ = client.Stream(request, Millis(idle_ms),
//       [this](long status, std::string_view chunk) { lines_.append(chunk); /* parse whole lines */ },
//       [this](const Status& error, Response) { /* ended: reconnect unless CANCELLED */ });
//   ...
//   client.Cancel(watch_);  // its done has run when this returns
#ifndef DLOCK_HTTP_ASYNC_CLIENT_H_
#define DLOCK_HTTP_ASYNC_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/connection_count.h"
#include "core/status.h"
#include "http/easy_transfer.h"
#include "http/multi_on_loop.h"
#include "http/request.h"
#include "loop/event_loop.h"

namespace dlock::http {

class AsyncClient {
 public:
  // Exactly once per transfer. error is DLOCK_EIO when no whole HTTP answer came
  // (response.maybe_sent says whether the server may have acted on the request).
  using Done = std::function<void(const Status& error, Response response)>;
  // A piece of a streamed body, as it arrived; status is the answer's HTTP status.
  using OnChunk = std::function<void(long status, std::string_view chunk)>;
  using StreamId = uint64_t;  // 0 is never a stream's

  // connections: counts the sockets its transfers open (EasyTransfer); null counts nothing.
  explicit AsyncClient(EventLoop* loop, std::shared_ptr<ConnectionCount> connections = nullptr);
  ~AsyncClient() { Shutdown("client closed"); }
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  // Sends request; done gets the whole answer.
  void Start(const Request& request, Done done);

  // Sends request and hands the answer's body to on_chunk as it arrives: one call per pass of
  // the loop that read some of it. done then runs once: Ok with the HTTP status (and an empty
  // body) when the response ended; EIO when it failed or fell silent; CANCELLED inside Cancel.
  //
  // Bounds, chosen for a response that lives as long as a watch does: request.timeout_ms and
  // request.deadline do not apply (a watch ends when its owner cancels it), connect_timeout_ms
  // does, and idle_timeout ends the stream with EIO when nothing of the body came for that long,
  // from the start and between chunks. That notices a server or a path that died without a
  // word, at the cost of asking the server to speak at least that often (etcd: progress
  // notifications); 0 = no idle limit. Nothing is kept here beyond what one pass of the loop
  // read (under the 16 MiB cap of a whole answer), so the caller bounds what it keeps (a
  // partial line). Returns 0 when the stream cannot start; done then fails, later.
  StreamId Stream(const Request& request, Millis idle_timeout, OnChunk on_chunk, Done done);
  // Ends a stream: its done runs before Cancel returns, with CANCELLED, and on_chunk never
  // again. Does nothing for a stream that has ended already.
  void Cancel(StreamId id);

  // Fails every transfer in flight with EIO(why), closes the connections; later calls fail.
  void Shutdown(const std::string& why);
  size_t in_flight() const { return active_.size(); }
  // In flight, streams left out (a watch lasts until cancelled).
  size_t requests_in_flight() const { return active_.size() - streams_.size(); }

 private:
  struct Transfer {
    std::unique_ptr<EasyTransfer> easy;
    Done done;
    // Streams only. Shared so that a chunk's call survives its own stream's end.
    StreamId id = 0;
    std::shared_ptr<OnChunk> on_chunk;
    Millis idle_timeout{0};  // 0: none
    TimePoint last_data;     // when the stream started, then when its last chunk came
  };

  // Adds transfer to the multi; nullptr when it cannot run (done then fails, later).
  Transfer* Launch(const Request& request, Bound bound, Done done);
  // After each step of curl's: streams' new data first, then the transfers that ended.
  void AfterStep();
  void DeliverChunks();
  void FinishCompleted();
  // Ends the streams silent for their idle timeout; then ArmIdleCheck.
  void CheckIdle();
  // Sets the one idle timer for the stream that will fall silent first.
  void ArmIdleCheck();
  // Takes a stream out of the multi and ends it with error.
  void EndStream(StreamId id, const Status& error);
  void Recycle(std::unique_ptr<EasyTransfer> easy);

  EventLoop* loop_;
  // Before driver_: the multi's cached connections are counted out when it closes, last.
  const std::shared_ptr<ConnectionCount> connections_;
  MultiOnLoop driver_;
  Timer idle_check_;
  bool shut_down_ = false;
  std::string shutdown_reason_;
  std::unordered_map<CURL*, Transfer> active_;
  std::unordered_map<StreamId, CURL*> streams_;
  StreamId last_stream_id_ = 0;
  std::vector<std::unique_ptr<EasyTransfer>> idle_;
};

}  // namespace dlock::http

#endif  // DLOCK_HTTP_ASYNC_CLIENT_H_
