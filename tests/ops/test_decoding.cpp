// Decoding with a key/value cache: the three steps it adds — kv_cache_append, flash_decoding and
// attention_combine — against the reference and against flash_attention, over shapes that break
// kernels and split counts of 1, 2 and many; and CausalLM's token-by-token decode() against its
// full forward() at every position, on both backends; and caches kept float16 or bfloat16.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <map>
#include <ostream>
#include <tuple>

#include "engine/vulkan/context.h"
#include "engine/vulkan/faults.h"
#include "engine/vulkan/gemm_plan.h"
#include "engine/vulkan/step_plans.h"
#include "reference/reference.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/printers.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

using ::testing::Bool;
using ::testing::Combine;
using ::testing::Values;
using testing::all_close;
using testing::random_tensor;
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- the reference, by hand --------------------------------------------------------------------
TEST(DecodingReference, KvCacheAppendWritesRowsAtThePositionAndKeepsTheRest) {
  float cache[] = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};  // (N=2, C=3, d=2)
  const float rows[] = {7, 8, 9, 10};                      // (N=2, T=1, d=2)
  reference::kv_cache_append(cache, rows, 2, 3, 1, 2, 1);
  EXPECT_EQ(std::vector<float>(cache, cache + 12), (std::vector<float>{1, 1, 7, 8, 3, 3, 4, 4, 9, 10, 6, 6}));
}

// The rounding a 16-bit cache's values take (reference/sixteen_bit.cpp; the shaders' narrow_bits
// is the same steps): by hand at the edges, and against the compiler's own float -> _Float16.
TEST(DecodingReference, SixteenBitNumbersAreTheNearestTiesToEven) {
  const float one_ulp16 = std::ldexp(1.0f, -10), tiny16 = std::ldexp(1.0f, -24);
  const std::vector<std::pair<float, uint32_t>> float16 = {{1.0f, 0x3c00},
                                                           {1.0f + one_ulp16 / 2, 0x3c00},
                                                           {1.0f + 3 * one_ulp16 / 2, 0x3c02},
                                                           {-2.5f, 0xc100},
                                                           {65504.0f, 0x7bff},
                                                           {65519.99f, 0x7bff},
                                                           {65520.0f, 0x7c00},
                                                           {std::ldexp(1.0f, -14), 0x0400},
                                                           {tiny16, 0x0001},
                                                           {-tiny16, 0x8001},
                                                           {tiny16 / 2, 0x0000},
                                                           {tiny16 * 1.5f, 0x0002},
                                                           {tiny16 * 0.75f, 0x0001},
                                                           {1e-10f, 0x0000},
                                                           {kInf, 0x7c00}};
  for (auto [value, bits] : float16) EXPECT_EQ(reference::narrow_bits(value, 1), bits) << value;
  const float one_ulp_bf16 = std::ldexp(1.0f, -7);
  const std::vector<std::pair<float, uint32_t>> bfloat16 = {
      {1.0f, 0x3f80}, {1.0f + one_ulp_bf16 / 2, 0x3f80}, {1.0f + 3 * one_ulp_bf16 / 2, 0x3f82}, {-kInf, 0xff80}};
  for (auto [value, bits] : bfloat16) EXPECT_EQ(reference::narrow_bits(value, 2), bits) << value;
  for (int format : {1, 2}) EXPECT_TRUE(std::isnan(reference::round_to(std::nanf(""), format)));
  // every float16 widens and narrows back to itself
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;  // NaNs
    ASSERT_EQ(reference::narrow_bits(reference::widen_bits(bits, 1), 1), bits) << std::hex << bits;
    ASSERT_EQ(reference::narrow_bits(reference::widen_bits(bits, 2), 2), bits) << std::hex << bits;
  }
  // a million floats from 2^-31 to 2^18 (below float16's subnormals, past its largest), either
  // sign, as the compiler rounds them
  uint32_t state = 12345;
  for (int i = 0; i < 1000000; ++i) {
    state = state * 1664525u + 1013904223u;
    const uint32_t exponent = 96u + (state >> 8) % 50u;
    const float value = std::bit_cast<float>((state & 0x80000000u) | (exponent << 23) | (state * 2654435761u >> 9));
    ASSERT_EQ(reference::narrow_bits(value, 1), std::bit_cast<uint16_t>(static_cast<_Float16>(value))) << value;
  }
}

TEST(DecodingReference, AttentionCombineWeighsEachPartByItsMaxAndSum) {
  // one row, d = 1, two parts: part 0 saw scores {0} (m 0, l 1, output 1·v = 2), part 1 scores
  // {ln 3} (m ln 3, l 1, output 1·v = 5): softmax weights 1/4 and 3/4 -> 2/4 + 15/4 = 4.25
  const float partials[] = {2, 0, 1, 5, std::log(3.0f), 1};
  float out = 0;
  reference::attention_combine(partials, &out, 1, 2, 1);
  EXPECT_NEAR(out, 4.25f, 1e-6f);
  // a part that saw no key (m -1e30, l 0) changes nothing; none at all gives zeros
  const float with_empty[] = {2, 0, 1, 0, -1e30f, 0};
  reference::attention_combine(with_empty, &out, 1, 2, 1);
  EXPECT_NEAR(out, 2.0f, 1e-6f);
  const float empty[] = {0, -1e30f, 0, 0, -1e30f, 0};
  reference::attention_combine(empty, &out, 1, 2, 1);
  EXPECT_EQ(out, 0.0f);
}

