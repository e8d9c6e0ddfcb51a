// Both backends against PyTorch: every fixture in tests/golden/ (tests/golden/generate.py runs
// torch.nn.MultiheadAttention), loaded through the safetensors reader and the state_dict
// mapping as a user's file would be. Output within 1e-4 and weights within 1e-5 of PyTorch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iomanip>
#include <set>
#include <sstream>

#include "tests/support/golden.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/state_dict.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::golden_fixture;
using testing::golden_fixture_names;

constexpr testing::Tolerance kOutputTolerance{.atol = 1e-4f, .rtol = 0.0f};
constexpr testing::Tolerance kWeightsTolerance{.atol = 1e-5f, .rtol = 0.0f};

TEST(GoldenFixtures, CoverWhatTheInteropIssueAsksFor) {
  auto names = golden_fixture_names();
  std::set<std::string> have(names.begin(), names.end());
  for (const char* wanted :
       {"self_attention", "cross_attention", "kdim_vdim", "no_bias", "causal", "key_padding_mask", "attn_mask_bool_2d",
        "attn_mask_float_2d", "attn_mask_bool_3d", "attn_mask_float_3d", "per_head_weights", "add_bias_kv",
        "add_zero_attn", "batch_first_false", "unbatched", "one_head", "single_query", "fully_masked_row",
        "awkward_sizes", "float16_weights", "bfloat16_weights"}) {
    EXPECT_TRUE(have.count(wanted)) << "missing fixture " << wanted << "; run tests/golden/generate.py";
  }
}

// A fixture is a folder holding a config.json: the __pycache__ Python writes beside generate.py
// when models/*/train.py import it (bench/decoding_torch.py run by hand; the suite's run of it
// did, before every test had PYTHONDONTWRITEBYTECODE) is none, nor is a folder without one.
// Listed as fixtures, they made test_cli_run throw a parse error at start, when it registers its
// fixture tests.
TEST(GoldenFixtures, AreTheFoldersThatHoldAConfig) {
  const fs::path root = fs::temp_directory_path() / ("vkattn_fixtures_" + std::to_string(::getpid()));
  fs::remove_all(root);
  for (const char* folder : {"b_fixture", "a_fixture", "__pycache__", "no_config"}) {
    fs::create_directories(root / folder);
  }
  for (const char* fixture : {"a_fixture", "b_fixture"}) std::ofstream(root / fixture / "config.json") << "{}";
  std::ofstream(root / "__pycache__" / "generate.cpython-313.pyc") << "bytecode";
  const auto names = testing::fixture_folders(root);
  fs::remove_all(root);
  EXPECT_EQ(names, (std::vector<std::string>{"a_fixture", "b_fixture"}));
}

class Golden : public testing::GpuTest, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(Golden, MatchesPyTorch) {
  const auto& [name, backend_name] = GetParam();
  auto fixture = golden_fixture(name);
  const auto& config = fixture.config;

  auto state = io::load_attention(fixture.weights(), fixture.heads_argument());
  ASSERT_EQ(state.config.num_heads, config.at("num_heads").get<int64_t>());
  state.config.batch_first = config.at("batch_first").get<bool>();
  state.config.add_zero_attn = config.at("add_zero_attn").get<bool>();
  MultiHeadAttention mha(state.config, state.weights);

  Tensor query = io::read_npy(fixture.npy("query"));
  Tensor key = fixture.has("key") ? io::read_npy(fixture.npy("key")) : query;
  Tensor value = fixture.has("value") ? io::read_npy(fixture.npy("value")) : query;
  ForwardOptions options = fixture.forward_options();
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  AttentionResult result = mha.forward(backend, query, key, value, options);

  Tensor expected_output = io::read_npy(fixture.npy("expected_output"));
  EXPECT_TRUE(testing::all_close(result.output, expected_output, kOutputTolerance));
  float weights_error = 0.0f;
  if (options.need_weights) {
    ASSERT_TRUE(result.weights);
    Tensor expected_weights = io::read_npy(fixture.npy("expected_weights"));
    EXPECT_TRUE(testing::all_close(*result.weights, expected_weights, kWeightsTolerance));
    weights_error = testing::max_abs_error(*result.weights, expected_weights);
  } else {
    EXPECT_FALSE(result.weights);
  }
  // The worst errors, for the record (--gtest_output=json:FILE keeps them).
  auto scientific = [](float v) {
    std::ostringstream s;
    s << std::scientific << std::setprecision(2) << v;
    return s.str();
  };
  RecordProperty("output_max_abs_error", scientific(testing::max_abs_error(result.output, expected_output)));
  RecordProperty("weights_max_abs_error", scientific(weights_error));

  // The fused path (one flash_attention step, no weights) matches PyTorch too.
  options.need_weights = false;
  options.attention = AttentionPath::fused;
  AttentionResult fused = mha.forward(backend, query, key, value, options);
  EXPECT_TRUE(testing::all_close(fused.output, expected_output, kOutputTolerance)) << "fused";
  RecordProperty("fused_output_max_abs_error", scientific(testing::max_abs_error(fused.output, expected_output)));
}

INSTANTIATE_TEST_SUITE_P(PyTorch, Golden,
                         ::testing::Combine(::testing::ValuesIn(golden_fixture_names()), ::testing::Values("cpu", "gpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

}  // namespace
}  // namespace vkattn
