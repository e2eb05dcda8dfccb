// The dlock_connections gauge on every backend, in every style: after a client has worked it
// has connections open, and on one Redis server (where the server can list them) the gauge is
// what the server lists for the client, also after the server dropped them all and the client
// made its next calls: every connection counted in once and out once, whatever ended it.
#include <string>

#include "conformance/conformance.h"

namespace dlock_test {
namespace {

using namespace std::chrono_literals;

// The gauge through the public API, with its type; -1 when the family is absent.
double Gauge(dlock_client* c, std::string* type = nullptr) {
  dlock_metrics* m = nullptr;
  EXPECT_EQ(dlock_client_metrics(c, &m), DLOCK_OK) << dlock_last_error();
  double value = -1;
  for (size_t k = 0; m != nullptr && k < dlock_metrics_count(m); ++k) {
    if (std::string(dlock_metrics_name(m, k)) != "dlock_connections") continue;
    value = dlock_metrics_value(m, k);
    if (type != nullptr) *type = dlock_metrics_type(m, k);
  }
  dlock_metrics_free(m);
  return value;
}

std::string Text(dlock_client* c) {
  size_t needed = 0;
  EXPECT_EQ(dlock_client_metrics_text(c, nullptr, 0, &needed), DLOCK_OK) << dlock_last_error();
  std::string text(needed + 256, '\0');  // room for what may change meanwhile
  EXPECT_EQ(dlock_client_metrics_text(c, text.data(), text.size(), &needed), DLOCK_OK) << dlock_last_error();
  text.resize(needed);
  return text;
}

class Connections : public StyleTest {};

TEST_P(Connections, TheGaugeIsWhatTheServerListsForTheClient) {
  // What the server lists before the client opens: the rest of the suite's (none, normally).
  const int before = server().ClientConnections();
  auto c = Open();
  const std::string name = Name("connections");
  // Calls of every sort, so that every kind of connection the backend has is made: blocking
  // or async lock calls, an inspection (blocking), and a wait that subscribes where the
  // backend listens for releases.
  dlock_lock* l = nullptr;
  ASSERT_EQ(c->Acquire(name.c_str(), nullptr, &l), DLOCK_OK) << c->last_error();
  ASSERT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  EXPECT_EQ(Inspect(c->get(), name).status, DLOCK_OK);
  {
    HeldElsewhere other(url(), name);
    Options o;
    o.wait(200).retry(20, 50);
    EXPECT_EQ(c->Acquire(name.c_str(), o.get(), &l), DLOCK_NOT_ACQUIRED) << c->last_error();
  }
  std::string type;
  EXPECT_GE(Gauge(c->get(), &type), 1);
  EXPECT_EQ(type, "gauge");
  const std::string text = Text(c->get());
  EXPECT_NE(text.find("# HELP dlock_connections Connections to the backend's servers this client has "
                      "open now.\n# TYPE dlock_connections gauge\ndlock_connections "),
            std::string::npos)
      << text;
  if (before < 0) return;  // the deployment cannot list its clients in one place

  // The server's list and the gauge agree once the client is idle (HeldElsewhere's client is
  // closed; the server may take a moment to see its connections go).
  int listed = -1;
  double counted = -1;
  auto agree = [&](int others) {
    return WaitFor([&] {
      c->Pass(5ms);  // an evbase client works only while its loop runs
      listed = server().ClientConnections();
      counted = Gauge(c->get());
      return listed >= 0 && listed - others == counted;
    }, 20s);
  };
  EXPECT_TRUE(agree(before)) << "the server lists " << listed << " connections (" << before
                             << " before the client opened), the gauge says " << counted;

  // The server drops every connection: the loop's are seen to go at once, the pooled blocking
  // ones on their next use. One more call in the style, and one blocking (an inspection), and
  // the gauge settles on what the server lists again.
  ASSERT_TRUE(server().DropClientConnections());
  // A call may meet a loop connection before the loop saw it dropped, and fail (EIO) once.
  dlock_status acquired = DLOCK_EINTERNAL;
  for (int i = 0; i < 3 && acquired != DLOCK_OK; ++i) acquired = c->Acquire(name.c_str(), nullptr, &l);
  ASSERT_EQ(acquired, DLOCK_OK) << c->last_error();
  ASSERT_EQ(c->Release(l), DLOCK_OK) << c->last_error();
  EXPECT_EQ(Inspect(c->get(), name).status, DLOCK_OK);
  EXPECT_TRUE(agree(0)) << "after the server dropped them, it lists " << listed
                        << " connections, the gauge says " << counted;
  EXPECT_GE(counted, 1);
}

INSTANTIATE_TEST_SUITE_P(Conformance, Connections,
                         ::testing::Combine(::testing::ValuesIn(AllBackends()), AllStyles()),
                         StyleTestName);

}  // namespace
}  // namespace dlock_test