// ---- GPU against reference ---------------------------------------------------------------------
class Decoding : public testing::GpuTest {};

struct Append {
  int64_t N, C, T, d, position;
};
void PrintTo(const Append& a, std::ostream* os) {
  *os << "N=" << a.N << " C=" << a.C << " T=" << a.T << " d=" << a.d << " at " << a.position;
}
// In place, into a cache of float32 or kept float16 or bfloat16. A 16-bit cache holds two
// elements a 32-bit word on the device, so an odd d or position starts rows mid-word, T = C writes
// neighbouring rows' shared words at once, and an odd element count leaves a half word unused.
// Every written value is rounded as the reference rounds it (float32: kept as it is), bit for bit;
// every other keeps its bits.
class KvCacheAppend : public Decoding, public ::testing::WithParamInterface<std::tuple<Append, Narrow>> {};
TEST_P(KvCacheAppend, WritesTheRowsRoundedToTheCacheAndKeepsTheRestBitForBit) {
  auto [shape, format] = GetParam();
  auto [N, C, T, d, position] = shape;
  const auto rounded = [format](float v) { return reference::round_to(v, static_cast<int>(format)); };
  Tensor cache = random_tensor({1, N, C, d}, 1), rows = random_tensor({1, N, T, d}, 2);
  for (float& v : cache.data) v = rounded(v * 100);  // the cache's own numbers
  for (float& v : rows.data) v *= 100;               // ±100: float16's steps up to 1/16
  auto run = [&](Backend& b) {
    Value c = b.upload_cache("cache", cache, format);
    Value out = b.kv_cache_append("kv_cache_append_k", c, b.upload("rows", rows), position);
    EXPECT_EQ(out.storage, c.storage) << "written in place";
    EXPECT_EQ(out.narrow, format);
    return b.download(c);
  };
  Tensor expected = run(cpu());
  EXPECT_TRUE(all_close(run(gpu()), expected, {0, 0}));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < C; ++s)
      for (int64_t c = 0; c < d; ++c) {
        const size_t at = static_cast<size_t>((n * C + s) * d + c);
        const bool written = s >= position && s < position + T;
        const auto row = [&] { return rows.data[static_cast<size_t>((n * T + s - position) * d + c)]; };
        ASSERT_EQ(expected.data[at], written ? rounded(row()) : cache.data[at]);
      }
}
INSTANTIATE_TEST_SUITE_P(Sweep, KvCacheAppend,
                         Combine(Values(Append{1, 1, 1, 1, 0}, Append{3, 17, 1, 3, 16}, Append{3, 17, 2, 3, 7},
                                        Append{8, 113, 17, 64, 50}, Append{2, 65, 65, 5, 0}, Append{3, 7, 7, 3, 0},
                                        Append{17, 1000, 1, 17, 999}),
                                 Values(Narrow::none, Narrow::float16, Narrow::bfloat16)));

TEST_F(Decoding, KvCacheAppendPastTheCapacityNamesIt) {
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    Value cache = b->upload("cache", Tensor({1, 2, 8, 4}));
    Value rows = b->upload("rows", Tensor({1, 2, 3, 4}));
    testing::expect_error<ShapeError>([&] { b->kv_cache_append("kv_cache_append_k", cache, rows, 6); }, {"kv_cache_append_k: the cache holds at most 8 positions (its capacity) but 3 new rows at position 6 "
                 "would end at 9"});
  }
}

// B, H, L new rows, S keys in a cache of capacity C, head dim d
struct Decode {
  int64_t B, H, L, S, C, d;
};
void PrintTo(const Decode& a, std::ostream* os) {
  *os << "B=" << a.B << " H=" << a.H << " L=" << a.L << " S=" << a.S << " C=" << a.C << " d=" << a.d;
}
// A device backend whose flash_decoding walks each part with a group of a subgroup's lanes
// (`lanes`: its _subgroup build), or an invocation a part; none, once the refusal is checked, where
// lanes are asked of a device that guarantees none.
std::unique_ptr<VulkanBackend> decoding_backend(bool lanes, VulkanBackendOptions options = {}) {
  options.flash_decoding_subgroups = lanes;
  if (lanes && !vulkan::decoding_part_lanes(testing::shared_context()->device_report(), 4)) {
    testing::expect_error<DeviceError>([&] { VulkanBackend(testing::shared_context(), options); },
                                       {"flash_decoding_subgroups: ", "guarantees no lanes"});
    return nullptr;
  }
  return std::make_unique<VulkanBackend>(testing::shared_context(), options);
}

// parts: 1, 2, or every key its own part (0 = S); each part walked by one invocation, or by lanes
class FlashDecoding : public Decoding,
                      public ::testing::WithParamInterface<std::tuple<Decode, int64_t, bool, bool, bool>> {};
