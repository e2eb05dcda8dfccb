#include "redis/wire/scripts.h"

#include "core/text.h"

#include <openssl/sha.h>

#include <cstdlib>
#include <cstring>

namespace dlock::redis {
namespace {

Script Load(const char* name) {
  for (int i = 0; i < kScriptCount; ++i) {
    if (std::strcmp(kScriptSources[i].name, name) != 0) continue;
    Script s{name, kScriptSources[i].body, {}};
    unsigned char digest[SHA_DIGEST_LENGTH];
    SHA1(reinterpret_cast<const unsigned char*>(s.body.data()), s.body.size(), digest);
    s.sha1 = HexBytes(digest, sizeof digest);
    return s;
  }
  std::abort();  // a build error: lua/NAME.lua was not embedded
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
  switch (id) {
    case ScriptId::kAcquire: return acquire;
    case ScriptId::kRelease: return release;
    case ScriptId::kExtend: return extend;
    case ScriptId::kInspect: return inspect;
    case ScriptId::kFence: return fence;
    case ScriptId::kSetValue: return set_value;
    case ScriptId::kBreak: return break_lock;
    case ScriptId::kRequestRelease: return request_release;
  }
  std::abort();
}

}  // namespace dlock::redis
