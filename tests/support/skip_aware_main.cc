// The main of the GPU GoogleTest binaries, each of whose tests ctest runs on its own
// (gtest_discover_tests): a failure exits 1; a test that only skipped (no GPU) exits 77,
// which ctest reports as SKIPPED; anything else exits 0. A failure can never hide behind
// a skip, since the exit code, not a pattern in the output, decides.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (RUN_ALL_TESTS() != 0) return 1;
  const ::testing::UnitTest& all = *::testing::UnitTest::GetInstance();
  const bool only_skips = all.test_to_run_count() > 0 && all.skipped_test_count() == all.test_to_run_count();
  return only_skips ? 77 : 0;
}