TEST_P(FlashDecoding, MatchesReferenceAndFlashAttention) {
  auto [shape, parts_wanted, causal, padding, lanes] = GetParam();
  auto [B, H, L, S, C, d] = shape;
  const auto device = decoding_backend(lanes);
  if (!device) return;  // refused, as it should be
  const int64_t parts = parts_wanted == 0 ? S : std::min(parts_wanted, S);
  Tensor q = random_tensor({B, H, L, d}, 1), k = random_tensor({B, H, C, d}, 2), v = random_tensor({B, H, C, d}, 3);
  // padding: the last sequence's first keys blocked, the rest open; with B > 1, its first row
  // (causal, at position S - L) sees none of them when every key up to it is blocked
  Tensor mask({B, S});
  if (padding)
    for (int64_t j = 0; j < std::min<int64_t>(S, S - L + 1); ++j) mask.data[static_cast<size_t>((B - 1) * S + j)] = -kInf;
  auto run = [&](Backend& b, Tensor* partials) {
    Value p = b.flash_decoding("flash_decoding", b.upload("q", q), b.upload("k", k), b.upload("v", v), S,
                               padding ? &static_cast<const Value&>(b.upload("mask", mask)) : nullptr, causal, 0, parts);
    EXPECT_EQ(p.shape, (Shape{B, H, L, parts, d + 2}));
    if (partials) *partials = b.download(p);
    return b.download(b.attention_combine("attention_combine", p));
  };
  Tensor cpu_partials, gpu_partials;
  Tensor expected = run(cpu(), &cpu_partials);
  Tensor actual = run(*device, &gpu_partials);
  EXPECT_TRUE(all_close(gpu_partials, cpu_partials, {}, {"b", "h", "i", "part", "c"}));
  EXPECT_TRUE(all_close(actual, expected, {}, {"b", "h", "i", "c"}));

  // flash_attention over the full sequence (the cache's first S rows as a (B, H, S, d) tensor,
  // queries at the last L positions of an S-row query whose other rows are zeros) gives the same
  Tensor k_used({B, H, S, d}), v_used({B, H, S, d}), q_full({B, H, S, d});
  for (int64_t bh = 0; bh < B * H; ++bh) {
    std::copy_n(k.data.begin() + bh * C * d, S * d, k_used.data.begin() + bh * S * d);
    std::copy_n(v.data.begin() + bh * C * d, S * d, v_used.data.begin() + bh * S * d);
    std::copy_n(q.data.begin() + bh * L * d, L * d, q_full.data.begin() + (bh * S + S - L) * d);
  }
  Value qf = cpu().upload("q", q_full), kf = cpu().upload("k", k_used), vf = cpu().upload("v", v_used);
  Value m = cpu().upload("mask", mask);
  Tensor full = cpu().download(cpu().flash_attention("flash_attention", qf, kf, vf, nullptr, padding ? &m : nullptr, causal));
  Tensor last({B, H, L, d});
  for (int64_t bh = 0; bh < B * H; ++bh)
    std::copy_n(full.data.begin() + (bh * S + S - L) * d, L * d, last.data.begin() + bh * L * d);
  EXPECT_TRUE(all_close(actual, last, {}, {"b", "h", "i", "c"}));
}
INSTANTIATE_TEST_SUITE_P(Sweep, FlashDecoding,
                         Combine(Values(Decode{1, 1, 1, 1, 1, 1}, Decode{2, 3, 1, 17, 20, 3},
                                        Decode{1, 8, 1, 113, 113, 64}, Decode{3, 2, 5, 17, 30, 4},
                                        Decode{2, 2, 17, 17, 17, 5}, Decode{1, 4, 1, 1000, 1024, 16},
                                        Decode{2, 3, 3, 113, 120, 40}),
                                 Values(int64_t{1}, int64_t{2}, int64_t{0}), Bool(), Bool(), Bool()));

// flash_decoding_combine: where a split has at most a workgroup's parts (64: VulkanBackendOptions::
// workgroup_size), flash_decoding's own dispatch merges them (its COMBINE build; a GPU's rule,
// asked for here on CPU devices, which do not by rule: `ByRule` below) — the device's
// two steps' numbers (fold_into_store off: the same merge, shaders/combine_parts.glsl), bit for
// bit on lavapipe and SwiftShader, 3e-7 relative allowed for a compiler that contracts the merge's
// arithmetic differently; the reference's to 1e-5; rows that see no key are zeros. The trace says
// attention_combine was folded, and ran on no dispatch of its own; past 64 parts (past 128 / G
// where lanes walk each part, G of them), and in a trace with values, the two steps run. Two
// query heads share a cached head where H is even.
class FlashDecodingCombine : public Decoding,
                             public ::testing::WithParamInterface<std::tuple<Decode, int64_t, bool, bool, bool>> {};
