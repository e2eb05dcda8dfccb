// Small text helpers shared by the core and the backends, written once.
#ifndef DLOCK_CORE_TEXT_H_
#define DLOCK_CORE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/secret.h"  // Cleanse and SetCleanseHookForTesting are defined in text.cc

namespace dlock {

// Without leading and trailing spaces, tabs, CRs and LFs.
std::string Trim(std::string_view s);
// ASCII lower case.
std::string Lower(std::string_view s);
// Lower-case hex of bytes.
std::string HexBytes(const unsigned char* data, size_t n);
// Standard base64 with padding (etcd's JSON gateway, DynamoDB's binary attributes).
std::string Base64Encode(std::string_view bytes);
// False on text that is not base64.
bool Base64Decode(std::string_view text, std::string* out);
// The value of one hex digit, -1 for anything else.
int HexDigitValue(char c);
// Decodes %XX escapes. Strict: false on a '%' that starts no valid escape (*out is then
// unspecified). Lenient (strict = false): such a '%' is taken literally.
bool PercentDecode(std::string_view in, bool strict, std::string* out);

// A URL with its password and the values of its secret query parameters replaced by "***", for
// messages and logs (dlock_url_redact). The userinfo is taken to end at the last '@' of the
// text, so that a password holding an unencoded '/', '?', '#' or '@' is hidden too; when the
// '@' is in fact in a path or query (redis://h:1/?prefix=a@b), more than the password is hidden.
std::string RedactUrl(const std::string& text);

// What RedactUrl hides, as [begin, end) ranges of text (in no order; they may overlap).
std::vector<std::pair<size_t, size_t>> UrlSecretRanges(const std::string& text);

// Whether URL query parameter `name` (percent-decoded) holds a secret: sentinel_password, and
// any later one. Its value is never shown.
bool IsSecretUrlParam(std::string_view name);

// Where the authority of a URL would start: after "scheme:" and the slashes that follow it;
// 0 when text does not start with a scheme.
size_t UrlAuthorityStart(std::string_view text);

}  // namespace dlock

#endif  // DLOCK_CORE_TEXT_H_
