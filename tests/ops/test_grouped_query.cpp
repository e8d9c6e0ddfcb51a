// Grouped-query attention and sliding windows in the steps that read keys and values:
// attention_scores, attention_values, flash_attention (every kernel variant) and flash_decoding,
// with H_kv = 1 (multi-query), H_kv < H and H_kv = H, against the reference; against the same
// steps on K and V copied per query head with repeat_interleave (bit for bit); a window against
// the unfused mask, and a window of at least L against plain causal attention (bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <ostream>
#include <tuple>

#include "engine/vulkan/step_plans.h"
#include "tests/support/expect_error.h"
#include "tests/support/flash_plans.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"

namespace vkattn {
namespace {

using ::testing::Bool;
using ::testing::Combine;
using ::testing::Values;
using testing::all_close;
using testing::random_tensor;
constexpr float kInf = std::numeric_limits<float>::infinity();

// B batch, H query heads, H_kv key/value heads, L queries, S keys, d head dim
struct Gqa {
  int64_t B, H, H_kv, L, S, d;
};
void PrintTo(const Gqa& a, std::ostream* os) {
  *os << "B=" << a.B << " H=" << a.H << " H_kv=" << a.H_kv << " L=" << a.L << " S=" << a.S << " d=" << a.d;
}
// 1, 3, 17, 113, L != S, d odd and d = 1; H_kv = 1 (MQA), H_kv = H (MHA) and between
const auto kShapes = Values(Gqa{1, 1, 1, 1, 1, 1}, Gqa{2, 4, 1, 3, 3, 3}, Gqa{1, 4, 2, 17, 17, 8}, Gqa{2, 6, 3, 17, 113, 5},
                            Gqa{1, 8, 2, 113, 17, 16}, Gqa{1, 3, 3, 65, 65, 17}, Gqa{2, 8, 4, 1, 113, 64});

// K or V (B, H_kv, S, d) with each head copied `group` times in a row: (B, H, S, d), torch's
// kv.repeat_interleave(group, dim=1) — what grouped-query attention computes without the copy.
Tensor repeat_interleave(const Tensor& kv, int64_t group) {
  const int64_t B = kv.shape[0], H_kv = kv.shape[1], plane = kv.shape[2] * kv.shape[3];
  Tensor out({B, H_kv * group, kv.shape[2], kv.shape[3]});
  for (int64_t n = 0; n < B * H_kv * group; ++n)
    std::copy_n(kv.data.begin() + n / group * plane, plane, out.data.begin() + n * plane);
  return out;
}

using Step = std::function<Value(Backend&, const std::vector<Value>&)>;
Tensor run(Backend& b, const std::vector<Tensor>& inputs, const Step& step) {
  std::vector<Value> values;
  for (size_t i = 0; i < inputs.size(); ++i) values.push_back(b.upload("in" + std::to_string(i), inputs[i]));
  return b.download(step(b, values));
}

class GroupedQuery : public testing::GpuTest, public ::testing::WithParamInterface<Gqa> {};

TEST_P(GroupedQuery, ScoresAndValuesReadTheSharedHead) {
  auto [B, H, H_kv, L, S, d] = GetParam();
  const int64_t group = H / H_kv;
  Tensor q = random_tensor({B, H, L, d}, 1), k = random_tensor({B, H_kv, S, d}, 2);
  Tensor p = random_tensor({B, H, L, S}, 3), v = random_tensor({B, H_kv, S, d}, 4);
  Step scores = [](Backend& b, const std::vector<Value>& x) { return b.attention_scores("attention_scores", x[0], x[1]); };
  Step values = [](Backend& b, const std::vector<Value>& x) { return b.attention_values("attention_values", x[0], x[1]); };
  for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
    SCOPED_TRACE(b->name());
    Tensor s = run(*b, {q, k}, scores), o = run(*b, {p, v}, values);
    EXPECT_EQ(s.shape, (Shape{B, H, L, S}));
    EXPECT_EQ(o.shape, (Shape{B, H, L, d}));
    // the shared head read in place equals the copy, bit for bit
    EXPECT_EQ(s.data, run(*b, {q, repeat_interleave(k, group)}, scores).data) << "scores";
    EXPECT_EQ(o.data, run(*b, {p, repeat_interleave(v, group)}, values).data) << "values";
  }
  EXPECT_TRUE(all_close(run(gpu(), {q, k}, scores), run(cpu(), {q, k}, scores), {}, {"b", "h", "i", "j"}));
  EXPECT_TRUE(all_close(run(gpu(), {p, v}, values), run(cpu(), {p, v}, values), {}, {"b", "h", "i", "c"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, GroupedQuery, kShapes);

// ---- flash_attention and the unfused path: heads shared, windows ------------------------------------
// not causal, causal, and causal with a window of 1 (each query its own key), 3, 17 and 1000
// (>= L: plain causal); with key padding that blocks the last batch item's keys 0 … 4, so its
// first rows are fully masked when causal
using Causal = std::tuple<bool, int64_t>;  // causal, window
const auto kCausal = Values(Causal{false, 0}, Causal{true, 0}, Causal{true, 1}, Causal{true, 3}, Causal{true, 17},
                            Causal{true, 1000});
class FlashWindow : public testing::GpuTest, public ::testing::WithParamInterface<std::tuple<Gqa, Causal, bool>> {};
TEST_P(FlashWindow, MatchesReferenceAndTheUnfusedSteps) {
  auto [shape, causality, padding] = GetParam();
  auto [causal, window] = causality;
  auto [B, H, H_kv, L, S, d] = shape;
  Tensor mask({B, S});
  if (padding)
    for (int64_t j = 0; j < std::min<int64_t>(S, 5); ++j) mask.at({B - 1, j}) = -kInf;
  const std::vector<Tensor> in{random_tensor({B, H, L, d}, 5), random_tensor({B, H_kv, S, d}, 6),
                               random_tensor({B, H_kv, S, d}, 7), mask};
  const Value* none = nullptr;
  auto fused = [&, causal = causal, window = window, padding = padding](Backend& b, const std::vector<Value>& x) {
    return b.flash_attention("flash_attention", x[0], x[1], x[2], none, padding ? &x[3] : none, causal, window);
  };
  auto unfused = [&, causal = causal, window = window, padding = padding](Backend& b, const std::vector<Value>& x) {
    Value s = b.attention_scores("attention_scores", x[0], x[1]);
    s = b.attention_mask("attention_mask", s, none, padding ? &x[3] : none, causal, window);
    return b.attention_values("attention_values", b.softmax("softmax", s), x[2]);
  };
  const std::vector<std::string> dims{"b", "h", "i", "c"};
  Tensor expected = run(cpu(), in, fused);
  EXPECT_TRUE(all_close(run(cpu(), in, unfused), expected, {}, dims)) << "unfused reference";
  EXPECT_TRUE(all_close(run(gpu(), in, unfused), expected, {}, dims)) << "unfused GPU";
  EXPECT_TRUE(all_close(run(gpu(), in, fused), expected, {}, dims)) << "fused GPU, the device's plan";
  // every kernel variant: 4 rows a subgroup from storage buffers, and a row per invocation
  VulkanBackend four_rows(testing::shared_context(), {.flash_rows = 4u});
  EXPECT_TRUE(all_close(run(four_rows, in, fused), expected, {}, dims)) << "fused GPU, 4 rows a subgroup";
  VulkanBackend rows(testing::shared_context(), {.subgroups = false});
  EXPECT_TRUE(all_close(run(rows, in, fused), expected, {}, dims)) << "fused GPU, a row per invocation";
  for (const vulkan::FlashPlan& plan : testing::tiled_flash_variants(testing::shared_context()->device_report())) {
    if (plan.shared_bytes(uint32_t(d)) > testing::shared_context()->device_report().max_shared_memory_bytes) continue;
    VulkanBackend tiled(testing::shared_context(), {.flash = std::make_shared<const vulkan::FlashPlan>(plan)});
    EXPECT_TRUE(all_close(run(tiled, in, fused), expected, {}, dims)) << "fused GPU, " << plan.describe();
  }
  // the shared heads equal K and V copied per query head, bit for bit, on each backend
  const std::vector<Tensor> copied{in[0], repeat_interleave(in[1], H / H_kv), repeat_interleave(in[2], H / H_kv), mask};
  EXPECT_EQ(run(cpu(), copied, fused).data, expected.data);
  EXPECT_EQ(run(gpu(), copied, fused).data, run(gpu(), in, fused).data);
  // a window that holds every key is plain causal attention, bit for bit
  if (window >= L) {
    auto plain = [&, padding = padding](Backend& b, const std::vector<Value>& x) {
      return b.flash_attention("flash_attention", x[0], x[1], x[2], none, padding ? &x[3] : none, true, 0);
    };
    EXPECT_EQ(run(gpu(), in, fused).data, run(gpu(), in, plain).data);
    EXPECT_EQ(expected.data, run(cpu(), in, plain).data);
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, FlashWindow,
                         Combine(kShapes, kCausal, Bool()));
// What the runs at other subgroup widths take (tests/CMakeLists.txt): the flash kernels' row groups
// and key blocks both follow the lane count, and a window starts mid-block
INSTANTIATE_TEST_SUITE_P(Lanes, FlashWindow,
                         Combine(Values(Gqa{2, 6, 3, 17, 113, 5}, Gqa{1, 8, 2, 113, 17, 16}),
                                 Values(Causal{true, 0}, Causal{true, 3}, Causal{true, 17}), Values(true)));

// A window changes what a row sees: query 10 with window 3 attends to keys 8, 9, 10 alone (its
// output is the average of their values when the scores tie), where plain causal sees 0 … 10.
TEST_F(GroupedQuery, AWindowedRowAveragesItsLastWValues) {
  const int64_t L = 12, d = 2;
  Tensor q({1, 1, L, d}), k({1, 1, L, d}), v({1, 1, L, d});  // q, k zero: every score ties
  for (int64_t j = 0; j < L; ++j) v.at({0, 0, j, 0}) = static_cast<float>(j);
  for (Backend* b : {static_cast<Backend*>(&cpu()), static_cast<Backend*>(&gpu())}) {
    Value Q = b->upload("q", q), K = b->upload("k", k), V = b->upload("v", v);
    Tensor windowed = b->download(b->flash_attention("flash_attention", Q, K, V, nullptr, nullptr, true, 3));
    Tensor causal = b->download(b->flash_attention("flash_attention", Q, K, V, nullptr, nullptr, true, 0));
    EXPECT_FLOAT_EQ(windowed.at({0, 0, 10, 0}), 9.0f) << b->name();  // (8 + 9 + 10) / 3
    EXPECT_FLOAT_EQ(causal.at({0, 0, 10, 0}), 5.0f) << b->name();    // (0 + … + 10) / 11
    EXPECT_FLOAT_EQ(windowed.at({0, 0, 1, 0}), 0.5f) << b->name();   // row 1: keys 0, 1
  }
}

// ---- flash_decoding: caches of H_kv heads, windows over the cache --------------------------------------
class DecodingWindow : public testing::GpuTest, public ::testing::WithParamInterface<std::tuple<Gqa, int64_t, int64_t>> {};
TEST_P(DecodingWindow, MatchesReferenceAndFlashAttentionsLastRows) {
  auto [shape, window, parts] = GetParam();
  auto [B, H, H_kv, L, S, d] = shape;
  const int64_t C = S + 3;  // a cache with room left
  Tensor q = random_tensor({B, H, L, d}, 8), k = random_tensor({B, H_kv, C, d}, 9), v = random_tensor({B, H_kv, C, d}, 10);
  auto decode = [&](Backend& b) {
    Value p = b.flash_decoding("flash_decoding", b.upload("q", q), b.upload("k", k), b.upload("v", v), S, nullptr, true,
                               window, std::min(parts, S));
    return b.download(b.attention_combine("attention_combine", p));
  };
  Tensor expected = decode(cpu());
  EXPECT_TRUE(all_close(decode(gpu()), expected, {}, {"b", "h", "i", "c"}));
  // flash_attention over the whole sequence, the queries at its last L positions
  Tensor q_full({B, H, S, d}), k_used({B, H_kv, S, d}), v_used({B, H_kv, S, d});
  for (int64_t n = 0; n < B * H_kv; ++n) {
    std::copy_n(k.data.begin() + n * C * d, S * d, k_used.data.begin() + n * S * d);
    std::copy_n(v.data.begin() + n * C * d, S * d, v_used.data.begin() + n * S * d);
  }
  for (int64_t n = 0; n < B * H; ++n) std::copy_n(q.data.begin() + n * L * d, L * d, q_full.data.begin() + (n * S + S - L) * d);
  Value Q = cpu().upload("q", q_full), K = cpu().upload("k", k_used), V = cpu().upload("v", v_used);
  Tensor full = cpu().download(cpu().flash_attention("flash_attention", Q, K, V, nullptr, nullptr, true, window));
  Tensor last({B, H, L, d});
  for (int64_t n = 0; n < B * H; ++n) std::copy_n(full.data.begin() + (n * S + S - L) * d, L * d, last.data.begin() + n * L * d);
  EXPECT_TRUE(all_close(expected, last, {}, {"b", "h", "i", "c"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, DecodingWindow,
                         Combine(Values(Gqa{1, 1, 1, 1, 1, 1}, Gqa{2, 4, 1, 1, 3, 3}, Gqa{1, 4, 2, 17, 17, 8},
                                        Gqa{2, 6, 3, 5, 113, 5}, Gqa{1, 8, 8, 1, 113, 64}),
                                 Values(int64_t{0}, int64_t{1}, int64_t{3}, int64_t{40}), Values(int64_t{1}, int64_t{4})));

// ---- bad configurations -------------------------------------------------------------------------
TEST_F(GroupedQuery, HeadsThatDoNotShareEvenlyOrAWindowWithoutCausalAreOneLineErrors) {
  Backend& b = gpu();
  Value q = b.upload("q", random_tensor({1, 4, 3, 8}, 1)), k = b.upload("k", random_tensor({1, 3, 3, 8}, 2));
  Value k2 = b.upload("k2", random_tensor({1, 2, 3, 8}, 3)), p = b.upload("p", random_tensor({1, 4, 3, 3}, 4));
  testing::expect_error<ShapeError>([&] { b.attention_scores("attention_scores", q, k); },
                                    {"attention_scores: q (1, 4, 3, 8) has 4 heads, not a multiple of key k (1, 3, 3, 8)'s 3"});
  testing::expect_error<ShapeError>([&] { b.attention_values("attention_values", p, k); }, {"not a multiple of value"});
  testing::expect_error<ShapeError>([&] { b.flash_attention("flash_attention", q, k, k, nullptr, nullptr, true); },
                                    {"not a multiple of key"});
  testing::expect_error<ShapeError>(
      [&] { b.flash_attention("flash_attention", q, k2, k2, nullptr, nullptr, false, 2); },
      {"flash_attention: window=2 is a sliding window over past keys and needs causal attention"});
  testing::expect_error<ShapeError>([&] { b.flash_attention("flash_attention", q, k2, k2, nullptr, nullptr, true, -1); },
                                    {"window=-1 must be >= 1 keys, or 0 for none"});
  Value s = b.attention_scores("attention_scores", q, k2);
  testing::expect_error<ShapeError>([&] { b.attention_mask("attention_mask", s, nullptr, nullptr, false, 4); },
                                    {"needs causal attention"});
  testing::expect_error<ShapeError>([&] { b.flash_decoding("flash_decoding", q, k, k, 3, nullptr, true, 0); },
                                    {"not a multiple of key cache"});
}

}  // namespace
}  // namespace vkattn