TEST_P(FlashDecodingCombine, MergesThePartsInItsOwnDispatchWithTheTwoStepsNumbers) {
  auto [shape, parts_wanted, causal, padding, lanes] = GetParam();
  auto [B, H, L, S, C, d] = shape;
  const auto combined = decoding_backend(lanes, {.combine_in_flash_decoding = true});
  if (!combined) return;  // refused, as it should be
  const auto apart = decoding_backend(lanes, {.fold_into_store = false});
  // a workgroup holds whole rows' parts: 64 invocations, or 128 lanes, G a part (G: 1 to 16 here)
  const uint32_t group =
      lanes ? vulkan::decoding_part_lanes(testing::shared_context()->device_report(), uint32_t(d)).count : 0;
  const int64_t most_parts = group ? vulkan::kDecodingLanesWorkgroup / group : 64;
  const int64_t parts = std::min(parts_wanted, S), H_kv = H % 2 == 0 ? H / 2 : H;
  const Tensor q = random_tensor({B, H, L, d}, 1), k = random_tensor({B, H_kv, C, d}, 2),
               v = random_tensor({B, H_kv, C, d}, 3);
  Tensor mask({B, S});  // as FlashDecoding's: the last sequence's first row sees no key
  if (padding)
    for (int64_t j = 0; j < std::min<int64_t>(S, S - L + 1); ++j)
      mask.data[static_cast<size_t>((B - 1) * S + j)] = -kInf;
  auto run = [&](Backend& b) {
    Value m = b.upload("mask", mask);
    return b.download(b.flash_decoding_combine("flash_decoding", "attention_combine", b.upload("q", q),
                                               b.upload("k", k), b.upload("v", v), S, padding ? &m : nullptr, causal, 0,
                                               parts));
  };
  StepRecorder recorded(false);
  Tensor folded;
  {
    AttachedTracer attached(*combined, recorded);
    folded = run(*combined);
  }
  EXPECT_EQ(folded.shape, (Shape{B, H, L, d}));
  EXPECT_TRUE(all_close(folded, run(cpu()), {}, {"b", "h", "i", "c"})) << "the reference";
  EXPECT_TRUE(all_close(folded, run(*apart), {.atol = 0.0f, .rtol = 3e-7f}, {"b", "h", "i", "c"}))
      << "the device's two steps";
  if (padding && B > 1 && causal) {  // the last sequence's first row saw no key
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < d; ++c)
        EXPECT_EQ(folded.data[static_cast<size_t>((((B - 1) * H + h) * L) * d + c)], 0.0f);
  }
  const auto& rows = recorded.steps();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].event.op, "flash_decoding");
  EXPECT_TRUE(rows[0].event.folded.empty());
  EXPECT_EQ(rows[1].event.op, "attention_combine");
  EXPECT_EQ(rows[1].event.folded,
            parts <= most_parts
                ? "folded into flash_decoding, whose workgroups merged their rows' parts once all were written"
                : "")
      << parts << " parts";
}
INSTANTIATE_TEST_SUITE_P(Sweep, FlashDecodingCombine,
                         Combine(Values(Decode{1, 1, 1, 1, 1, 1}, Decode{2, 3, 1, 17, 20, 3},
                                        Decode{1, 8, 1, 113, 113, 64}, Decode{3, 2, 5, 17, 30, 4},
                                        Decode{1, 4, 1, 1000, 1024, 16}, Decode{2, 3, 3, 113, 120, 40}),
                                 Values(int64_t{1}, int64_t{3}, int64_t{8}, int64_t{64}, int64_t{65}), Bool(), Bool(),
                                 Bool()));

// A trace with values runs the two steps, so that it holds the parts; the merged rows are the
// same numbers as folded.
TEST_F(Decoding, AFlashDecodingCombineTracedWithValuesRunsTheTwoSteps) {
  const Tensor q = random_tensor({1, 4, 1, 16}, 1), k = random_tensor({1, 4, 300, 16}, 2),
               v = random_tensor({1, 4, 300, 16}, 3);
  auto run = [&](Backend& b) {
    return b.download(b.flash_decoding_combine("flash_decoding", "attention_combine", b.upload("q", q),
                                               b.upload("k", k), b.upload("v", v), 300, nullptr, true, 0, 8));
  };
  VulkanBackend combined(testing::shared_context(), {.combine_in_flash_decoding = true});
  StepRecorder recorded(true);
  Tensor traced;
  {
    AttachedTracer attached(combined, recorded);
    traced = run(combined);
  }
  const auto& rows = recorded.steps();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(rows[1].event.folded.empty());
  ASSERT_TRUE(rows[0].values.has_value());
  EXPECT_EQ(rows[0].values->shape, (Shape{1, 4, 1, 8, 18}));
  EXPECT_TRUE(all_close(run(combined), traced, {.atol = 0.0f, .rtol = 3e-7f}, {"b", "h", "i", "c"}));
}

// By rule a GPU merges the parts in flash_decoding's dispatch and a CPU device (lavapipe,
// SwiftShader) runs the two steps; fold_into_store = false turns it off, and it wins over the ask.
TEST_F(Decoding, FlashDecodingMergesItsPartsByTheDevicesRule) {
  const bool cpu_device = testing::shared_context()->device_report().type == vk::PhysicalDeviceType::eCpu;
  EXPECT_EQ(gpu().combines_parts(8), !cpu_device);
  EXPECT_TRUE(VulkanBackend(testing::shared_context(), {.combine_in_flash_decoding = true}).combines_parts(64));
  EXPECT_FALSE(VulkanBackend(testing::shared_context(), {.combine_in_flash_decoding = true}).combines_parts(65));
  EXPECT_FALSE(VulkanBackend(testing::shared_context(), {.combine_in_flash_decoding = false}).combines_parts(8));
  EXPECT_FALSE(VulkanBackend(testing::shared_context(), {.fold_into_store = false, .combine_in_flash_decoding = true})
                   .combines_parts(8));
  // parts walked by G lanes: a workgroup of 128 lanes holds 128 / G parts
  const VulkanBackend asked(testing::shared_context(), {.combine_in_flash_decoding = true});
  EXPECT_TRUE(asked.combines_parts(8, 16));
  EXPECT_FALSE(asked.combines_parts(9, 16));
  EXPECT_TRUE(asked.combines_parts(128, 1));
  EXPECT_FALSE(asked.combines_parts(129, 1));
}

