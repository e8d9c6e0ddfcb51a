// The test main: the validation layer is on for every test, and fails it on any message the
// layer raised while it ran (testing::install_validation_watch), and plans follow the fixed rules
// (VKATTN_TUNE=off: results do not depend on what tuning measured; test_tuning asks for tuning
// itself), run by ctest or by hand.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/gpu.h"

int main(int argc, char** argv) {
  setenv("VKATTN_VALIDATION", "1", /*overwrite=*/0);
  setenv("VKATTN_TUNE", "off", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  vkattn::testing::install_validation_watch();
  return RUN_ALL_TESTS();
}
