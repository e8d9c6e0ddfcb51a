// The trace explorer's page, read back: the JSON object it embeds says every step, its shapes and
// times, and holds values that decode to the traced tensors (sampled within the bounds, through
// the first divergent element); bad sections are one-line errors. The page's drawing is tested
// in a real browser by tests/report_test.py.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "vkattn/errors.h"
#include "vkattn/tracing/report.h"

namespace vkattn {
namespace {

using nlohmann::json;

// A pass of named steps, each output `values` (their shapes), recorded as a backend reports them.
StepRecorder pass_of(const std::vector<std::pair<std::string, Tensor>>& steps, bool keep_values = true) {
  StepRecorder r(keep_values);
  r.on_pass("test pass", "cpu", "reference");
  PassEnd end{.clock = "host"};
  int index = 0;
  for (const auto& [name, t] : steps) {
    StepEvent e{index, name, "linear", {{"x", {2, 3}}}, {name, t.shape, t.dtype, {"b", "h", "i", "j"}},
                keep_values ? &t : nullptr};  // as a backend: values only for a tracer that wants them
    r.on_step(e);
    end.step_times.push_back({10.0 * index, 5.0 + index});
    ++index;
  }
  r.on_pass_end(end);
  return r;
}

json page_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"vkattn-data\">";
  const size_t begin = page.find(open);
  EXPECT_NE(begin, std::string::npos);
  const size_t end = page.find("</script>", begin);
  return json::parse(page.substr(begin + open.size(), end - begin - open.size()));
}

std::vector<float> decode(const std::string& text) {
  auto digit = [](char c) -> uint32_t {
    return static_cast<uint32_t>(std::strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", c) -
                                 "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");
  };
  std::vector<unsigned char> bytes;
  for (size_t i = 0; i + 3 < text.size(); i += 4) {
    uint32_t chunk = digit(text[i]) << 18 | digit(text[i + 1]) << 12 |
                     (text[i + 2] == '=' ? 0 : digit(text[i + 2]) << 6) | (text[i + 3] == '=' ? 0 : digit(text[i + 3]));
    bytes.push_back(static_cast<unsigned char>(chunk >> 16));
    if (text[i + 2] != '=') bytes.push_back(static_cast<unsigned char>(chunk >> 8 & 255));
    if (text[i + 3] != '=') bytes.push_back(static_cast<unsigned char>(chunk & 255));
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// The sampled cells of `t` that the page's sample describes, in the page's order.
std::vector<float> expected_sample(const Tensor& t, const json& s) {
  std::vector<float> out;
  const int64_t rows = s["rows"], cols = s["cols"];
  for (int64_t p = 0; p < s["shown_planes"].get<int64_t>(); ++p)
    for (int64_t i = s["row0"]; i < rows; i += s["row_step"].get<int64_t>())
      for (int64_t j = s["col0"]; j < cols; j += s["col_step"].get<int64_t>())
        out.push_back(t.data[static_cast<size_t>((p * rows + i) * cols + j)]);
  return out;
}

TEST(Report, EveryStepWithItsShapesTimesAndValues) {
  Tensor scores = random_tensor({2, 3, 4, 5}, 1);
  scores.data[7] = -INFINITY;  // a blocked score
  const StepRecorder pass = pass_of({{"q_proj", random_tensor({2, 4, 6}, 2)}, {"attention_scores", scores}});
  const json data = page_data(report_html({{.title = "one pass", .pass = &pass, .pass_label = "cpu"}}, {.title = "T"}));
  ASSERT_EQ(data["sections"].size(), 1u);
  const json& steps = data["sections"][0]["steps"];
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1]["name"], "attention_scores");
  EXPECT_EQ(steps[1]["shape"], json({2, 3, 4, 5}));
  EXPECT_EQ(steps[1]["inputs"][0], json({"x", "(2, 3)"}));
  EXPECT_EQ(steps[1]["times"][0], json({10.0, 6.0}));
  EXPECT_EQ(decode(steps[1]["values"][0]), scores.data);  // small: embedded whole
  EXPECT_TRUE(steps[1]["blocked"].get<bool>());
  float lo = INFINITY, hi = -INFINITY;
  for (float v : scores.data)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_EQ(steps[1]["range"], json({lo, hi}));
  EXPECT_TRUE(data["sections"][0]["first_divergent"].is_null());
}

TEST(Report, LargeTensorsAreSampledWithinTheBoundThroughTheFirstDivergentElement) {
  const Tensor big = random_tensor({3, 1000, 700}, 3);
  Tensor wrong = big;
  const size_t flat = (2 * 1000 + 517) * 700 + 333;  // (p=2, i=517, j=333)
  wrong.data[flat] += 1.0f;
  const StepRecorder a = pass_of({{"softmax", wrong}}), b = pass_of({{"softmax", big}});
  const json data = page_data(report_html({{.pass = &a, .against = &b}}, {.cells_per_tensor = 4096}));
  const json& step = data["sections"][0]["steps"][0];
  const json& s = step["sample"];
  EXPECT_LE(s["shown_planes"].get<int64_t>() * s["shown_rows"].get<int64_t>() * s["shown_cols"].get<int64_t>(), 4096);
  EXPECT_EQ(s["shown_planes"], 3);
  EXPECT_GT(s["row_step"].get<int64_t>(), 1);
  EXPECT_EQ(517 % s["row_step"].get<int64_t>(), s["row0"].get<int64_t>());  // the divergent row is shown
  EXPECT_EQ(333 % s["col_step"].get<int64_t>(), s["col0"].get<int64_t>());
  EXPECT_EQ(decode(step["values"][0]), expected_sample(wrong, s));
  EXPECT_EQ(decode(step["values"][1]), expected_sample(big, s));
  EXPECT_EQ(step["status"], "diverges");
  EXPECT_EQ(step["diff"]["first"], flat);
  EXPECT_EQ(step["diff"]["mismatches"], 1);
  EXPECT_NEAR(step["diff"]["max_abs_error"].get<double>(), 1.0, 1e-6);  // from all the values
  EXPECT_NE(step["diff"]["report"].get<std::string>().find("(b=2, h=517, i=333)"), std::string::npos);
  EXPECT_EQ(data["sections"][0]["first_divergent"], 0);
}

TEST(Report, EveryTensorSharesThePagesBound) {
  std::vector<std::pair<std::string, Tensor>> steps;
  for (int k = 0; k < 8; ++k) steps.push_back({"step" + std::to_string(k), random_tensor({64, 64}, k)});
  const StepRecorder pass = pass_of(steps);
  const json data = page_data(report_html({{.pass = &pass}}, {.cells_per_report = 8 * 1024}));
  int64_t cells = 0;
  for (const json& step : data["sections"][0]["steps"]) {
    cells += step["sample"]["shown_rows"].get<int64_t>() * step["sample"]["shown_cols"].get<int64_t>();
  }
  EXPECT_LE(cells, 8 * 1024);
  EXPECT_GT(cells, 8 * 1024 / 2);  // and uses it
}

TEST(Report, StepsWithoutValuesKeepTheirShapes) {
  const StepRecorder pass = pass_of({{"q_proj", random_tensor({2, 2}, 1)}}, /*keep_values=*/false);
  const json step = page_data(report_html({{.pass = &pass}}))["sections"][0]["steps"][0];
  EXPECT_EQ(step["shape"], json({2, 2}));
  EXPECT_FALSE(step.contains("values"));
}

TEST(Report, TextCannotEndTheScript) {
  const StepRecorder pass = pass_of({{"q_proj", random_tensor({2, 2}, 1)}});
  const std::string page = report_html({{.title = "</script><b>", .pass = &pass}}, {.title = "</script>"});
  size_t closes = 0;
  for (size_t at = page.find("</script>"); at != std::string::npos; at = page.find("</script>", at + 1)) ++closes;
  EXPECT_EQ(closes, 2u);  // the data's and the code's
  EXPECT_EQ(page_data(page)["title"], "</script>");
}

TEST(Report, DifferentRecipesAndMissingPassesAreOneLineErrors) {
  const StepRecorder a = pass_of({{"q_proj", random_tensor({2, 2}, 1)}}), b = pass_of({{"k_proj", random_tensor({2, 2}, 1)}});
  try {
    report_html({{.pass = &a, .against = &b}});
    FAIL() << "no error";
  } catch (const FileError& e) {
    EXPECT_STREQ(e.what(), "the passes describe different recipes: step 0 is q_proj (linear) (2, 2) in one and "
                           "k_proj (linear) (2, 2) in the other");
  }
  EXPECT_THROW(report_html({{.title = "no pass"}}), ShapeError);
}

TEST(Report, WriteIsAllOrNothing) {
  const StepRecorder pass = pass_of({{"q_proj", random_tensor({2, 2}, 1)}});
  const auto dir = std::filesystem::temp_directory_path() / "vkattn_test_report";
  std::filesystem::remove_all(dir);
  EXPECT_THROW(write_report(dir / "missing" / "r.html", {{.pass = &pass}}), FileError);
  std::filesystem::create_directories(dir);
  const StepRecorder other = pass_of({{"k_proj", random_tensor({2, 2}, 1)}});
  EXPECT_THROW(write_report(dir / "r.html", {{.pass = &pass, .against = &other}}), FileError);
  EXPECT_FALSE(std::filesystem::exists(dir / "r.html"));
  write_report(dir / "r.html", {{.pass = &pass}});
  EXPECT_GT(std::filesystem::file_size(dir / "r.html"), 1000u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vkattn
