#pragma once
// The tilings of shaders/gemm.glsl that the suite holds to the reference, and the products it
// holds them to. test_ops's Plans/GemmTiling runs each case below (a hand-made tiling with a kind
// of input); test_tuning's TunedPlans.EveryGemmCandidate runs each plan the tuner may choose that
// Plans/GemmTiling does not already run (on lavapipe at 8 lanes GemmTiling runs 4 of the 7:
// compiling a tiling's pipelines is most of either test's time).
#include <gtest/gtest.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "engine/vulkan/gemm_plan.h"
#include "vkattn/backends/backend.h"

namespace vkattn::testing {

// Broadcast: tile_n and the rows of A per lane; shared: the side, an invocation's tile and k per
// shared tile.
struct GemmTiling {
  vulkan::GemmVariant variant;
  uint32_t size;      // broadcast: tile_n; shared: side
  uint32_t row_sets;  // broadcast: rows of A per lane
  uint32_t tile_m = 4, tile_n = 4, depth = 16;  // shared
  std::string name() const;  // "broadcast_rows2_tile_n16", "shared_side16_8x8_depth8"
};
inline void PrintTo(const GemmTiling& tiling, std::ostream* out) { *out << tiling.name(); }

// A and B from storage buffers, from texel buffers, or from texel buffers with B packed.
enum class GemmInputs { storage, texel, texel_packed };
std::string input_name(GemmInputs inputs);  // "storage", "texel", "texel_packed"
inline void PrintTo(GemmInputs inputs, std::ostream* out) { *out << input_name(inputs); }

// Broadcast at 4 to 16 columns a lane and one or two rows; shared at either side, with an
// invocation's 4 × 4, 8 × 8 (the GPU's: 128 × 128 blocks) and 8 × 4 / 4 × 8 tiles, k tiles of 4 to
// 32.
const std::vector<GemmTiling>& gemm_tilings();

// A tiling with one kind of input; `with_16bit_b`: also with B kept 16-bit (upload_matrix).
struct GemmCase {
  GemmTiling tiling;
  GemmInputs inputs;
  bool with_16bit_b;
  std::string name() const;  // "broadcast_rows2_tile_n16_texel_packed"
};
inline void PrintTo(const GemmCase& c, std::ostream* out) { *out << c.name(); }

// Every tiling with the inputs its variant reads where the rule gives it (broadcast, a CPU
// device's: texels, B packed or not; shared, a GPU's: storage buffers). The other kinds of input,
// and B kept 16-bit, change only how an element is loaded (gemm.glsl's a_at, b4_at, …), not the
// tiling around it: they run at the smallest broadcast tile, at the CPU device's two shared
// tilings and at the GPU's. (Every tiling with every input and 16-bit B took 263 s of test_ops's
// 400 on Mesa 25: storage inputs compile 2–3× as slowly there as texels. The rule's broadcast
// tiling with them too took 51 of test_ops's 188 s on Mesa 22 with no shader cache, 23 of them
// its storage inputs; the golden tests run it with W kept 16-bit against PyTorch.)
const std::vector<GemmCase>& gemm_cases();

// The plan `tiling` with `inputs` gives on `device`, or nullopt where the device refuses it (no
// guaranteed lanes for broadcast, no RGBA32F texel buffers, B packed for the shared tiling).
std::optional<vulkan::GemmPlan> tiling_plan(const GemmTiling& tiling, GemmInputs inputs, const vulkan::DeviceReport& device);

// Whether Plans/GemmTiling runs `plan` on `device`: one of its cases gives the same plan.
bool among_gemm_tilings(const vulkan::GemmPlan& plan, const vulkan::DeviceReport& device);

// linear, attention_scores and attention_values on `gpu` against `cpu` over the products that
// break a tiling: K a multiple of 4 (vec4 loads) and not, M and N inside one tile, on its edge and
// past it, 520 rows (16 row blocks of the largest tile, where the rule packs B), K = 512 (many k
// tiles), L ≠ S, d not a multiple of 4, shared key/value heads.
::testing::AssertionResult gemm_products_match(Backend& gpu, Backend& cpu);

}  // namespace vkattn::testing
