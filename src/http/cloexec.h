// Keeping curl's descriptors out of child processes (a `dlock exec` CMD, a fork+exec of the
// caller's). Connections are opened close-on-exec by OpenSocketCloexec
// (CURLOPT_OPENSOCKETFUNCTION). curl 7.88 also makes sockets the callback never sees: each
// multi handle's wake-up socketpair, made by curl_multi_init and kept for the handle's life,
// which NewMultiCloexec marks. The threaded resolver's socketpair lives only while one name is
// being looked up (IP literals skip it) and cannot be reached: it is the one gap, documented
// in docs/security.md.
#ifndef DLOCK_HTTP_CLOEXEC_H_
#define DLOCK_HTTP_CLOEXEC_H_

#include <curl/curl.h>

namespace dlock::http {

// CURLOPT_OPENSOCKETFUNCTION: socket(2) with SOCK_CLOEXEC.
curl_socket_t OpenSocketCloexec(void* clientp, curlsocktype purpose, curl_sockaddr* address);

// curl_multi_init, then FD_CLOEXEC on the sockets that appeared during it (its wake-up pair).
// A socket another thread opened in that instant may be marked too; no dlock or curl
// descriptor is meant to cross an exec, and a caller's own socket that is meant to is rarely
// made without close-on-exec being cleared after it: see docs/security.md.
CURLM* NewMultiCloexec();

}  // namespace dlock::http

#endif  // DLOCK_HTTP_CLOEXEC_H_
