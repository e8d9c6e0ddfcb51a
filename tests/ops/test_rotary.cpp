// rotary_embedding (RoPE): the reference by hand; torch's two conventions (the fixtures of
// tests/golden_rotary/generate.py, written from their definitions) on both backends; the GPU
// against the reference over sizes that break kernels; the properties that make RoPE what it is
// (Q·Kᵀ depends only on i − j; an offset of p is positions p… of a longer sequence); the errors.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "reference/reference.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "tests/support/tolerance.h"
#include "vkattn/io/npy.h"
#include "vkattn/tracing/tracer.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::all_close;
using testing::random_tensor;

// Positions up to ~4000 make angles of ~4000 rad: float32 rounds them to ~2.4e-4 rad, as it does
// in torch; the GPU's pow, sin and cos may differ from the host's in the last bits.
constexpr testing::Tolerance kRotary{.atol = 1e-4f, .rtol = 1e-4f};

Tensor rotate(Backend& b, const Tensor& x, int64_t offset, float theta, int64_t r, RotaryConvention c) {
  return b.download(b.rotary_embedding("rotary_embedding_q", b.upload("x", x), offset, theta, r, c));
}

Tensor rotate_scaled(Backend& b, const Tensor& x, const RopeScaling& scaling) {
  return b.download(b.rotary_embedding("rotary_embedding_q", b.upload("x", x), 0, 1e4f, 0, RotaryConvention::half, scaling));
}

