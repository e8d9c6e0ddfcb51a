#include "tests/support/gemm_tilings.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "engine/backends/tuner.h"
#include "engine/vulkan/lanes.h"
#include "tests/support/tolerance.h"

namespace vkattn::testing {

std::string GemmTiling::name() const {
  const std::string at = std::to_string(size);
  if (variant == vulkan::GemmVariant::broadcast) return "broadcast_rows" + std::to_string(row_sets) + "_tile_n" + at;
  return "shared_side" + at + "_" + std::to_string(tile_m) + "x" + std::to_string(tile_n) + "_depth" + std::to_string(depth);
}

std::string input_name(GemmInputs inputs) {
  switch (inputs) {
    case GemmInputs::storage: return "storage";
    case GemmInputs::texel: return "texel";
    case GemmInputs::texel_packed: return "texel_packed";
  }
  return "?";
}

const std::vector<GemmTiling>& gemm_tilings() {
  using enum vulkan::GemmVariant;
  static const std::vector<GemmTiling> tilings{
      {broadcast, 4, 1},          {broadcast, 8, 2},          {broadcast, 16, 1},        {broadcast, 16, 2},
      {shared, 8, 0},             {shared, 16, 0},            {shared, 16, 0, 8, 8, 16}, {shared, 16, 0, 8, 8, 8},
      {shared, 8, 0, 8, 4, 32},   {shared, 8, 0, 4, 8, 4}};
  return tilings;
}

std::string GemmCase::name() const { return tiling.name() + "_" + input_name(inputs); }

const std::vector<GemmCase>& gemm_cases() {
  using enum vulkan::GemmVariant;
  using enum GemmInputs;
  static const std::vector<GemmCase> cases = [] {
    // the smallest broadcast tile; a CPU device's shared tilings (side 8 and 16, 4 × 4, 16 k), a
    // GPU's rule (side 16, 8 × 8, 8 k)
    auto every_input = [](const GemmTiling& t) {
      return t.variant == broadcast ? t.size == 4
                                    : (t.tile_m == 4 && t.tile_n == 4 && t.depth == 16) ||
                                          (t.size == 16 && t.tile_m == 8 && t.tile_n == 8 && t.depth == 8);
    };
    std::vector<GemmCase> all;
    for (const GemmTiling& tiling : gemm_tilings()) {
      const bool every = every_input(tiling);
      for (GemmInputs inputs : {storage, texel, texel_packed}) {
        const bool own = tiling.variant == broadcast ? inputs != storage : inputs == storage;
        if (every || own) all.push_back({tiling, inputs, every});
      }
    }
    return all;
  }();
  return cases;
}

std::optional<vulkan::GemmPlan> tiling_plan(const GemmTiling& tiling, GemmInputs inputs, const vulkan::DeviceReport& device) {
  const vulkan::Lanes lanes = vulkan::guaranteed_lanes(device, vulkan::SubgroupOps::shuffle, 16);
  if (tiling.variant == vulkan::GemmVariant::broadcast && (!lanes || lanes.count < 4)) return std::nullopt;
  if (inputs != GemmInputs::storage && !device.texel_rgba32f) return std::nullopt;
  if (inputs == GemmInputs::texel_packed && tiling.variant != vulkan::GemmVariant::broadcast) return std::nullopt;
  vulkan::GemmPlan plan = vulkan::plan_gemm(device, tiling.variant);
  plan.texel_inputs = inputs != GemmInputs::storage;
  plan.packed_b = inputs == GemmInputs::texel_packed;
  if (tiling.variant == vulkan::GemmVariant::broadcast) {
    plan.tile_n = tiling.size;
    plan.tile_m = plan.lanes * tiling.row_sets;
  } else {
    plan.side = tiling.size;
    plan.workgroup_size = tiling.size * tiling.size;
    plan.tile_m = tiling.tile_m;
    plan.tile_n = tiling.tile_n;
    plan.depth = tiling.depth;
  }
  return plan;
}

bool among_gemm_tilings(const vulkan::GemmPlan& plan, const vulkan::DeviceReport& device) {
  return std::ranges::any_of(gemm_cases(), [&](const GemmCase& c) {
    const auto tiled = tiling_plan(c.tiling, c.inputs, device);
    return tiled && tuning::to_json(*tiled) == tuning::to_json(plan);
  });
}

::testing::AssertionResult gemm_products_match(Backend& gpu, Backend& cpu) {
  using Step = std::function<Value(Backend&, const std::vector<Value>&)>;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  auto check = [&](const std::string& what, const std::vector<Tensor>& inputs, const Step& step) {
    auto run = [&](Backend& backend) {
      std::vector<Value> values;
      for (size_t i = 0; i < inputs.size(); ++i) values.push_back(backend.upload("in" + std::to_string(i), inputs[i]));
      return backend.download(step(backend, values));
    };
    if (auto close = all_close(run(gpu), run(cpu)); !close) {
      if (result) result = ::testing::AssertionFailure();
      result << what << ": " << close.message() << "\n";
    }
  };
  // linear: x (N, K) · W (M, K)ᵀ + bias (M)
  for (auto [N, K, M] : {std::tuple{1, 1, 1}, {3, 4, 65}, {17, 64, 130}, {113, 17, 3}, {9, 128, 64}, {70, 3, 129},
                         {113, 512, 113}, {520, 64, 70}}) {
    check("linear " + std::to_string(N) + "×" + std::to_string(K) + " · " + std::to_string(M) + "×" + std::to_string(K),
          {random_tensor({N, K}, 1), random_tensor({M, K}, 2), random_tensor({M}, 3)},
          [](Backend& b, const std::vector<Value>& v) { return b.linear("q_proj", v[0], v[1], &v[2]); });
  }
  // q (1, H, L, d) · k (1, H_kv, S, d)ᵀ, then weights (1, H, L, S) · v (1, H_kv, S, d)
  for (auto [H, L, S, d, H_kv] : {std::tuple{1, 1, 1, 1, 1}, {2, 17, 5, 4, 2}, {3, 9, 70, 64, 3}, {1, 113, 3, 17, 1},
                                  {1, 3, 8, 6, 1}, {4, 17, 113, 8, 2}, {2, 520, 33, 8, 2}, {4, 520, 9, 8, 2},
                                  {6, 520, 3, 4, 3}}) {
    const std::string shape = " H " + std::to_string(H) + " (" + std::to_string(H_kv) + " key heads), L " +
                              std::to_string(L) + ", S " + std::to_string(S) + ", d " + std::to_string(d);
    check("attention_scores" + shape, {random_tensor({1, H, L, d}, 4), random_tensor({1, H_kv, S, d}, 5)},
          [](Backend& b, const std::vector<Value>& v) { return b.attention_scores("attention_scores", v[0], v[1]); });
    check("attention_values" + shape, {random_tensor({1, H, L, S}, 6), random_tensor({1, H_kv, S, d}, 7)},
          [](Backend& b, const std::vector<Value>& v) { return b.attention_values("attention_values", v[0], v[1]); });
  }
  return result;
}

}  // namespace vkattn::testing
