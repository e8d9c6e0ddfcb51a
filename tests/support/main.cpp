// The test main: the validation layer is on for every test, and plans follow the fixed rules
// (VKATTN_TUNE=off: results do not depend on what tuning measured; test_tuning asks for tuning
// itself), run by ctest or by hand.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("VKATTN_VALIDATION", "1", /*overwrite=*/0);
  setenv("VKATTN_TUNE", "off", /*overwrite=*/0);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