// By rule a GPU walks each part with lanes where it guarantees them (a power of two up to d's
// vec4s), a CPU device with one invocation; asked for, as asked.
TEST_F(Decoding, FlashDecodingWalksPartsWithLanesByTheDevicesRule) {
  const auto& device = testing::shared_context()->device_report();
  const vulkan::Lanes lanes = vulkan::decoding_part_lanes(device, 64);
  const bool cpu_device = device.type == vk::PhysicalDeviceType::eCpu;
  EXPECT_EQ(gpu().decoding_part_lanes(8, 4096, 64), cpu_device ? 0u : lanes.count);
  EXPECT_EQ(
      VulkanBackend(testing::shared_context(), {.flash_decoding_subgroups = false}).decoding_part_lanes(8, 4096, 64),
      0u);
  if (!lanes) return;  // decoding_backend() checks the refusal
  EXPECT_TRUE(std::has_single_bit(lanes.count));
  EXPECT_LE(lanes.count, 16u) << "d 64: 16 vec4s";
  VulkanBackend asked(testing::shared_context(), {.flash_decoding_subgroups = true});
  EXPECT_EQ(asked.decoding_part_lanes(8, 4096, 64), lanes.count);
  EXPECT_EQ(asked.decoding_part_lanes(8, 4096, 17), std::min(lanes.count, 4u)) << "d 17: 5 vec4s";
  EXPECT_EQ(asked.decoding_part_lanes(8, 4096, 3), 1u) << "d 3: 1 vec4";
}

// flash_decoding over caches kept 16-bit: the device widens what the reference holds as float32.
// With an even H, two query heads share each cached head (grouped-query attention).
class FlashDecoding16 : public Decoding, public ::testing::WithParamInterface<std::tuple<Decode, Narrow, bool>> {};
TEST_P(FlashDecoding16, MatchesTheReferenceOnTheRoundedCache) {
  auto [shape, format, lanes] = GetParam();
  auto [B, H, L, S, C, d] = shape;
  const auto device = decoding_backend(lanes);
  if (!device) return;  // refused, as it should be
  const int64_t H_kv = H % 2 == 0 ? H / 2 : H;
  Tensor q = random_tensor({B, H, L, d}, 1), k = random_tensor({B, H_kv, C, d}, 2),
         v = random_tensor({B, H_kv, C, d}, 3);
  for (Tensor* t : {&k, &v})
    for (float& x : t->data) x = reference::round_to(x, static_cast<int>(format));
  const int64_t parts = std::min<int64_t>(2, S);
  // the caches kept `format`, or (float32_cache) the same numbers as a float32 cache
  auto run = [&](Backend& b, bool float32_cache) {
    const Narrow kept = float32_cache ? Narrow::none : format;
    Value kc = b.upload_cache("k", k, kept), vc = b.upload_cache("v", v, kept);
    return b.download(b.attention_combine(
        "attention_combine", b.flash_decoding("flash_decoding", b.upload("q", q), kc, vc, S, nullptr, true, 0, parts)));
  };
  Tensor expected = run(cpu(), false);
  EXPECT_TRUE(all_close(run(*device, false), expected, {}, {"b", "h", "i", "c"}));
  EXPECT_TRUE(all_close(run(cpu(), true), expected, {0, 0})) << "the reference reads the rounded numbers as they are";
}
INSTANTIATE_TEST_SUITE_P(Sweep, FlashDecoding16,
                         Combine(Values(Decode{1, 1, 1, 1, 1, 1}, Decode{2, 3, 1, 17, 20, 3},
                                        Decode{1, 8, 1, 113, 113, 64}, Decode{2, 2, 17, 17, 17, 5},
                                        Decode{1, 4, 1, 1000, 1024, 16}, Decode{2, 3, 3, 113, 120, 40}),
                                 Values(Narrow::float16, Narrow::bfloat16), Bool()));

TEST_F(Decoding, TheBackendSplitsLongCachesForFewRows) {
  // one query row of 8 heads over 4096 keys: many parts; a prompt of 512 rows: as many as fill
  // the device's lanes with it (one on lavapipe, 8 on an H200's)
  EXPECT_GT(gpu().decoding_parts(8, 4096, 64), 8);
  EXPECT_EQ(gpu().decoding_parts(8 * 512, 4096, 64), std::max<int64_t>(1, gpu().decoding_lanes() / (8 * 512)));
  EXPECT_EQ(gpu().decoding_parts(8, 20, 64), 1);  // a part holds at least 32 keys
}

// ---- CausalLM: decode() against forward() ------------------------------------------------------
CausalLM small_model(int64_t E, int64_t H, int64_t positions, bool norm_first, Activation activation) {
  CausalLMConfig c;
  c.vocab_size = 11;
  c.max_positions = positions;
  c.layer.d_model = E;
  c.layer.nhead = H;
  c.layer.dim_feedforward = 2 * E;
  c.layer.norm_first = norm_first;
  c.layer.activation = activation;
  c.num_layers = 2;
  return CausalLM(c, CausalLMWeights::random(c, 7));
}

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor ids({B, T}, std::vector<float>(static_cast<size_t>(B * T)), DType::int64);
  for (float& id : ids.data) id = static_cast<float>(rng() % static_cast<uint32_t>(V));
  return ids;
}

