#include "redis/wire/scripts.h"

#include "core/text.h"

#include <openssl/sha.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace dlock::redis {
namespace {

const char* Source(const char* name) {
  for (int i = 0; i < kScriptCount; ++i) {
    if (std::strcmp(kScriptSources[i].name, name) == 0) return kScriptSources[i].body;
  }
  std::abort();  // a build error: lua/NAME.lua was not embedded
}

Script Named(const char* name, std::string body) {
  Script s{name, std::move(body), {}};
  unsigned char digest[SHA_DIGEST_LENGTH];
  SHA1(reinterpret_cast<const unsigned char*>(s.body.data()), s.body.size(), digest);
  s.sha1 = HexBytes(digest, sizeof digest);
  return s;
}

Script Load(const char* name) { return Named(name, Source(name)); }

// acquire_many.lua and release_many.lua call the scripts a single acquire and release run,
// each as a function of its own KEYS and ARGV: one copy of their logic, in one call.
std::string AsFunction(const char* function, const char* script) {
  return std::string("local function ") + function + "(KEYS, ARGV)\n" + Source(script) + "\nend\n";
}
Script LoadAcquireMany() {
  return Named("acquire_many", AsFunction("acquire_one", "acquire") +
                                   AsFunction("release_one", "release") + Source("acquire_many"));
}
Script LoadReleaseMany() {
  return Named("release_many", AsFunction("release_one", "release") + Source("release_many"));
}

}  // namespace

const Script& GetScript(ScriptId id) {
  static const Script acquire = Load("acquire");
  static const Script release = Load("release");
  static const Script extend = Load("extend");
  static const Script inspect = Load("inspect");
  static const Script fence = Load("fence");
  static const Script set_value = Load("set_value");
  static const Script break_lock = Load("break");
  static const Script request_release = Load("request_release");
  static const Script acquire_many = LoadAcquireMany();
  static const Script release_many = LoadReleaseMany();
  switch (id) {
    case ScriptId::kAcquire: return acquire;
    case ScriptId::kRelease: return release;
    case ScriptId::kExtend: return extend;
    case ScriptId::kInspect: return inspect;
    case ScriptId::kFence: return fence;
    case ScriptId::kSetValue: return set_value;
    case ScriptId::kBreak: return break_lock;
    case ScriptId::kRequestRelease: return request_release;
    case ScriptId::kAcquireMany: return acquire_many;
    case ScriptId::kReleaseMany: return release_many;
  }
  std::abort();
}

}  // namespace dlock::redis
