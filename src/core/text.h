// Small text helpers shared by the core and the backends, written once.
#ifndef DLOCK_CORE_TEXT_H_
#define DLOCK_CORE_TEXT_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace dlock {

// Without leading and trailing spaces, tabs, CRs and LFs.
std::string Trim(std::string_view s);
// ASCII lower case.
std::string Lower(std::string_view s);
// Lower-case hex of bytes.
std::string HexBytes(const unsigned char* data, size_t n);
// The value of one hex digit, -1 for anything else.
int HexDigitValue(char c);
// Decodes %XX escapes. Strict: false on a '%' that starts no valid escape (*out is then
// unspecified). Lenient (strict = false): such a '%' is taken literally.
bool PercentDecode(std::string_view in, bool strict, std::string* out);

// A URL with any password replaced by "***", for messages and logs (dlock_url_redact).
std::string RedactUrl(const std::string& text);

}  // namespace dlock

#endif  // DLOCK_CORE_TEXT_H_