// Columns t0 … t0 + n - 1 of (B, T, ·) or (B, T)
Tensor columns(const Tensor& x, int64_t t0, int64_t n) {
  const int64_t B = x.dim(0), T = x.dim(1), inner = x.rank() == 3 ? x.dim(2) : 1;
  Shape shape = x.shape;
  shape[1] = n;
  Tensor out(shape, std::vector<float>(static_cast<size_t>(B * n * inner)), x.dtype);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(x.data.begin() + (b * T + t0) * inner, n * inner, out.data.begin() + b * n * inner);
  return out;
}

// prompt: the first call's length; then one token a call
struct Incremental {
  int64_t S, prompt, B, E, H;
  bool norm_first, padding;
};
void PrintTo(const Incremental& a, std::ostream* os) {
  *os << "S=" << a.S << " prompt=" << a.prompt << " B=" << a.B << " E=" << a.E << " H=" << a.H
      << (a.norm_first ? " pre-norm" : " post-norm") << (a.padding ? " padded" : "");
}
class CausalLMDecode : public Decoding, public ::testing::WithParamInterface<Incremental> {};
TEST_P(CausalLMDecode, EqualsTheFullForwardAtEveryPosition) {
  auto [S, prompt, B, E, H, norm_first, padding] = GetParam();
  CausalLM model = small_model(E, H, S, norm_first, norm_first ? Activation::gelu : Activation::relu);
  Tensor ids = random_ids(B, S, 11, 3);
  std::optional<Tensor> mask;  // the last sequence left-padded by 3
  if (padding) {
    mask = Tensor({B, S}, std::vector<float>(static_cast<size_t>(B * S)), DType::boolean);
    for (int64_t t = 0; t < std::min<int64_t>(3, S); ++t) mask->data[static_cast<size_t>((B - 1) * S + t)] = 1;
  }
  for (Backend* backend : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    SCOPED_TRACE(backend->name());
    if (backend == &cpu() && S > 200) continue;  // the GPU's run covers the long case; the CPU's takes minutes
    Tensor full = model.forward(*backend, ids, mask);  // (B, S, V)
    KVCache cache = model.make_cache(*backend, B, S);  // exactly full at the end
    for (int64_t t = 0; t < S;) {
      const int64_t n = t == 0 ? prompt : 1;
      DecodeOptions options;
      if (mask) options.key_padding_mask = columns(*mask, 0, t + n);
      Tensor logits = model.decode(*backend, columns(ids, t, n), cache, options);
      ASSERT_TRUE(all_close(logits, columns(full, t, n), {}, {"b", "t", "v"})) << "positions " << t << " … " << t + n - 1;
      t += n;
    }
    EXPECT_EQ(cache.length(), S);
    testing::expect_error<ShapeError>([&] { model.decode(*backend, random_ids(B, 1, 11, 4), cache); }, {"KVCache: the cache holds at most " + std::to_string(S) + " positions (its capacity); " +
                     std::to_string(S) + " are filled and 1 more would make " + std::to_string(S + 1)});
  }
}
INSTANTIATE_TEST_SUITE_P(Sweep, CausalLMDecode,
                         Values(Incremental{1, 1, 1, 8, 2, false, false}, Incremental{17, 5, 2, 12, 4, true, true},
                                Incremental{17, 1, 3, 8, 1, false, true}, Incremental{113, 17, 1, 16, 4, true, false},
                                Incremental{1000, 1, 1, 16, 2, true, false}));

// A decode step's projections as the GPU's rule runs them, a GEMV (asked for here: lavapipe's
// rule is the GEMM), with split_heads and merge_heads folded into them: one token each, the
// plain layout. Three sequences: the steps' 3 rows are the GEMV's, the prompt's 15 the GEMM's.
TEST_F(Decoding, StepsWhoseProjectionsRunAsAGemvEqualTheFullForward) {
  VulkanBackend gemv(testing::shared_context(), {.gemv_rows = vulkan::kGemvRows});
  ASSERT_TRUE(gemv.folds_layout_steps());
  const int64_t B = 3, S = 9, prompt = 5;
  CausalLM model = small_model(132, 4, S, true, Activation::gelu);  // K = 132: 33 vec4s, past a column's 32 lanes
  Tensor ids = random_ids(B, S, 11, 5);
  Tensor full = model.forward(cpu(), ids);  // (B, S, V)
  KVCache cache = model.make_cache(gemv, B, S);
  for (int64_t t = 0; t < S;) {
    const int64_t n = t == 0 ? prompt : 1;
    Tensor logits = model.decode(gemv, columns(ids, t, n), cache);
    ASSERT_TRUE(all_close(logits, columns(full, t, n), {}, {"b", "t", "v"})) << "positions " << t << " … " << t + n - 1;
    t += n;
  }
}

