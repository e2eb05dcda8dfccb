// core/server_text.h: what the library keeps of a server's words (escaped, capped) and how deep
// a JSON answer may nest.
#include "core/server_text.h"

#include <gtest/gtest.h>

#include <string>

namespace dlock {
namespace {

TEST(ServerTextTest, ControlBytesAreEscapedAndTheRestKept) {
  EXPECT_EQ(EscapeControlBytes("plain text, UTF-8: \xc3\xa9"), "plain text, UTF-8: \xc3\xa9");
  EXPECT_EQ(EscapeControlBytes(std::string("\x1b[31mred\x07\x7f\n\0", 12)), "\\x1b[31mred\\x07\\x7f\\x0a\\x00");
}

TEST(ServerTextTest, LongTextIsCutOnACharacterBoundary) {
  EXPECT_EQ(ServerText(std::string(512, 'a')), std::string(512, 'a'));
  EXPECT_EQ(ServerText(std::string(513, 'a')), std::string(512, 'a') + "\xe2\x80\xa6");
  // "é" is two bytes: a cut inside it moves back to its start.
  EXPECT_EQ(ServerText("ab\xc3\xa9z", 3), "ab\xe2\x80\xa6");
  EXPECT_EQ(ServerText(std::string(600, '\x1b')).size(), 512 * 4 + 3) << "cut first, then escaped";
}

TEST(ServerTextTest, JsonDepthCountsContainersOutsideStrings) {
  EXPECT_TRUE(JsonDepthWithin("{}", 1));
  EXPECT_FALSE(JsonDepthWithin("{[]}", 1));
  EXPECT_TRUE(JsonDepthWithin(R"({"a":"[[[[\"{{"})", 1));
  EXPECT_TRUE(JsonDepthWithin(std::string(64, '[') + std::string(64, ']')));
  EXPECT_FALSE(JsonDepthWithin(std::string(65, '[')));
  EXPECT_TRUE(JsonDepthWithin("]]]]{}", 1)) << "stray closers do not go below zero";
}

}  // namespace
}  // namespace dlock
