// The embedded scripts are the files in lua/, byte for byte, with the SHA1 Redis will use.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "redis/scripts.h"

namespace dlock::redis {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ScriptsTest, EmbeddedScriptsMatchTheLuaFiles) {
  const std::string dir = DLOCK_SOURCE_DIR "/lua/";
  EXPECT_EQ(GetScript(ScriptId::kAcquire).body, ReadFile(dir + "acquire.lua"));
  EXPECT_EQ(GetScript(ScriptId::kRelease).body, ReadFile(dir + "release.lua"));
  EXPECT_EQ(GetScript(ScriptId::kExtend).body, ReadFile(dir + "extend.lua"));
}

TEST(ScriptsTest, Sha1IsFortyHexDigitsAndDistinct) {
  const auto& a = GetScript(ScriptId::kAcquire).sha1;
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, GetScript(ScriptId::kRelease).sha1);
}

}  // namespace
}  // namespace dlock::redis