// A model decoding with a 16-bit cache: the device and the reference agree within a tenth of the
// tolerance below. They round the same keys and values but for their float32 sums' last bits, and
// one on the edge between two 16-bit numbers may round apart (an H200: 1.25e-5 apart in float16,
// past float32's 1e-5). Against the float32 cache's logits, the rounding of every key and value
// shows, within the tolerance stated here (measured: 2.2e-4 float16, 1.4e-3 bfloat16).
TEST_F(Decoding, ASixteenBitCacheDecodesAsTheReferenceWithItsRounding) {
  const int64_t B = 2, S = 33, prompt = 5;
  CausalLM model = small_model(20, 4, S, true, Activation::gelu);  // d = 5: rows start mid-word
  Tensor ids = random_ids(B, S, 11, 6);
  Tensor full = model.forward(cpu(), ids);  // (B, S, V), float32 throughout
  for (auto [format, tolerance] : {std::pair{Narrow::float16, 1e-3f}, {Narrow::bfloat16, 1e-2f}}) {
    SCOPED_TRACE(narrow_name(format));
    KVCache on_gpu = model.make_cache(gpu(), B, S, format), on_cpu = model.make_cache(cpu(), B, S, format);
    EXPECT_EQ(on_gpu.bytes(), uint64_t{2 * 2 * B * 4 * S * 5 * 2});  // 2 · layers · B · H · capacity · d · 2
    float worst = 0;
    for (int64_t t = 0; t < S;) {
      const int64_t n = t == 0 ? prompt : 1;
      Tensor logits = model.decode(gpu(), columns(ids, t, n), on_gpu);
      ASSERT_TRUE(
          all_close(logits, model.decode(cpu(), columns(ids, t, n), on_cpu), {tolerance / 10, 0}, {"b", "t", "v"}))
          << "positions " << t << " … " << t + n - 1;
      ASSERT_TRUE(all_close(logits, columns(full, t, n), {tolerance, 0}, {"b", "t", "v"}));
      worst = std::max(worst, testing::max_abs_error(logits, columns(full, t, n)));
      t += n;
    }
    EXPECT_GT(worst, 0.0f) << "the rounding shows: the cache really holds 16-bit numbers";
  }
}

TEST_F(Decoding, ASixteenBitCacheIsReadOnlyByTheCacheSteps) {
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    Value k = b->upload_cache("k", Tensor({1, 1, 4, 2}), Narrow::float16);
    Value v = b->upload_cache("v", Tensor({1, 1, 4, 2}), Narrow::none);
    Value q = b->upload("q", Tensor({1, 1, 1, 2}));
    testing::expect_error<ShapeError>(
        [&] { b->flash_decoding("flash_decoding", q, k, v, 4, nullptr, true, 0); },
        {"flash_decoding: key cache k (1, 1, 4, 2) is float16 but value cache v (1, 1, 4, "
         "2) is float32: the caches must hold one format"});
    testing::expect_error<ShapeError>([&] { b->softmax("softmax", k); },
                                      {"softmax: k (1, 1, 4, 2) is kept float16, which only linear's weight, "
                                       "embedding's table and a key/value cache are read as"});
  }
}

TEST_F(Decoding, TheCacheHoldsExactlyItsKeysAndValues) {
  CausalLM model = small_model(16, 4, 64, true, Activation::gelu);
  for (auto [dtype, bytes] : {std::pair{Narrow::none, 4}, {Narrow::float16, 2}, {Narrow::bfloat16, 2}}) {
    const uint64_t before = gpu().context().device_bytes_created();
    KVCache cache = model.make_cache(gpu(), 3, 64, dtype);
    EXPECT_EQ(cache.bytes(), uint64_t(2 * 2 * 3 * 4 * 64 * 4 * bytes));  // 2 · layers · B · H · capacity · d · bytes
    EXPECT_EQ(gpu().context().device_bytes_created() - before, cache.bytes()) << "the device buffers it made";
  }
}

TEST_F(Decoding, ACroppedCacheDecodesAnotherContinuationAsIfFresh) {
  CausalLM model = small_model(16, 4, 32, true, Activation::gelu);
  Tensor prompt = random_ids(2, 5, 11, 1), first = random_ids(2, 3, 11, 2), second = random_ids(2, 1, 11, 3);
  KVCache cache = model.make_cache(gpu(), 2, 16);
  model.decode(gpu(), prompt, cache);
  model.decode(gpu(), first, cache);
  cache.crop(5);  // forget `first`: `second` follows the prompt
  EXPECT_EQ(cache.length(), 5);
  Tensor after_crop = model.decode(gpu(), second, cache);
  KVCache fresh = model.make_cache(gpu(), 2, 16);
  model.decode(gpu(), prompt, fresh);
  EXPECT_TRUE(all_close(after_crop, model.decode(gpu(), second, fresh), {0, 0}));
  testing::expect_error<ShapeError>([&] { cache.crop(7); }, {"KVCache: cannot crop to 7 positions; 6 are filled"});
}

