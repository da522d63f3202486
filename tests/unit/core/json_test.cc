// The JSON reader of object members (core/json.h) that fields a caller hands in as
// text go through, and the writer's record of the keys it wrote.
#include "core/json.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace cohort {
namespace {

using Members = std::vector<std::pair<std::string, std::string>>;

std::string error_of(std::string_view text) {
  try {
    parse_json_members(text, "extra");
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Code::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(JsonMembers, KeysAreDecodedAndValuesKeptAsWritten) {
  EXPECT_EQ(parse_json_members("", "extra"), Members{});
  EXPECT_EQ(parse_json_members(" \n\t", "extra"), Members{});
  EXPECT_EQ(parse_json_members("\"skipped\": 3", "extra"), (Members{{"skipped", "3"}}));
  EXPECT_EQ(parse_json_members(R"( "a" : -1.5e+3 ,"b":[1, {"c": null}, "x,y"], "t\u00e9\n": {"d": true} )", "extra"),
            (Members{{"a", "-1.5e+3"}, {"b", R"([1, {"c": null}, "x,y"])"}, {"t\xc3\xa9\n", R"({"d": true})"}}));
  // A surrogate pair is one code point (U+1F600); a lone surrogate becomes U+FFFD.
  EXPECT_EQ(parse_json_members(R"("\ud83d\ude00": 0, "\udc00": 0)", "extra"),
            (Members{{"\xf0\x9f\x98\x80", "0"}, {"\xef\xbf\xbd", "0"}}));
  // Repeated keys are the caller's to judge (the run summary refuses them).
  EXPECT_EQ(parse_json_members(R"("a": 1, "a": 2)", "extra"), (Members{{"a", "1"}, {"a", "2"}}));
}

TEST(JsonMembers, AnythingElseIsAnErrorSayingWhatAndWhere) {
  EXPECT_EQ(error_of("\"a\" 1"), "extra: expected ':' after the key at byte 4 (found '1')");
  EXPECT_EQ(error_of("\"a\": 1 \"b\": 2"), "extra: expected ',' between members at byte 7 (found '\"')");
  EXPECT_EQ(error_of("\"a\": 1,"), "extra: expected a string at byte 7 (found the end)");
  EXPECT_EQ(error_of("{\"a\": 1}"), "extra: expected a string at byte 0 (found '{')");
  EXPECT_NE(error_of("a: 1").find("expected a string"), std::string::npos);
  EXPECT_NE(error_of("\"a\": ").find("expected a value at byte 5 (found the end)"), std::string::npos);
  EXPECT_NE(error_of("\"a\": tru").find("expected a value"), std::string::npos);
  EXPECT_NE(error_of("\"a\": 01").find("expected ','"), std::string::npos);
  EXPECT_NE(error_of("\"a\": 1.").find("expected a digit"), std::string::npos);
  EXPECT_NE(error_of("\"a\": -").find("expected a digit"), std::string::npos);
  EXPECT_NE(error_of("\"a\": [1, 2").find("',' or ']'"), std::string::npos);
  EXPECT_NE(error_of("\"a\": {\"b\" 1}").find("':' after the key"), std::string::npos);
  EXPECT_NE(error_of("\"a\": \"x").find("closing the string"), std::string::npos);
  EXPECT_NE(error_of("\"a\": \"x\ny\"").find("no control character"), std::string::npos);
  EXPECT_NE(error_of("\"a\": \"\\q\"").find("expected an escape"), std::string::npos);
  EXPECT_NE(error_of("\"a\": \"\\u12g4\"").find("four hex digits"), std::string::npos);
  EXPECT_NE(error_of("\"a\": \"\\ud83d\\u0041\"").find("a low surrogate"), std::string::npos);
  EXPECT_NE(error_of("\"a\": " + std::string(100, '[') + std::string(100, ']')).find("less nesting"),
            std::string::npos);
}

TEST(JsonObject, RemembersTheKeysItWrote) {
  JsonObject o;
  o.add_int("a", 1).add_string("b", "x");
  EXPECT_TRUE(o.has("a"));
  EXPECT_TRUE(o.has("b"));
  EXPECT_FALSE(o.has("c"));
  EXPECT_EQ(o.str(), R"({"a": 1, "b": "x"})");
}

}  // namespace
}  // namespace cohort
