// Secrets (URL passwords, AWS secret keys and session tokens) wiped from memory when freed, so
// that a core dump, a swapped page or a later heap allocation cannot hand them on.
//
// Secret is a std::string that cleanses its whole buffer (OPENSSL_cleanse) before the buffer is
// freed or reused: on destruction, on assignment and after a move. It converts to
// const std::string& as it is one, so code that reads a password needs no change; code that
// copies it into a plain std::string makes a copy that is not wiped. Assign it whole: growing
// it in place (+=, append past its capacity) frees the old buffer unwiped.
#ifndef DLOCK_CORE_SECRET_H_
#define DLOCK_CORE_SECRET_H_

#include <cstddef>
#include <string>
#include <utility>

namespace dlock {

// Overwrites s's whole buffer, its capacity and not only its size, with zeros in a way the
// compiler cannot drop, then empties it. The buffer stays allocated (for reuse or freeing).
void Cleanse(std::string* s);

// For tests: fn(data, len) runs right after each Cleanse wiped [data, data + len), while that
// memory is still allocated. Null turns it off. (Both are defined in text.cc.)
void SetCleanseHookForTesting(void (*fn)(const char* data, size_t len));

class Secret : public std::string {
 public:
  Secret() = default;
  Secret(const char* s) : std::string(s) {}  // NOLINT: a literal in tests and defaults
  Secret(const std::string& s) : std::string(s) {}  // NOLINT: implicit, like a std::string
  // Takes s's buffer, and wipes what a short string leaves behind in s.
  Secret(std::string&& s) : std::string(std::move(s)) { Cleanse(&s); }  // NOLINT
  Secret(const Secret& o) : std::string(o) {}
  Secret(Secret&& o) noexcept : std::string(std::move(static_cast<std::string&>(o))) {
    Cleanse(&o);
  }
  // Only these two: a std::string or a literal is made a Secret first (which wipes a
  // std::string&& it takes from), and nlohmann::json's conversion stays unambiguous.
  Secret& operator=(const Secret& o) {
    if (this != &o) {
      Cleanse(this);  // the old text, before assign() may reallocate and free its buffer
      std::string::assign(o);
    }
    return *this;
  }
  Secret& operator=(Secret&& o) noexcept {
    if (this != &o) {
      Cleanse(this);
      std::string::operator=(std::move(static_cast<std::string&>(o)));
      Cleanse(&o);
    }
    return *this;
  }
  ~Secret() { Cleanse(this); }

  const std::string& str() const { return *this; }
};

}  // namespace dlock

#endif  // DLOCK_CORE_SECRET_H_
