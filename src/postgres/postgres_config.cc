#include "postgres/postgres_config.h"

#include <algorithm>

namespace dlock::postgres {
namespace {

std::string HostText(const std::string& host) {
  return host.find(':') != std::string::npos ? "[" + host + "]" : host;
}

Status ReadPostgresUrl(const Url& url, PostgresConfig* out) {
  *out = PostgresConfig();
  if (url.hosts.empty()) return Status::InvalidArgument(url.scheme + ":// needs at least one host[:port]");
  if (url.hosts.size() > kMaxHosts) {
    return Status::InvalidArgument(url.scheme + ":// names " + std::to_string(url.hosts.size()) +
                                   " hosts; at most " + std::to_string(kMaxHosts));
  }
  for (HostPort hp : url.hosts) {
    if (hp.host.empty()) return Status::InvalidArgument(url.scheme + ":// has an empty host");
    // libpq splits its host and port lists on commas.
    if (hp.host.find(',') != std::string::npos) return Status::InvalidArgument(url.scheme + ":// has a host with ','");
    if (hp.port == 0) hp.port = kDefaultPort;
    out->hosts.push_back(hp);
  }
  if (url.path.size() < 2) {
    return Status::InvalidArgument(url.scheme + "://: name the database in the path (" + url.scheme +
                                   "://host/DATABASE)");
  }
  out->database = url.path.substr(1);
  if (out->database.find('/') != std::string::npos) {
    return Status::InvalidArgument(url.scheme + "://: the path is the database's name, one segment ('" +
                                   out->database + "')");
  }
  if (url.user.has_value()) out->user = *url.user;
  if (url.password.has_value()) out->password = *url.password;

  for (const auto& [param, value] : url.query) {
    if (param == "prefix") {
      return Status::InvalidArgument(url.scheme + ":// takes no prefix=: a lock is a row of the table= table "
                                     "(default dlock_locks), named by its lock name; give each set of "
                                     "locks a table of its own");
    }
  }
  std::vector<std::string> names = TlsParamNames();
  for (const char* name : {"table", "unlogged", "target_session_attrs"}) names.push_back(name);
  std::vector<std::pair<std::string, std::string>> values;
  Status s = ParseCommonParams(url, names, &out->params, &values);
  if (s.ok()) s = ParseTlsParams(url, values, /*on_by_scheme=*/false, "add tls=1", &out->tls);
  if (!s.ok()) return s;
  if (!out->tls.sni.empty()) {
    return Status::InvalidArgument(url.scheme + ":// takes no sni=: libpq checks the server's certificate "
                                   "against the host the URL names");
  }
  for (const auto& [param, value] : values) {
    if (param == "table") {
      if (value.empty() || value.size() > kMaxTableBytes || value.find('\0') != std::string::npos) {
        return Status::InvalidArgument("URL parameter table= must be 1 to " + std::to_string(kMaxTableBytes) +
                                       " bytes (a PostgreSQL identifier)");
      }
      out->table = value;
    } else if (param == "unlogged") {
      if (value != "0" && value != "1") return Status::InvalidArgument("URL parameter unlogged= is 0 or 1");
      out->unlogged = value == "1";
    } else if (param == "target_session_attrs") {
      static const char* const kKnown[] = {"any", "read-write", "read-only", "primary", "standby", "prefer-standby"};
      if (std::find(std::begin(kKnown), std::end(kKnown), value) == std::end(kKnown)) {
        return Status::InvalidArgument("URL parameter target_session_attrs='" + value +
                                       "' is none of any, read-write, read-only, primary, standby, "
                                       "prefer-standby");
      }
      out->target_session_attrs = value;
    }
  }
  return CheckTlsFiles(out->tls);
}

}  // namespace

std::string PostgresConfig::Describe() const {
  std::string out = "postgres ";
  for (size_t i = 0; i < hosts.size(); ++i) {
    out += (i == 0 ? "" : ",") + HostText(hosts[i].host) + ":" + std::to_string(hosts[i].port);
  }
  return out + "/" + database + TlsVerifyNote(tls.enabled, tls.verify);
}

std::vector<std::pair<std::string, std::string>> PostgresConfig::ConnectParams() const {
  std::string host_list, port_list;
  for (size_t i = 0; i < hosts.size(); ++i) {
    host_list += (i == 0 ? "" : ",") + hosts[i].host;
    port_list += (i == 0 ? "" : ",") + std::to_string(hosts[i].port);
  }
  std::vector<std::pair<std::string, std::string>> p = {
      {"host", host_list}, {"port", port_list}, {"dbname", database}, {"application_name", "dlock"},
      // libpq reads no other connection settings from the environment or service files that
      // would change where a URL's locks go: what the URL says is what is used.
      {"client_encoding", "UTF8"}};
  if (!user.empty()) p.emplace_back("user", user);
  if (!password.empty()) p.emplace_back("password", password);
  if (!target_session_attrs.empty()) p.emplace_back("target_session_attrs", target_session_attrs);
  if (tls.enabled) {
    // tls=1 checks the certificate and its name, as on every scheme; tls_verify=0 encrypts only.
    // libpq's require checks the chain whenever it finds a root certificate (ca=, or its default
    // ~/.postgresql/root.crt): with tls_verify=0 it is given a path that cannot exist instead.
    p.emplace_back("sslmode", tls.verify ? "verify-full" : "require");
    if (!tls.verify) {
      p.emplace_back("sslrootcert", "/dev/null/no-root-certificate");
    } else if (!tls.ca.empty()) {
      p.emplace_back("sslrootcert", tls.ca);
    }
    if (!tls.cert.empty()) p.emplace_back("sslcert", tls.cert);
    if (!tls.key.empty()) p.emplace_back("sslkey", tls.key);
  } else {
    p.emplace_back("sslmode", "disable");
  }
  return p;
}

Status ParsePostgresUrl(const Url& url, PostgresConfig* out) { return UrlError(url, ReadPostgresUrl(url, out)); }

}  // namespace dlock::postgres
