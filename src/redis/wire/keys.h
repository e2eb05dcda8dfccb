// The Redis key layout of a lock, in one place (DESIGN.md: "Redis keys for lock NAME"): the
// operations, the bench and the tests all spell keys through it.
#ifndef DLOCK_REDIS_WIRE_KEYS_H_
#define DLOCK_REDIS_WIRE_KEYS_H_

#include <string>

namespace dlock::redis {

// Key names for lock NAME (lua/acquire.lua says what each holds): all share the hash tag
// {NAME}, hence one cluster slot.
struct LockKeys {
  // Every other key is the holder's name and one of these.
  static constexpr const char* kFence = ":fence";
  static constexpr const char* kChannel = ":released";
  static constexpr const char* kHolds = ":holds";
  static constexpr const char* kHoldData = ":holdinfo";
  static constexpr const char* kWriter = ":writer";
  static constexpr const char* kLine = ":line";
  static constexpr const char* kLineData = ":linedata";
  static constexpr const char* kValue = ":value";
  static constexpr const char* kBroken = ":broken";
  static std::string Holder(const std::string& prefix, const std::string& name) {
    return prefix + "{" + name + "}";
  }
  // Where releases of NAME are published.
  static std::string Channel(const std::string& prefix, const std::string& name) {
    return Holder(prefix, name) + kChannel;
  }

  LockKeys(const std::string& prefix, const std::string& name)
      : holder(Holder(prefix, name)),
        fence(holder + kFence),
        channel(holder + kChannel),
        holds(holder + kHolds),
        hold_data(holder + kHoldData),
        writer(holder + kWriter),
        line(holder + kLine),
        line_data(holder + kLineData),
        value(holder + kValue),
        broken(holder + kBroken) {}
  std::string holder, fence, channel, holds, hold_data, writer, line, line_data, value, broken;
};

}  // namespace dlock::redis

#endif  // DLOCK_REDIS_WIRE_KEYS_H_
