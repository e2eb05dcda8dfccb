// postgres://[user[:password]@]host[:port][,host[:port]...]/DATABASE[?prefix=&connect_timeout_ms=
//     &timeout_ms=&table=&unlogged=1&target_session_attrs=&tls=1&ca=&cert=&key=&sni=&tls_verify=0]
// (postgresql:// too): the servers of one PostgreSQL deployment, tried in order as libpq's
// multi-host form tries them (port 5432 unless given), and the database holding the lock table.
#ifndef DLOCK_POSTGRES_POSTGRES_CONFIG_H_
#define DLOCK_POSTGRES_POSTGRES_CONFIG_H_

#include <string>
#include <utility>
#include <vector>

#include "core/secret.h"
#include "core/status.h"
#include "core/url.h"

namespace dlock::postgres {

inline constexpr int kDefaultPort = 5432;
inline constexpr size_t kMaxHosts = 16;
inline constexpr char kDefaultTable[] = "dlock_locks";
// PostgreSQL's identifiers are at most NAMEDATALEN - 1 = 63 bytes, and the table's functions are
// named after it (table + "_acquire": schema.sql).
inline constexpr size_t kMaxTableBytes = 48;

struct PostgresConfig {
  std::vector<HostPort> hosts;
  std::string database;
  std::string user;  // "" = libpq's default (the OS user)
  Secret password;   // empty = none (libpq may still find one in ~/.pgpass)
  CommonParams params;
  TlsParams tls;
  std::string table = kDefaultTable;  // unquoted: quoted with PQescapeIdentifier when used
  bool unlogged = false;
  std::string target_session_attrs;  // "" = libpq's default (any)

  // "postgres 127.0.0.1:5432,127.0.0.1:5433/app": how errors name the deployment (never the
  // user's password).
  std::string Describe() const;
  // libpq's connection keywords and values (PQconnectStartParams), the password among them.
  // libpq bounds nothing in ms: the connect and every call are bounded by dlock's own timers.
  std::vector<std::pair<std::string, std::string>> ConnectParams() const;
};

// Reads a postgres:// or postgresql:// URL. Errors never show a secret of the URL (UrlError).
Status ParsePostgresUrl(const Url& url, PostgresConfig* out);

}  // namespace dlock::postgres

#endif  // DLOCK_POSTGRES_POSTGRES_CONFIG_H_
