#include "support/tls_certs.h"

#include <chrono>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "support/child_process.h"

namespace dlock_test {
namespace {

// Our own config, so that the system's openssl.cnf (its x509_extensions = v3_ca would make
// every certificate a CA) and $OPENSSL_CONF play no part. The temp dir's path comes in through
// the environment ($ENV::), so no path is ever parsed as config text. `openssl ca` needs the
// [ca] part: a database and a directory for its copies of what it issued.
constexpr char kConfig[] = R"(dir = $ENV::DLOCK_CERT_DIR

[req]
distinguished_name = req_dn
[req_dn]

[ca]
default_ca = test_ca
[test_ca]
database = $dir/index.txt
new_certs_dir = $dir
certificate = $dir/ca.crt
private_key = $dir/ca.key
rand_serial = yes
default_md = sha256
policy = any_name
unique_subject = no
[any_name]
commonName = supplied

[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1

[wrong_host_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:wrong.example

[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth

[peer_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
)";

const std::vector<std::string> kNewKey = {"-newkey", "ec", "-pkeyopt",
                                          "ec_paramgen_curve:P-256", "-noenc"};
const std::vector<std::string> kTenYears = {"-days", "3650"};

}  // namespace

TestCertificates::TestCertificates() {
  openssl_ = FindOnPath("openssl", "DLOCK_OPENSSL");
  if (openssl_.empty()) {
    ADD_FAILURE() << "TestCertificates: openssl not found on PATH";
    return;
  }
  std::string why;
  dir_ = MakeTempDir("certs", &why);
  if (dir_.empty()) {
    ADD_FAILURE() << "TestCertificates: " << why;
    return;
  }
  std::ofstream(Path("openssl.cnf")) << kConfig;
  std::ofstream(Path("index.txt"));  // `openssl ca`'s database: empty to begin with
  // An expired certificate: OpenSSL 3.0's `req -x509` and `x509 -req` only take -days (its
  // `-days -1` does backdate not-after, but to before not-before, and later versions give -1
  // another meaning); -not_before/-not_after came in 3.4. `openssl ca -startdate -enddate` has
  // set both dates for decades, and needs no faked clock (libfaketime may not be installed).
  ok_ = MakeCa("ca", "/CN=dlock test CA") && MakeCa("other_ca", "/CN=dlock other CA") &&
        Issue("server", "/CN=localhost", "server_ext", kTenYears) &&
        Issue("wrong_host", "/CN=wrong.example", "wrong_host_ext", kTenYears) &&
        Issue("expired", "/CN=localhost", "server_ext",
              {"-startdate", "20000101000000Z", "-enddate", "20000102000000Z"}) &&
        Issue("client", "/CN=dlock test client", "client_ext", kTenYears) &&
        Issue("peer", "/CN=localhost", "peer_ext", kTenYears) &&
        OpenSsl({"genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out",
                 mismatched_key()});
}

TestCertificates::~TestCertificates() {
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

bool TestCertificates::OpenSsl(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {openssl_};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess p(argv, ChildOptions::Env({"DLOCK_CERT_DIR=" + dir_}));
  int code = p.started() ? p.Wait(std::chrono::seconds(30)) : -1;
  if (code == 0) return true;
  std::string command;
  for (const auto& a : argv) command += a + " ";
  ADD_FAILURE() << "TestCertificates: `" << command << "` "
                << (p.started() ? DescribeExitCode(code) : p.error()) << ":\n"
                << p.output();
  return false;
}

bool TestCertificates::MakeCa(const std::string& name, const std::string& subject) {
  std::vector<std::string> args = {"req", "-config", Path("openssl.cnf"), "-x509",
                                   "-extensions", "ca_ext", "-subj", subject,
                                   "-keyout", Path(name + ".key"),
                                   "-out", Path(name + ".crt")};
  args.insert(args.end(), kNewKey.begin(), kNewKey.end());
  args.insert(args.end(), kTenYears.begin(), kTenYears.end());
  return OpenSsl(args);
}

bool TestCertificates::Issue(const std::string& name, const std::string& subject,
                             const std::string& extensions,
                             const std::vector<std::string>& validity) {
  const std::string base = Path(name);
  std::vector<std::string> request = {"req", "-config", Path("openssl.cnf"), "-new",
                                      "-subj", subject, "-keyout", base + ".key",
                                      "-out", base + ".csr"};
  request.insert(request.end(), kNewKey.begin(), kNewKey.end());
  std::vector<std::string> sign = {"ca", "-config", Path("openssl.cnf"), "-batch", "-notext",
                                   "-extensions", extensions, "-in", base + ".csr",
                                   "-out", base + ".crt"};
  sign.insert(sign.end(), validity.begin(), validity.end());
  return OpenSsl(request) && OpenSsl(sign);
}

}  // namespace dlock_test
