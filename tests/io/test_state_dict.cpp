// nn.MultiheadAttention state_dict names -> config and weights: in_proj_weight split into q/k/v,
// separate projections for kdim/vdim, biases and bias_k/bias_v by their presence, num_heads from
// the caller or __metadata__, and a FileError naming every missing, extra or mis-shaped tensor.
#include <gtest/gtest.h>

#include <numeric>

#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/io/state_dict.h"

namespace vkattn {
namespace {

using testing::expect_error;

// A tensor whose values count up from `start`, so a split can be checked element by element.
Tensor iota(Shape shape, float start = 0) {
  Tensor t(std::move(shape));
  std::iota(t.data.begin(), t.data.end(), start);
  return t;
}

// PyTorch's state_dict of nn.MultiheadAttention(E=4, bias=True) with packed projections.
io::Safetensors packed(int64_t E = 4) {
  io::Safetensors f;
  f.tensors["in_proj_weight"] = iota({3 * E, E});
  f.tensors["in_proj_bias"] = iota({3 * E}, 1000);
  f.tensors["out_proj.weight"] = iota({E, E}, 2000);
  f.tensors["out_proj.bias"] = iota({E}, 3000);
  f.metadata["num_heads"] = "2";
  return f;
}

// kdim = 3, vdim = 5: separate projections, as PyTorch stores them.
io::Safetensors separate() {
  io::Safetensors f = packed();
  f.tensors.erase("in_proj_weight");
  f.tensors["q_proj_weight"] = iota({4, 4});
  f.tensors["k_proj_weight"] = iota({4, 3}, 100);
  f.tensors["v_proj_weight"] = iota({4, 5}, 200);
  return f;
}

TEST(StateDict, SplitsThePackedProjectionsInPyTorchsOrder) {
  auto state = io::attention_from_state_dict(packed(), 0, "w.safetensors");
  const auto& c = state.config;
  EXPECT_EQ(c.embed_dim, 4);
  EXPECT_EQ(c.num_heads, 2);
  EXPECT_TRUE(c.bias);
  EXPECT_FALSE(c.add_bias_kv);
  EXPECT_EQ(c.key_dim(), 4);
  EXPECT_EQ(c.value_dim(), 4);
  const auto& w = state.weights;
  EXPECT_EQ(w.q_proj_weight.data, iota({4, 4}, 0).data);  // rows 0..E-1
  EXPECT_EQ(w.k_proj_weight.data, iota({4, 4}, 16).data);  // rows E..2E-1
  EXPECT_EQ(w.v_proj_weight.data, iota({4, 4}, 32).data);  // rows 2E..3E-1
  EXPECT_EQ(w.q_proj_bias->data, iota({4}, 1000).data);
  EXPECT_EQ(w.k_proj_bias->data, iota({4}, 1004).data);
  EXPECT_EQ(w.v_proj_bias->data, iota({4}, 1008).data);
  EXPECT_EQ(w.out_proj_weight.data, iota({4, 4}, 2000).data);
  EXPECT_EQ(w.out_proj_bias->data, iota({4}, 3000).data);
  MultiHeadAttention mha(state.config, state.weights);  // and the engine accepts them
}

// A BF16 file's in_proj_weight (whole numbers, all bfloat16 numbers) split and packed again: still
// 16-bit numbers (`narrow`), so the device keeps each in half the memory; mixed parts stack as float32.
TEST(StateDict, SixteenBitProjectionsStaySixteenBitSplitAndStacked) {
  io::Safetensors f = packed();
  f.tensors["in_proj_weight"].narrow = Narrow::bfloat16;
  const auto w = io::attention_from_state_dict(f, 0, "w.safetensors").weights;
  for (const Tensor* t : {&w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight}) EXPECT_EQ(t->narrow, Narrow::bfloat16);
  EXPECT_EQ(w.k_proj_weight.data, iota({4, 4}, 16).data);
  EXPECT_EQ(w.out_proj_weight.narrow, Narrow::none);
  const Tensor stacked = stack_rows({&w.q_proj_weight, &w.k_proj_weight, &w.v_proj_weight});
  EXPECT_EQ(stacked.narrow, Narrow::bfloat16);
  EXPECT_EQ(stacked.data, f.tensors["in_proj_weight"].data);
  EXPECT_EQ(stack_rows({&w.q_proj_weight, &w.out_proj_weight}).narrow, Narrow::none);
}

// attention_state_dict writes back, tensor for tensor, what attention_from_state_dict read.
TEST(StateDict, WritesBackThePyTorchNamesItRead) {
  io::Safetensors with_bias_kv = packed();
  with_bias_kv.tensors["bias_k"] = iota({1, 1, 4}, 4000);
  with_bias_kv.tensors["bias_v"] = iota({1, 1, 4}, 5000);
  for (const io::Safetensors& file : {packed(), separate(), with_bias_kv}) {
    auto state = io::attention_from_state_dict(file, 0, "w.safetensors");
    auto written = io::attention_state_dict(state.config, state.weights);
    ASSERT_EQ(written.size(), file.tensors.size());
    for (const auto& [name, tensor] : file.tensors) {
      ASSERT_TRUE(written.count(name)) << name;
      EXPECT_EQ(written[name].shape, tensor.shape) << name;
      EXPECT_EQ(written[name].data, tensor.data) << name;
    }
  }
}

TEST(StateDict, SeparateProjectionsGiveKdimAndVdim) {
  auto state = io::attention_from_state_dict(separate(), 0, "w.safetensors");
  EXPECT_EQ(state.config.kdim, 3);
  EXPECT_EQ(state.config.vdim, 5);
  EXPECT_EQ(state.weights.k_proj_weight.data, iota({4, 3}, 100).data);
  EXPECT_EQ(state.weights.v_proj_weight.data, iota({4, 5}, 200).data);
  MultiHeadAttention mha(state.config, state.weights);
}

TEST(StateDict, NoBiasTensorsMeansBiasFalse) {
  auto f = packed();
  f.tensors.erase("in_proj_bias");
  f.tensors.erase("out_proj.bias");
  auto state = io::attention_from_state_dict(f, 0, "w.safetensors");
  EXPECT_FALSE(state.config.bias);
  EXPECT_FALSE(state.weights.q_proj_bias);
  EXPECT_FALSE(state.weights.out_proj_bias);
  MultiHeadAttention mha(state.config, state.weights);
}

TEST(StateDict, BiasKvTurnsAddBiasKvOnAndDropsItsUnitDims) {
  auto f = packed();
  f.tensors["bias_k"] = iota({1, 1, 4}, 50);
  f.tensors["bias_v"] = iota({1, 1, 4}, 60);
  auto state = io::attention_from_state_dict(f, 0, "w.safetensors");
  EXPECT_TRUE(state.config.add_bias_kv);
  EXPECT_EQ(state.weights.bias_k->shape, (Shape{4}));
  EXPECT_EQ(state.weights.bias_k->data, iota({4}, 50).data);
  EXPECT_EQ(state.weights.bias_v->data, iota({4}, 60).data);
  MultiHeadAttention mha(state.config, state.weights);
}

TEST(StateDict, HeadsComeFromTheCallerOrTheMetadata) {
  auto f = packed();
  EXPECT_EQ(io::attention_from_state_dict(f, 2, "w").config.num_heads, 2);  // both, agreeing
  f.metadata.clear();
  EXPECT_EQ(io::attention_from_state_dict(f, 4, "w").config.num_heads, 4);  // the caller only
  expect_error<FileError>([&] { io::attention_from_state_dict(f, 0, "w.safetensors"); },
                          {"w.safetensors: the number of heads is unknown", "--heads", "__metadata__"});
  f.metadata["num_heads"] = "2";
  expect_error<FileError>([&] { io::attention_from_state_dict(f, 4, "w.safetensors"); },
                          {"--heads 4 disagrees with num_heads 2 in __metadata__"});
  for (const char* bad : {"two", "2x", "0", "-2", ""}) {
    f.metadata["num_heads"] = bad;
    expect_error<FileError>([&] { io::attention_from_state_dict(f, 0, "w.safetensors"); },
                            {std::string("__metadata__ num_heads is '") + bad + "', not a positive integer"});
  }
}

struct BadStateDict {
  const char* name;
  std::function<void(io::Safetensors&)> edit;
  const char* message;
  bool separate = false;
};
void PrintTo(const BadStateDict& bad, std::ostream* os) { *os << bad.name; }

class StateDictErrors : public ::testing::TestWithParam<BadStateDict> {};

TEST_P(StateDictErrors, NameTheTensorAndTheShapeExpected) {
  auto f = GetParam().separate ? separate() : packed();
  GetParam().edit(f);
  expect_error<FileError>([&] { io::attention_from_state_dict(f, 0, "w.safetensors"); },
                          {"w.safetensors: ", GetParam().message});
}

INSTANTIATE_TEST_SUITE_P(
    StateDict, StateDictErrors,
    ::testing::Values(
        BadStateDict{"missing_out_proj", [](auto& f) { f.tensors.erase("out_proj.weight"); },
                     "missing tensor 'out_proj.weight', expected shape (E, E)"},
        BadStateDict{"out_proj_not_square", [](auto& f) { f.tensors["out_proj.weight"] = iota({4, 3}); },
                     "tensor 'out_proj.weight' has shape (4, 3), expected (E, E)"},
        BadStateDict{"missing_in_proj", [](auto& f) { f.tensors.erase("in_proj_weight"); },
                     "missing tensor 'in_proj_weight', expected shape (3·E, E) = (12, 4) (or q_proj_weight"},
        BadStateDict{"in_proj_misshaped", [](auto& f) { f.tensors["in_proj_weight"] = iota({12, 5}); },
                     "tensor 'in_proj_weight' has shape (12, 5), expected (3·E, E) = (12, 4)"},
        BadStateDict{"in_proj_bool", [](auto& f) { f.tensors["in_proj_weight"].dtype = DType::boolean; },
                     "tensor 'in_proj_weight' is bool; a float tensor is expected"},
        BadStateDict{"in_proj_and_separate", [](auto& f) { f.tensors["k_proj_weight"] = iota({4, 4}); },
                     "tensor 'k_proj_weight' given beside 'in_proj_weight'"},
        BadStateDict{"missing_v_proj", [](auto& f) { f.tensors.erase("v_proj_weight"); },
                     "missing tensor 'v_proj_weight', expected shape (E, vdim) = (4, vdim)", true},
        BadStateDict{"k_proj_wrong_rows", [](auto& f) { f.tensors["k_proj_weight"] = iota({5, 3}); },
                     "tensor 'k_proj_weight' has shape (5, 3), expected (E, kdim) = (4, kdim)", true},
        BadStateDict{"q_proj_not_square", [](auto& f) { f.tensors["q_proj_weight"] = iota({4, 3}); },
                     "tensor 'q_proj_weight' has shape (4, 3), expected (E, E) = (4, 4)", true},
        BadStateDict{"in_proj_bias_only", [](auto& f) { f.tensors.erase("out_proj.bias"); },
                     "missing tensor 'out_proj.bias', expected shape (E,) = (4,)"},
        BadStateDict{"out_proj_bias_only", [](auto& f) { f.tensors.erase("in_proj_bias"); },
                     "missing tensor 'in_proj_bias', expected shape (3·E,) = (12,)"},
        BadStateDict{"in_proj_bias_misshaped", [](auto& f) { f.tensors["in_proj_bias"] = iota({4}); },
                     "tensor 'in_proj_bias' has shape (4,), expected (3·E,) = (12,)"},
        BadStateDict{"bias_k_only", [](auto& f) { f.tensors["bias_k"] = iota({1, 1, 4}); },
                     "missing tensor 'bias_v', expected shape (1, 1, E) = (1, 1, 4)"},
        BadStateDict{"bias_v_flat",
                     [](auto& f) {
                       f.tensors["bias_k"] = iota({1, 1, 4});
                       f.tensors["bias_v"] = iota({4});
                     },
                     "tensor 'bias_v' has shape (4,), expected (1, 1, E) = (1, 1, 4)"},
        BadStateDict{"extra_tensor", [](auto& f) { f.tensors["linear1.weight"] = iota({8, 4}); },
                     "unexpected tensor 'linear1.weight' (8, 4) in an nn.MultiheadAttention state_dict"},
        BadStateDict{"prefixed",
                     [](auto& f) {
                       f.tensors["self_attn.in_proj_weight"] = f.tensors["in_proj_weight"];
                       f.tensors.erase("in_proj_weight");
                     },
                     "unexpected tensor 'self_attn.in_proj_weight' (12, 4) in an nn.MultiheadAttention state_dict; "
                     "save the nn.MultiheadAttention's own state_dict, without the 'self_attn.' prefix"}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace vkattn
