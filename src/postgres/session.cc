#include "postgres/session.h"

#include <libpq-fe.h>

#include <string_view>

#include "core/server_text.h"

namespace dlock::postgres {
namespace {

std::string Trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// SQLSTATE classes that mean the connection, not the statement, failed (08: connection
// exception; 57P: the server shuts down or cannot connect now), and those that mean the
// credentials were refused (28).
bool ConnectionClass(std::string_view state) { return state.substr(0, 2) == "08" || state.substr(0, 3) == "57P"; }
bool AuthClass(std::string_view state) { return state.substr(0, 2) == "28"; }

}  // namespace

PGconn* StartConnecting(const PostgresConfig& config) {
  const std::vector<std::pair<std::string, std::string>> params = config.ConnectParams();
  std::vector<const char*> keys, values;
  for (const auto& [k, v] : params) {
    keys.push_back(k.c_str());
    values.push_back(v.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn = PQconnectStartParams(keys.data(), values.data(), 0);
  // libpq prints a server's notices (e.g. dlock prepare's "already exists, skipping") to
  // stderr unless told otherwise: a library's callers' stderr is not ours to write to.
  if (conn != nullptr) PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  return conn;
}

std::string PreparedName(const std::string& sql) {
  uint64_t hash = 14695981039346656037ull;
  for (unsigned char c : sql) hash = (hash ^ c) * 1099511628211ull;
  static const char kHex[] = "0123456789abcdef";
  std::string name = "dlock_";
  for (int shift = 60; shift >= 0; shift -= 4) name += kHex[(hash >> shift) & 0xf];
  return name;
}

void ReadResult(PGresult* result, const std::string& where, Answer* answer, Status* error) {
  const ExecStatusType status = PQresultStatus(result);
  if (status == PGRES_TUPLES_OK) {
    const int rows = PQntuples(result), cols = PQnfields(result);
    for (int r = 0; r < rows; ++r) {
      Row row;
      for (int c = 0; c < cols; ++c) {
        if (PQgetisnull(result, r, c)) {
          row.emplace_back(std::nullopt);
        } else {
          row.emplace_back(std::string(PQgetvalue(result, r, c), static_cast<size_t>(PQgetlength(result, r, c))));
        }
      }
      answer->rows.push_back(std::move(row));
    }
    return;
  }
  if (status == PGRES_COMMAND_OK || !error->ok()) return;
  const char* field = PQresultErrorField(result, PG_DIAG_SQLSTATE);
  const std::string state = field != nullptr ? field : "";
  const std::string message = where + ": " + ServerText(Trimmed(PQresultErrorMessage(result)));
  answer->sqlstate = state;
  *error = AuthClass(state) ? Status::AuthError(message)
           : ConnectionClass(state) ? Status::IoError(message)
                                    : Status::BackendError(message);
}

Status LibpqConnectionError(const char* libpq_message, const std::string& where, const std::string& what) {
  const std::string detail = Trimmed(libpq_message != nullptr ? libpq_message : "out of memory");
  const std::string message = where + ": " + what + ": " + ServerText(detail);
  if (detail.find("authentication failed") != std::string::npos || detail.find("password") != std::string::npos) {
    return Status::AuthError(message);
  }
  return Status::IoError(message);
}

}  // namespace dlock::postgres
