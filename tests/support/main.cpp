// The test main: the validation layer is on for every test, and fails it on any message the
// layer raised while it ran (testing::install_validation_watch), plans follow the fixed rules
// (VKATTN_TUNE=off: results do not depend on what tuning measured; test_tuning asks for tuning
// itself), and lavapipe compiles without LLVM's optimization passes (GALLIVM_PERF=nopt: the
// suite's time is mostly pipelines compiled for one run; tests/CMakeLists.txt says which tests
// keep them), run by ctest or by hand. Each only where the environment does not set it.
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/support/gpu.h"

int main(int argc, char** argv) {
  setenv("VKATTN_VALIDATION", "1", /*overwrite=*/0);
  setenv("VKATTN_TUNE", "off", /*overwrite=*/0);
  setenv("GALLIVM_PERF", "nopt", /*overwrite=*/0);  // read when lavapipe's device is first made
  ::testing::InitGoogleTest(&argc, argv);
  vkattn::testing::install_validation_watch();
  return RUN_ALL_TESTS();
}
