#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "core/config.h"
#include "core/options.h"
#include "core/status.h"

namespace cohort {
namespace {

// Runs fn and returns the message of the Error it throws (failing if none or another code).
template <typename Fn>
std::string error_of(Fn&& fn, Code code = Code::kInvalidArgument) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

TEST(OptionRegistry, NamesAreUniqueSnakeCaseWithValidDefaults) {
  std::set<std::string_view> seen;
  for (const OptionSpec& s : option_registry()) {
    EXPECT_TRUE(seen.insert(s.name).second) << "duplicate key " << s.name;
    for (char c : s.name) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << s.name;
    EXPECT_FALSE(s.help.empty()) << s.name;
    // Every default must pass its own validation and be in canonical form.
    EXPECT_EQ(canonical_value(s, s.default_value, "default"), s.default_value) << s.name;
  }
  EXPECT_GT(seen.size(), 20u);
}

TEST(OptionRegistry, FlagSpellingsNormalise) {
  EXPECT_EQ(normalize_key("Batch-Size"), "batch_size");
  ASSERT_NE(find_option("batch-size"), nullptr);
  EXPECT_EQ(find_option("batch-size")->name, "batch_size");
  EXPECT_EQ(find_option("no_such_key"), nullptr);
}

TEST(OptionRegistry, UnknownKeySuggestsNearest) {
  EXPECT_EQ(nearest_option("batchsize"), "batch_size");
  EXPECT_EQ(nearest_option("reader_thread"), "reader_threads");
  std::string msg = error_of([] { require_option("fusion_treshold_mb"); });
  EXPECT_NE(msg.find("'fusion_treshold_mb'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'fusion_threshold_mb'"), std::string::npos) << msg;
  EXPECT_EQ(nearest_option("zzzzzzzzzzzzzzzzzz"), "");
}

TEST(OptionRegistry, CanonicalValues) {
  const OptionSpec& precision = require_option("precision");
  EXPECT_EQ(canonical_value(precision, "fp16", "x"), "f16");
  EXPECT_EQ(canonical_value(precision, "FP32", "x"), "f32");
  EXPECT_EQ(canonical_value(precision, "bf16", "x"), "bf16");
  const OptionSpec& batch = require_option("batch_size");
  EXPECT_EQ(canonical_value(batch, " 256 ", "x"), "256");
  EXPECT_EQ(canonical_value(batch, "1e3", "x"), "1000");
  const OptionSpec& json = require_option("json");
  EXPECT_EQ(canonical_value(json, "YES", "x"), "true");
  EXPECT_EQ(canonical_value(json, "0", "x"), "false");
  const OptionSpec& lr = require_option("lr");
  EXPECT_EQ(canonical_value(lr, "0.25", "x"), "0.25");
}

TEST(OptionRegistry, BadValuesNameKeyValueAndWhatIsAllowed) {
  const OptionSpec& batch = require_option("batch_size");
  std::string msg = error_of([&] { canonical_value(batch, "0", "option 'batch_size'"); });
  EXPECT_NE(msg.find("'0'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("batch_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[1, "), std::string::npos) << msg;
  msg = error_of([&] { canonical_value(batch, "12abc", "x"); });
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  msg = error_of([&] { canonical_value(batch, "2.5", "x"); });
  msg = error_of([&] { canonical_value(require_option("precision"), "f8", "x"); });
  EXPECT_NE(msg.find("f32|f16|bf16"), std::string::npos) << msg;
  EXPECT_NE(msg.find("fp32"), std::string::npos) << msg;
  msg = error_of([&] { canonical_value(require_option("json"), "maybe", "x"); });
  EXPECT_NE(msg.find("true or false"), std::string::npos) << msg;
  error_of([&] { canonical_value(require_option("lr"), "nan", "x"); });
  error_of([&] { canonical_value(require_option("lr"), "-1", "x"); });
}

TEST(OptionRegistry, HelpAndMarkdownCoverEveryKey) {
  const std::string& help = options_help("");
  const std::string& md = options_markdown();
  for (const OptionSpec& s : option_registry()) {
    EXPECT_NE(help.find("--" + std::string(s.name)), std::string::npos) << s.name;
    EXPECT_NE(md.find("`" + std::string(s.name) + "`"), std::string::npos) << s.name;
  }
  EXPECT_NE(options_help("data").find("--batch_size"), std::string::npos);
  EXPECT_EQ(options_help("data").find("--fusion_threshold_mb"), std::string::npos);
  EXPECT_EQ(options_help("no-such-group"), "");
  EXPECT_NE(help.find("COHORT_BATCH_SIZE"), std::string::npos);
}

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("COHORT_BATCH_SIZE");
    unsetenv("COHORT_PRECISION");
  }
  void TearDown() override { SetUp(); }
};

TEST_F(ConfigTest, PrecedenceExplicitOverEnvironmentOverDefault) {
  Config c;
  EXPECT_EQ(c.get_int("batch_size"), 64);
  EXPECT_EQ(c.source("batch_size"), OptionSource::kDefault);
  setenv("COHORT_BATCH_SIZE", "32", 1);
  EXPECT_EQ(c.get_int("batch_size"), 32);
  EXPECT_EQ(c.source("batch_size"), OptionSource::kEnvironment);
  c.set("batch-size", "16");
  EXPECT_EQ(c.get_int("batch_size"), 16);
  EXPECT_EQ(c.source("batch_size"), OptionSource::kExplicit);
  c.unset("batch_size");
  EXPECT_EQ(c.get_int("batch_size"), 32);
}

TEST_F(ConfigTest, AnEnvironmentVariableCountsAsExplicit) {
  Config c;
  EXPECT_FALSE(c.is_explicit("batch_size"));
  setenv("COHORT_BATCH_SIZE", "32", 1);
  EXPECT_TRUE(c.is_explicit("batch_size"));
  unsetenv("COHORT_BATCH_SIZE");
  c.set("batch_size", "64");  // the default's value, set: still the user's choice
  EXPECT_TRUE(c.is_explicit("batch-size"));
  EXPECT_THROW(c.is_explicit("batchsize"), Error);
}

TEST_F(ConfigTest, TypedSettersTakeTheirKeyTypesOnly) {
  Config c;
  c.set_int("batch_size", 256);
  EXPECT_EQ(c.get_int("batch_size"), 256);
  c.set_int("lr", 2);  // an int is a number for a float key
  EXPECT_EQ(c.get_float("lr"), 2.0);
  c.set_float("lr", 0.25);
  EXPECT_EQ(c.get_string("lr"), "0.25");
  c.set_bool("json", true);
  EXPECT_TRUE(c.get_bool("json"));
  auto message = [](auto fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Code::kInvalidArgument);
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message([&] { c.set_int("precision", 3); }).find("option 'precision' is not a number: it takes "),
            std::string::npos);
  EXPECT_NE(message([&] { c.set_float("json", 1.0); }).find("option 'json' is not a number"), std::string::npos);
  EXPECT_NE(message([&] { c.set_bool("lr", true); }).find("option 'lr' is not a bool: it takes "), std::string::npos);
  EXPECT_NE(message([&] { c.set_float("lr", -1.0); }).find("lr"), std::string::npos);  // out of range, as set()
  EXPECT_NE(message([&] { c.set_int("nope", 1); }).find("unknown option 'nope'"), std::string::npos);
  EXPECT_EQ(c.get_float("lr"), 0.25);  // failed sets change nothing
}

TEST_F(ConfigTest, BadEnvironmentValueNamesTheVariable) {
  setenv("COHORT_BATCH_SIZE", "lots", 1);
  Config c;
  std::string msg = error_of([&] { c.get_int("batch_size"); });
  EXPECT_NE(msg.find("COHORT_BATCH_SIZE"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lots'"), std::string::npos) << msg;
}

TEST_F(ConfigTest, TypedGettersRejectOtherTypes) {
  Config c;
  error_of([&] { c.get_int("precision"); });
  error_of([&] { c.get_bool("batch_size"); });
  EXPECT_DOUBLE_EQ(c.get_float("batch_size"), 64.0);
  EXPECT_EQ(c.get_string("precision"), "f32");
}

TEST_F(ConfigTest, FailedSetLeavesValue) {
  Config c;
  c.set("batch_size", "8");
  error_of([&] { c.set("batch_size", "-3"); });
  EXPECT_EQ(c.get_int("batch_size"), 8);
}

std::vector<std::string> parse(Config& c, std::vector<const char*> args, bool strict = false) {
  std::vector<int> rest = c.parse_args(static_cast<int>(args.size()), args.data(), strict);
  std::vector<std::string> out;
  for (int i : rest) out.emplace_back(args[static_cast<size_t>(i)]);
  return out;
}

TEST_F(ConfigTest, ParseArgsForms) {
  Config c;
  auto rest = parse(c, {"prog", "--batch-size=128", "input.txt", "--precision", "fp16", "--json", "--lr", "0.5",
                        "--unknown=3", "--no-resume", "-v", "--", "--batch_size=1"});
  EXPECT_EQ(c.get_int("batch_size"), 128);
  EXPECT_EQ(c.get_string("precision"), "f16");
  EXPECT_TRUE(c.get_bool("json"));
  EXPECT_FALSE(c.get_bool("resume"));
  EXPECT_EQ(c.source("resume"), OptionSource::kExplicit);
  EXPECT_DOUBLE_EQ(c.get_float("lr"), 0.5);
  std::vector<std::string> expected{"prog", "input.txt", "--unknown=3", "-v", "--", "--batch_size=1"};
  EXPECT_EQ(rest, expected);
}

TEST_F(ConfigTest, ParseArgsBoolTakesExplicitValue) {
  Config c;
  auto rest = parse(c, {"prog", "--json", "false", "--eval", "file"});
  EXPECT_FALSE(c.get_bool("json"));
  EXPECT_TRUE(c.get_bool("eval"));
  EXPECT_EQ(rest, (std::vector<std::string>{"prog", "file"}));
}

TEST_F(ConfigTest, ParseArgsErrors) {
  Config c;
  std::string msg = error_of([&] { parse(c, {"prog", "--batch_size"}); });
  EXPECT_NE(msg.find("--batch_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing value"), std::string::npos) << msg;
  msg = error_of([&] { parse(c, {"prog", "--batch_size=x"}); });
  EXPECT_NE(msg.find("'x'"), std::string::npos) << msg;
  msg = error_of([&] { parse(c, {"prog", "--batchsize=3"}, true); });
  EXPECT_NE(msg.find("did you mean '--batch_size'"), std::string::npos) << msg;
  // --help is always handed back, even in strict mode.
  EXPECT_EQ(parse(c, {"prog", "--help"}, true), (std::vector<std::string>{"prog", "--help"}));
}

}  // namespace
}  // namespace cohort
