// The Lua scripts, embedded from lua/*.lua at build time, with their SHA1 for EVALSHA.
#ifndef DLOCK_REDIS_WIRE_SCRIPTS_H_
#define DLOCK_REDIS_WIRE_SCRIPTS_H_

#include <string>

namespace dlock::redis {

struct ScriptSource {
  const char* name;
  const char* body;
};
extern const ScriptSource kScriptSources[];
extern const int kScriptCount;

struct Script {
  std::string name;
  std::string body;
  std::string sha1;  // lowercase hex, as SCRIPT LOAD returns it
};

enum class ScriptId { kAcquire, kRelease, kExtend, kInspect, kFence, kSetValue, kBreak,
                      kRequestRelease, kAcquireMany, kReleaseMany };
const Script& GetScript(ScriptId id);

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_SCRIPTS_H_