TEST_F(Decoding, BadInputIsATypedOneLineError) {
  CausalLM model = small_model(8, 2, 16, false, Activation::relu);
  KVCache cache = model.make_cache(gpu(), 1, 16);
  testing::expect_error<ShapeError>([&] { model.decode(gpu(), Tensor({1, 2}, {3, 11}, DType::int64), cache); }, {"CausalLM.decode: token id 11 at index 1 is outside the vocabulary [0, 11)"});
  testing::expect_error<ConfigError>([&] { model.decode(cpu(), random_ids(1, 2, 11, 1), cache); }, {"KVCache: the cache was made on another backend; make one on 'cpu'"});
  testing::expect_error<ConfigError>([&] { model.make_cache(gpu(), 1, 17); }, {"CausalLM: a cache of capacity 17 is longer than the 16 positions the model has rows for"});
  EXPECT_EQ(cache.length(), 0) << "a refused step leaves the cache as it was";
}

// ---- the weights a cache keeps between steps ----------------------------------------------------
// The device copy each kept weight points at, by scoped name.
std::map<std::string, const Storage*> kept_copies(KVCache& cache, const Backend& backend) {
  std::map<std::string, const Storage*> copies;
  for (const auto& [name, value] : cache.kept_weights(backend)->values) copies[name] = value.storage.get();
  return copies;
}

TEST_F(Decoding, TheFirstStepUploadsTheWeightsAndTheNextOnesReadThemWhereTheyAre) {
  CausalLM model = small_model(16, 4, 32, true, Activation::gelu);
  KVCache cache = model.make_cache(gpu(), 2, 16);
  EXPECT_TRUE(cache.kept_weights(gpu())->values.empty());
  EXPECT_EQ(cache.kept_weights(cpu()), nullptr) << "the cache keeps nothing for another backend";
  model.decode(gpu(), random_ids(2, 5, 11, 1), cache);
  const auto first = kept_copies(cache, gpu());
  for (const char* name : {"token_embedding.weight", "layers.0.self_attn.out_proj.weight", "layers.1.norm2.bias",
                           "layers.1.linear2.weight", "norm.weight", "lm_head.weight", "lm_head.bias"}) {
    EXPECT_TRUE(first.contains(name)) << name << " was not kept";
  }
  EXPECT_FALSE(first.contains("position_embedding.weight")) << "the rows of the step's positions change";
  model.decode(gpu(), random_ids(2, 1, 11, 2), cache);
  EXPECT_EQ(kept_copies(cache, gpu()), first) << "the second step uploaded weights again";
}

TEST_F(Decoding, AnotherModelDecodingWithTheCacheUsesItsOwnWeights) {
  CausalLM model = small_model(16, 4, 32, true, Activation::gelu);
  const CausalLM other(model.config(), CausalLMWeights::random(model.config(), 8));
  const Tensor prompt = random_ids(2, 5, 11, 1);
  KVCache cache = model.make_cache(gpu(), 2, 16);
  const Tensor mine = model.decode(gpu(), prompt, cache);
  cache.clear();
  const Tensor theirs = other.decode(gpu(), prompt, cache);
  EXPECT_TRUE(all_close(theirs, other.forward(gpu(), prompt), {}, {"b", "t", "v"}));
  EXPECT_FALSE(all_close(theirs, mine, {}, {"b", "t", "v"})) << "the two models' logits should differ";
}

TEST_F(Decoding, AStepThatFailsKeepsNoWeightItMayNeverHaveUploaded) {
  namespace faults = vulkan::faults;
  CausalLM model = small_model(16, 4, 32, true, Activation::gelu);
  const Tensor prompt = random_ids(2, 5, 11, 1);
  KVCache cache = model.make_cache(gpu(), 2, 16);
  // the queue refuses the step's work: its uploads, recorded, never run
  faults::inject({.site = faults::Site::submission, .nth = 1, .result = vk::Result::eErrorOutOfDeviceMemory,
                  .during = "reading back lm_head"});
  testing::expect_error<DeviceError>([&] { model.decode(gpu(), prompt, cache); }, {"reading back lm_head: "});
  ASSERT_TRUE(faults::clear()) << "the fault never fired";
  EXPECT_TRUE(cache.kept_weights(gpu())->values.empty());
  EXPECT_EQ(cache.length(), 0);
  EXPECT_TRUE(all_close(model.decode(gpu(), prompt, cache), model.forward(gpu(), prompt), {}, {"b", "t", "v"}));
}

TEST(CausalLMStateDict, TheShippedModelLoadsAndAMissingKeyIsNamed) {
  const std::string path = VKATTN_SOURCE_DIR "/models/tiny_char/model.safetensors";
  io::CausalLMState state = io::load_causal_lm(path);
  EXPECT_EQ(state.config.num_layers, 2);
  EXPECT_EQ(state.config.layer.d_model, 64);
  EXPECT_EQ(state.config.layer.nhead, 4);
  EXPECT_EQ(state.config.layer.activation, Activation::gelu);
  EXPECT_TRUE(state.config.layer.norm_first);
  EXPECT_EQ(state.config.max_positions, 128);
  io::Safetensors file = io::read_safetensors(path);
  file.tensors.erase("layers.1.linear2.weight");
  testing::expect_error<FileError>([&] { io::causal_lm_from_state_dict(file, "model"); },
                                   {"model: missing tensor 'layers.1.linear2.weight'"});
  file = io::read_safetensors(path);
  file.tensors.erase("lm_head.weight");
  testing::expect_error<FileError>([&] { io::causal_lm_from_state_dict(file, "model"); },
                                   {"model: missing tensor 'lm_head.weight'"});
}

}  // namespace
}  // namespace vkattn
