// dlock's DynamoDB backend, one thread: uncontended acquire+release cycles per second against
// the endpoint given, and the CPU time of the same cycle's work outside the HTTP round trip
// (building the JSON, signing, parsing the answers, the protocol's logic), measured by running
// the very same protocol code against a transport that answers at once with canned replies.
//
//   dlock_ddb_bench ENDPOINT SECONDS      (credentials from the AWS chain, e.g. the environment)
//
// Prints "key value" lines for bench/dynamodb/run.
#include <dlock/dlock.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/lock_state.h"
#include "core/options.h"
#include "dynamodb/dynamodb_api.h"
#include "dynamodb/dynamodb_backend.h"
#include "dynamodb/lock_protocol.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace dlock;
using namespace dlock::dynamodb;

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Does everything a real call does except the network: serializes and signs the request
// (Api::Build, as the blocking path does), then interprets a canned HTTP answer.
class CannedTransport : public Transport {
 public:
  explicit CannedTransport(Api* api) : api_(api) {}
  void Call(const std::string& operation, const Json& body, TimePoint, Done done) override {
    std::string text;
    http::Request request;
    Status s = Transport::Serialize(body, &text);
    if (s.ok()) s = api_->Build(operation, std::move(text), true, &request);
    if (!s.ok()) {
      ApiResult failed;
      failed.status = s;
      done(std::move(failed));
      return;
    }
    http::Response response;
    response.status = 200;
    bool acquire = request.body.find("if_not_exists") != std::string::npos;
    response.body = acquire ? kAcquireAnswer : "{}";
    done(api_->Interpret(operation, Status::Ok(), response));
  }
  void After(Millis, std::function<void()> fn) override { fn(); }

 private:
  static constexpr const char* kAcquireAnswer =
      R"({"Attributes":{"owner":{"S":"0123456789abcdef0123456789abcdef"},)"
      R"("recordVersion":{"S":"fedcba9876543210fedcba9876543210"},"leaseMs":{"N":"10000"},)"
      R"("renewedAtMs":{"N":"1795360051214"},"fence":{"N":"1795360051214136"}}})";
  Api* api_;
};

// Microseconds of CPU per acquire+release outside the round trip.
double LocalWorkMicros(const std::string& endpoint, int cycles) {
  Url url;
  DynamoConfig config;
  if (!ParseUrl("dynamodb://bench_locks?region=us-east-1&endpoint=" + endpoint, &url).ok() ||
      !ParseDynamoUrl(url, &config).ok()) {
    return -1;
  }
  CredentialsChain credentials;
  Api api(config, &credentials);
  LockProtocol protocol(&api);
  CannedTransport transport(&api);
  AcquireOptions options;
  LockRequest request;
  request.name = "bench";
  request.owner_value = "0123456789abcdef0123456789abcdef";
  request.lease_ms = 10000;
  double start = CpuSeconds();
  for (int i = 0; i < cycles; ++i) {
    AcquireAttempt attempt;
    protocol.Acquire(&transport, request, [&](Status s, AcquireAttempt a) {
      if (!s.ok() || !a.acquired) std::abort();
      attempt = std::move(a);
    });
    auto lock = std::make_shared<LockState>("bench", "0123456789abcdef0123456789abcdef",
                                            attempt.fencing_token, 1, options, Now(),
                                            attempt.backend_data);
    protocol.Release(&transport, lock, [](Status s) {
      if (!s.ok()) std::abort();
    });
  }
  return (CpuSeconds() - start) * 1e6 / cycles;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: dlock_ddb_bench ENDPOINT SECONDS\n");
    return 2;
  }
  const std::string endpoint = argv[1];
  const double seconds = std::atof(argv[2]);
  const std::string url = "dynamodb://bench_locks?region=us-east-1&endpoint=" + endpoint;
  if (dlock_dynamodb_create_table(url.c_str(), 10000) != DLOCK_OK) {
    std::fprintf(stderr, "create table: %s\n", dlock_last_error());
    return 1;
  }
  dlock_client* client;
  if (dlock_client_open(url.c_str(), &client) != DLOCK_OK) {
    std::fprintf(stderr, "open: %s\n", dlock_last_error());
    return 1;
  }
  auto cycle = [&] {
    dlock_lock* l;
    if (dlock_acquire(client, "bench", nullptr, &l) != DLOCK_OK || dlock_release(l) != DLOCK_OK) {
      std::fprintf(stderr, "cycle: %s\n", dlock_last_error());
      std::exit(1);
    }
  };
  for (int i = 0; i < 200; ++i) cycle();  // warm up: connections, credentials, caches
  long cycles = 0;
  double cpu_start = CpuSeconds();
  auto start = Clock::now();
  auto until = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    cycle();
    ++cycles;
  }
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  double cpu = CpuSeconds() - cpu_start;
  dlock_client_close(client);

  double local_us = LocalWorkMicros(endpoint, 20000);
  double cycle_us = elapsed * 1e6 / cycles;
  std::printf("cycles %ld\n", cycles);
  std::printf("cycles_per_sec %.0f\n", cycles / elapsed);
  std::printf("cycle_us %.1f\n", cycle_us);
  std::printf("local_work_us %.2f\n", local_us);
  std::printf("local_work_share_pct %.2f\n", 100.0 * local_us / cycle_us);
  std::printf("process_cpu_us_per_cycle %.1f\n", cpu * 1e6 / cycles);
  return 0;
}