TEST(RotaryReference, RotatesEachPairByPositionTimesItsFrequency) {
  // d = 4, r = 4, θ = 10000: pair 0 turns 1 rad per position, pair 1 10000^(-1/2) = 0.01 rad.
  const float x[] = {1, 2, 3, 4, 1, 2, 3, 4};  // (N=1, T=2, d=4): positions 0 and 1
  float y[8];
  const float inv_freq[] = {reference::rotary_inverse_frequency(0, 4, 10000.0f),
                            reference::rotary_inverse_frequency(1, 4, 10000.0f)};
  EXPECT_EQ(inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(inv_freq[1], 0.01f);
  reference::rotary_embedding(x, inv_freq, y, 1, 2, 4, 0, 4, /*pairs=*/false);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(y[i], x[i]) << "position 0 is not rotated";
  // half: pairs (x0, x2) = (1, 3) by 1 rad and (x1, x3) = (2, 4) by 0.01 rad
  EXPECT_NEAR(y[4], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(y[6], 1 * std::sin(1.0) + 3 * std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[5], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(y[7], 2 * std::sin(0.01) + 4 * std::cos(0.01), 1e-6);
  // pairs: (x0, x1) = (1, 2) by 1 rad and (x2, x3) = (3, 4) by 0.01 rad
  reference::rotary_embedding(x, inv_freq, y, 1, 2, 4, 0, 4, /*pairs=*/true);
  EXPECT_NEAR(y[4], 1 * std::cos(1.0) - 2 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(y[5], 1 * std::sin(1.0) + 2 * std::cos(1.0), 1e-6);
  EXPECT_NEAR(y[6], 3 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_NEAR(y[7], 3 * std::sin(0.01) + 4 * std::cos(0.01), 1e-6);
}

// ---- torch's definitions, both backends -----------------------------------------------------------
class RotaryGolden : public testing::GpuTest,
                     public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(RotaryGolden, MatchesTorchsDefinition) {
  const auto& [name, backend_name] = GetParam();
  const fs::path dir = fs::path(VKATTN_GOLDEN_ROTARY_DIR) / name;
  std::ifstream in(dir / "config.json");
  const auto config = nlohmann::json::parse(in);
  Backend& backend = backend_name == "gpu" ? static_cast<Backend&>(gpu()) : cpu();
  Tensor y = rotate(backend, io::read_npy(dir / "x.npy"), config.at("offset").get<int64_t>(),
                    config.at("theta").get<float>(), config.at("rotary_dims").get<int64_t>(),
                    parse_rotary_convention(config.at("convention").get<std::string>()));
  EXPECT_TRUE(all_close(y, io::read_npy(dir / "expected.npy"), kRotary));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RotaryGolden,
                         ::testing::Combine(::testing::Values("half_llama", "pairs_llama", "half_theta500k_offset",
                                                              "pairs_offset", "half_partial", "pairs_partial"),
                                            ::testing::Values("gpu", "cpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

TEST(RotaryGoldenConventions, DifferOnTheSameInput) {
  // the bug a learner meets: a checkpoint loaded with the other convention
  const fs::path dir = fs::path(VKATTN_GOLDEN_ROTARY_DIR);
  ReferenceBackend cpu;
  Tensor x = io::read_npy(dir / "half_llama" / "x.npy");
  Tensor swapped = rotate(cpu, x, 0, 10000.0f, 0, RotaryConvention::pairs);
  EXPECT_GT(testing::max_abs_error(swapped, io::read_npy(dir / "half_llama" / "expected.npy")), 0.5f);
}

// ---- GPU against the reference --------------------------------------------------------------------
struct Rope {
  int64_t B, H, T, d, r, offset;
  float theta;
};
void PrintTo(const Rope& c, std::ostream* os) {
  *os << "(" << c.B << ", " << c.H << ", " << c.T << ", " << c.d << ") r=" << c.r << " offset=" << c.offset
      << " theta=" << c.theta;
}
class RotarySweep : public testing::GpuTest,
                    public ::testing::WithParamInterface<std::tuple<Rope, RotaryConvention>> {};

TEST_P(RotarySweep, GpuMatchesReference) {
  const auto& [c, convention] = GetParam();
  Tensor x = random_tensor({c.B, c.H, c.T, c.d}, 7);
  EXPECT_TRUE(all_close(rotate(gpu(), x, c.offset, c.theta, c.r, convention),
                        rotate(cpu(), x, c.offset, c.theta, c.r, convention), kRotary));
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, RotarySweep,
    ::testing::Combine(::testing::Values(Rope{1, 1, 1, 2, 0, 0, 10000.0f}, Rope{2, 3, 17, 8, 0, 5, 10000.0f},
                                         Rope{3, 1, 3, 6, 4, 0, 10000.0f}, Rope{1, 4, 113, 64, 32, 1000, 10000.0f},
                                         Rope{1, 2, 17, 128, 0, 4000, 500000.0f}, Rope{2, 2, 65, 18, 0, 0, 100.0f}),
                       ::testing::Values(RotaryConvention::half, RotaryConvention::pairs)));

// ---- what makes it RoPE -------------------------------------------------------------------------
class RotaryProperties : public testing::GpuTest, public ::testing::WithParamInterface<RotaryConvention> {};

TEST_P(RotaryProperties, RotatedScoresDependOnlyOnTheDistance) {
  // one query vector and one key vector at every position: q_i · k_j must be a function of i − j
  const int64_t T = 33, d = 16;
  Tensor q0 = random_tensor({d}, 1), k0 = random_tensor({d}, 2);
  Tensor q({1, 1, T, d}), k({1, 1, T, d});
  for (int64_t t = 0; t < T; ++t)
    for (int64_t f = 0; f < d; ++f) {
      q.at({0, 0, t, f}) = q0.data[static_cast<size_t>(f)];
      k.at({0, 0, t, f}) = k0.data[static_cast<size_t>(f)];
    }
  Tensor qr = rotate(gpu(), q, 0, 10000.0f, 0, GetParam()), kr = rotate(gpu(), k, 0, 10000.0f, 0, GetParam());
  auto score = [&](int64_t i, int64_t j) {
    double s = 0;
    for (int64_t f = 0; f < d; ++f) s += qr.at({0, 0, i, f}) * kr.at({0, 0, j, f});
    return s;
  };
  for (int64_t distance : {-7, 0, 1, 5, 20})
    for (int64_t i = std::max<int64_t>(0, distance); i < std::min(T, T + distance); i += 3) {
      EXPECT_NEAR(score(i, i - distance), score(std::max<int64_t>(0, distance), std::max<int64_t>(0, distance) - distance), 1e-4)
          << "query " << i << ", key " << i - distance;
    }
  EXPECT_GT(std::abs(score(5, 0) - score(5, 5)), 1e-3) << "the score must change with the distance";
}

TEST_P(RotaryProperties, AnOffsetIsTheLaterPositionsOfALongerSequence) {
  // decoding with a cache rotates the new rows at positions p, p + 1, …
  const int64_t p = 37, T = 5, d = 12;
  Tensor longer = random_tensor({2, 3, p + T, d}, 3);
  Tensor tail({2, 3, T, d});
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < d; ++f)
        tail.data[static_cast<size_t>((n * T + t) * d + f)] = longer.data[static_cast<size_t>((n * (p + T) + p + t) * d + f)];
  Tensor whole = rotate(gpu(), longer, 0, 10000.0f, 0, GetParam());
  Tensor part = rotate(gpu(), tail, p, 10000.0f, 0, GetParam());
  for (int64_t n = 0; n < 6; ++n)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t f = 0; f < d; ++f)
        ASSERT_NEAR(part.data[static_cast<size_t>((n * T + t) * d + f)],
                    whole.data[static_cast<size_t>((n * (p + T) + p + t) * d + f)], 1e-5)
            << "row " << n << ", position " << p + t << ", feature " << f;
}

INSTANTIATE_TEST_SUITE_P(Conventions, RotaryProperties,
                         ::testing::Values(RotaryConvention::half, RotaryConvention::pairs));

// ---- rope_scaling ----------------------------------------------------------------------------------
// Llama 3.1's: d 128, θ 500000, factor 8, bands 1 and 4 of 8192 positions. torch's values, from
// Hugging Face's _compute_llama3_parameters in float32: pairs 0 and 20 kept (wavelengths 6 and
// 379 < 2048), 29 and 32 blended (2402, 4443), 35, 40 and 63 divided by 8 (8219 … > 8192).
TEST(RotaryScalingReference, Llama3sFrequenciesAreTorchs) {
  const std::pair<int, double> expected[] = {{0, 1.0},
                                             {20, 0.016560440883040428},
                                             {29, 0.0021665706299245358},
                                             {32, 0.0005248460220173001},
                                             {35, 9.556212171446532e-05},
                                             {40, 3.428102354519069e-05},
                                             {63, 3.068925877869333e-07}};
  for (auto [i, want] : expected) {
    const float f = reference::rotary_inverse_frequency(i, 128, 500000.0f);
    EXPECT_FLOAT_EQ(reference::rotary_llama3_frequency(f, 8.0f, 1.0f, 4.0f, 8192.0f), static_cast<float>(want)) << i;
  }
}

// The step uploads the scaled frequencies (its trace names them) and rotates by them, on both
// backends: linear divides every one by the factor, so position p turns as p / factor did.
class RotaryScaling : public testing::GpuTest {};
TEST_F(RotaryScaling, ScaledFrequenciesAreUploadedAndUsed) {
  const Tensor x = random_tensor({1, 2, 6, 8}, 3);
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    StepRecorder recorder(true);
    b->add_tracer(recorder);
    const Tensor scaled = b->download(b->rotary_embedding("rotary_embedding_q", b->upload("x", x), 8, 1e4f, 0,
                                                          RotaryConvention::half,
                                                          {.type = RopeScaling::Type::linear, .factor = 4.0f}));
    b->remove_tracer(recorder);
    ASSERT_FALSE(recorder.steps().empty());
    const TensorInfo& inv_freq = recorder.steps().back().event.inputs.at(1);
    EXPECT_EQ(inv_freq.name, "rotary_embedding_q.inv_freq");
    // rows 0 and 4 are positions 8 and 12: turned as positions 2 and 3 are without scaling
    for (int64_t t = 0; t < 6; t += 4) {
      Tensor row({1, 2, 1, 8});
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t c = 0; c < 8; ++c) row.data[static_cast<size_t>(h * 8 + c)] = x.data[static_cast<size_t>((h * 6 + t) * 8 + c)];
      }
      const Tensor plain = rotate(*b, row, (8 + t) / 4, 1e4f, 0, RotaryConvention::half);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t c = 0; c < 8; ++c) {
          EXPECT_NEAR(scaled.data[static_cast<size_t>((h * 6 + t) * 8 + c)], plain.data[static_cast<size_t>(h * 8 + c)], 1e-5)
              << b->name() << " row " << t;
        }
      }
    }
  }
  testing::expect_error<ShapeError>(
      [&] { rotate_scaled(cpu(), x, {.type = RopeScaling::Type::llama3, .factor = 8.0f, .low_freq_factor = 4.0f,
                                     .high_freq_factor = 1.0f}); },
      {"rotary_embedding_q", "rope scaling", "low_freq_factor < high_freq_factor"});
}

// ---- errors --------------------------------------------------------------------------------------
class RotaryErrors : public testing::GpuTest {};

TEST_F(RotaryErrors, AreOneLineAndNameTheProblem) {
  for (Backend* b : {static_cast<Backend*>(&gpu()), static_cast<Backend*>(&cpu())}) {
    testing::expect_error<ShapeError>([&] { rotate(*b, random_tensor({1, 1, 2, 5}, 1), 0, 1e4f, 0, RotaryConvention::half); },
                                      {"rotary_embedding_q", "rotary_dims 5 must be even", "RoPE rotates features in pairs"});
    testing::expect_error<ShapeError>([&] { rotate(*b, random_tensor({1, 1, 2, 8}, 1), 0, 1e4f, 10, RotaryConvention::pairs); },
                                      {"rotary_dims 10 must be even and within the head dim d = 8"});
    testing::expect_error<ShapeError>([&] { rotate(*b, random_tensor({1, 2, 8}, 1), 0, 1e4f, 0, RotaryConvention::half); },
                                      {"(B, H, T, d)"});
    testing::expect_error<ShapeError>([&] { rotate(*b, random_tensor({1, 1, 2, 8}, 1), 0, 1.0f, 0, RotaryConvention::half); },
                                      {"theta 1.000000 must be a number > 1"});
  }
  testing::expect_error<ConfigError>([] { parse_rotary_convention("neox"); }, {"rotary convention 'neox'"});
}

}  // namespace
}  // namespace vkattn
