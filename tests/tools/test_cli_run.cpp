// `vkattn run` end to end: on every golden fixture the CLI accepts (batch-first or unbatched),
// both backends write .npy files that match PyTorch; every bad file and bad argument gives exit
// 2, exactly one line on stderr naming the culprit, and no output file.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

#include "engine/vulkan/context.h"
#include "tests/support/checkpoint_folder.h"
#include "tests/support/golden.h"
#include "tests/support/gpu.h"
#include "tests/support/safetensors_writer.h"
#include "tests/support/tolerance.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/question_answering.h"
#include "vkattn/io/safetensors.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::golden_fixture;

struct Exit {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// models/tiny_bert's encoder as BertForQuestionAnswering saves it, in the new folder `dir`: no
// pooler, no masked-LM head, and qa_outputs (2, 64), (2,) of fixed values.
void write_question_answerer(const fs::path& dir) {
  const fs::path tiny = VKATTN_SOURCE_DIR "/models/tiny_bert";
  fs::create_directories(dir);
  for (const char* name : {"config.json", "vocab.txt", "tokenizer_config.json"}) fs::copy_file(tiny / name, dir / name);
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : io::read_safetensors(tiny / "model.safetensors").tensors) {
    if (!name.starts_with("cls.") && !name.starts_with("bert.pooler.")) tensors.emplace(name, t);
  }
  Tensor weight({2, 64});
  for (size_t i = 0; i < weight.data.size(); ++i) weight.data[i] = 0.3f * std::sin(0.37f * float(i));
  tensors["qa_outputs.weight"] = weight;
  tensors["qa_outputs.bias"] = Tensor({2}, std::vector<float>{0.1f, -0.1f});
  testing::write_safetensors(dir / "model.safetensors", tensors);
  testing::rewrite_config(dir, [](nlohmann::json& c) { c["architectures"] = {"BertForQuestionAnswering"}; });
}

// A scratch folder per test, and vkattn run in it.
class CliRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vkattn_cli_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    plans_ = dir_.string() + "_plans";
    fs::remove_all(plans_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    fs::remove_all(dir_.string() + "_plans");
  }

  Exit vkattn(const std::vector<std::string>& args) const {
    // as a newcomer runs it: tuning on, no plan remembered before the test (the suite's other
    // tests run with tuning off); Mesa's compiled shaders stay where they were, for they are not
    // plans (each test compiled every pipeline again)
    std::string command =
        "MESA_SHADER_CACHE_DIR=\"${MESA_SHADER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}}\" VKATTN_TUNE=on "
        "XDG_CACHE_HOME='" + plans_.string() + "' '" VKATTN_CLI "'";
    for (const auto& a : args) command += " '" + a + "'";
    command += " >'" + (dir_ / "stdout").string() + "' 2>'" + (dir_ / "stderr").string() + "'";
    int status = std::system(command.c_str());
    Exit e{WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(dir_ / "stdout"), slurp(dir_ / "stderr")};
    fs::remove(dir_ / "stdout");
    fs::remove(dir_ / "stderr");
    return e;
  }
  // Files vkattn left in the scratch folder (outputs, temporaries), beside `inputs` made by the test.
  std::vector<std::string> outputs(const std::set<std::string>& inputs = {}) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      auto name = entry.path().filename().string();
      if (!inputs.count(name)) names.push_back(name);
    }
    return names;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  fs::path plans_;  // XDG_CACHE_HOME of the runs: where their plans are remembered
};

// ---- every CLI fixture, both backends ----

class CliGolden : public CliRun, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(CliGolden, WritesWhatPyTorchComputes) {
  const auto& [name, backend] = GetParam();
  auto fixture = golden_fixture(name);
  const auto& config = fixture.config;
  std::vector<std::string> args = {"run", "--weights", fixture.weights().string(), "--query", fixture.npy("query").string(),
                                   "--backend", backend, "--out", path("out.npy")};
  if (fixture.has("key")) {
    args.insert(args.end(), {"--key", fixture.npy("key").string(), "--value", fixture.npy("value").string()});
  }
  if (int64_t heads = fixture.heads_argument()) args.insert(args.end(), {"--heads", std::to_string(heads)});
  if (config.at("is_causal").get<bool>()) args.push_back("--causal");
  if (fixture.has("key_padding_mask")) args.insert(args.end(), {"--key-padding-mask", fixture.npy("key_padding_mask").string()});
  if (fixture.has("attn_mask")) args.insert(args.end(), {"--attn-mask", fixture.npy("attn_mask").string()});
  const bool weights = config.at("need_weights").get<bool>();
  if (weights) args.insert(args.end(), {"--attn-weights", path("weights.npy")});
  if (weights && !config.at("average_attn_weights").get<bool>()) args.push_back("--per-head-weights");

  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "") << "a successful run (validation layer on) prints nothing on stderr";
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(fixture.npy("expected_output")),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
  if (weights) {
    EXPECT_TRUE(testing::all_close(io::read_npy(path("weights.npy")), io::read_npy(fixture.npy("expected_weights")),
                                   {.atol = 1e-5f, .rtol = 0.0f}));
  }
  EXPECT_EQ(outputs().size(), weights ? 2u : 1u) << "only the requested files, no temporaries";
}

std::vector<std::string> cli_fixtures() {
  std::vector<std::string> names;
  for (const auto& name : testing::golden_fixture_names()) {
    if (golden_fixture(name).config.at("cli").get<bool>()) names.push_back(name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(PyTorch, CliGolden,
                         ::testing::Combine(::testing::ValuesIn(cli_fixtures()), ::testing::Values("cpu", "gpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

// ---- bad input: exit 2, one line naming the culprit, no output ----

struct BadRun {
  const char* name;
  std::vector<std::string> args;  // {dir} is the scratch folder, {g} the self_attention fixture
  const char* message;
};
void PrintTo(const BadRun& bad, std::ostream* os) { *os << bad.name; }

class CliBadInput : public CliRun, public ::testing::WithParamInterface<BadRun> {
 protected:
  // Inputs a test may point at, made in the scratch folder.
  void make_inputs() {
    auto write = [&](const std::string& name, const std::string& bytes) { std::ofstream(dir_ / name, std::ios::binary) << bytes; };
    Tensor good = io::read_npy(testing::golden_fixture("self_attention").npy("query"));  // (2, 5, 8)
    io::write_npy(dir_ / "bool.npy", Tensor(good.shape, DType::boolean));
    io::write_npy(dir_ / "rank4.npy", Tensor({1, 2, 5, 8}));
    io::write_npy(dir_ / "e7.npy", Tensor({2, 5, 7}));
    Tensor nan = good;
    nan.at({0, 1, 2}) = NAN;
    io::write_npy(dir_ / "nan.npy", nan);
    io::write_npy(dir_ / "mask_wrong.npy", Tensor({2, 4}, DType::boolean));
    Tensor mask_nan({5, 5});
    mask_nan.at({3, 1}) = NAN;
    io::write_npy(dir_ / "mask_nan.npy", mask_nan);
    auto bytes = io::encode_npy(good);
    std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    write("truncated.npy", text.substr(0, text.size() - 3));
    std::string fortran = text;
    fortran.replace(fortran.find("False"), 5, "True ");
    write("fortran.npy", fortran);
    write("empty.npy", "");
    write("text.npy", "query,values\n1,2\n");
    write_question_answerer(dir_ / "qa");
    fs::create_directories(dir_ / "t5");  // a checkpoint folder of an architecture vkattn does not run
    write("t5/config.json", R"({"architectures": ["T5Model"], "model_type": "t5"})");
    auto with_descr = [&](const std::string& descr) {
      std::string t = text;
      t.replace(t.find("<f4"), 3, descr);
      return t;
    };
    write("big_endian.npy", with_descr(">f4"));
    write("int16.npy", with_descr("<i2"));
    std::string past_end = text;
    past_end[8] = '\xff';  // header length 0x..ff: past the end of a 448-byte file
    past_end[9] = '\x7f';
    write("header_past_end.npy", past_end);
    std::string malformed = text;
    malformed.replace(malformed.find("'shape'"), 7, "'shape\"");
    write("malformed.npy", malformed);

    // weight files: the self_attention fixture's tensors (E 8), each file with one fault
    auto tensors = [&](const std::string& name, const std::vector<std::string>& entries, size_t data_bytes) {
      std::string header = "{\"__metadata__\": {\"num_heads\": \"2\"}";
      for (const auto& e : entries) header += ", " + e;
      header += "}";
      uint64_t n = header.size();
      write(name, std::string(reinterpret_cast<const char*>(&n), 8) + header + std::string(data_bytes, '\0'));
    };
    auto entry = [](const std::string& name, const std::string& dtype, const std::string& shape, size_t begin, size_t end) {
      return "\"" + name + "\": {\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": [" +
             std::to_string(begin) + ", " + std::to_string(end) + "]}";
    };
    const std::string in_w = entry("in_proj_weight", "F32", "[24, 8]", 0, 768), in_b = entry("in_proj_bias", "F32", "[24]", 768, 864),
                      out_w = entry("out_proj.weight", "F32", "[8, 8]", 864, 1120), out_b = entry("out_proj.bias", "F32", "[8]", 1120, 1152);
    tensors("offsets_past_end.safetensors", {in_w, in_b, out_w, out_b}, 1100);
    tensors("overlap.safetensors", {in_w, in_b, out_w, entry("out_proj.bias", "F32", "[8]", 1088, 1120)}, 1120);
    tensors("dtype.safetensors", {in_w, in_b, out_w, entry("out_proj.bias", "I64", "[8]", 1120, 1184)}, 1184);
    tensors("size_mismatch.safetensors", {in_w, in_b, out_w, entry("out_proj.bias", "F32", "[9]", 1120, 1152)}, 1152);
    tensors("missing_tensor.safetensors", {in_w, in_b, entry("out_proj.bias", "F32", "[8]", 864, 896)}, 896);
    tensors("misshaped.safetensors", {entry("in_proj_weight", "F32", "[24, 7]", 0, 672), entry("in_proj_bias", "F32", "[24]", 672, 768),
                                      entry("out_proj.weight", "F32", "[8, 8]", 768, 1024), entry("out_proj.bias", "F32", "[8]", 1024, 1056)}, 1056);
    tensors("unexpected_tensor.safetensors", {in_w, in_b, out_w, out_b, entry("extra", "F32", "[1]", 1152, 1156)}, 1156);
    tensors("bool_weight.safetensors", {in_w, entry("in_proj_bias", "BOOL", "[24]", 768, 792), entry("out_proj.weight", "F32", "[8, 8]", 792, 1048),
                                        entry("out_proj.bias", "F32", "[8]", 1048, 1080)}, 1080);
    std::string not_json = "{\"in_proj_weight\": [1, 2";
    uint64_t n = not_json.size();
    write("not_json.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + not_json);
    write("header_past_end.safetensors", std::string("\xe8\x03\0\0\0\0\0\0{}", 10));  // 1000 header bytes claimed

    // trace dumps of one step, without values: two recipes, and a trace.json of something else
    auto dump = [&](const std::string& name, const std::string& trace) {
      fs::create_directories(dir_ / name);
      std::ofstream(dir_ / name / "trace.json") << trace;
    };
    auto one_step = [](const std::string& step) {
      return R"({"format": "vkattn-trace", "version": 1, "backend": "cpu", "device": "reference", "steps": [{"index": 0, )"
             R"("name": ")" + step + R"(", "op": "linear", "inputs": [], "output": {"name": "x", "shape": [2, 2]}}]})";
    };
    dump("dump_q", one_step("q_proj"));
    dump("dump_k", one_step("k_proj"));
    dump("not_a_dump", R"({"format": "something else"})");
  }
  std::set<std::string> inputs_ = {"bool.npy", "rank4.npy", "e7.npy", "nan.npy", "mask_wrong.npy", "mask_nan.npy",
                                   "truncated.npy", "fortran.npy", "empty.npy", "text.npy", "t5", "qa", "big_endian.npy",
                                   "int16.npy", "header_past_end.npy", "malformed.npy",
                                   "offsets_past_end.safetensors", "overlap.safetensors", "dtype.safetensors",
                                   "size_mismatch.safetensors", "missing_tensor.safetensors", "misshaped.safetensors",
                                   "unexpected_tensor.safetensors", "bool_weight.safetensors", "not_json.safetensors",
                                   "header_past_end.safetensors", "dump_q", "dump_k", "not_a_dump"};
};

TEST_P(CliBadInput, ExitsTwoWithOneLineAndWritesNothing) {
  make_inputs();
  const auto fixture = golden_fixture("self_attention");
  std::vector<std::string> args;
  for (std::string a : GetParam().args) {
    for (auto [key, value] : {std::pair{"{dir}", dir_.string()}, std::pair{"{g}", fixture.dir.string()},
                              std::pair{"{e}", std::string(VKATTN_GOLDEN_ENCODER_DIR "/encoder2_post_gelu_norm_padding")},
                              std::pair{"{m}", std::string(VKATTN_SOURCE_DIR "/models/tiny_char")},
                              std::pair{"{models}", std::string(VKATTN_SOURCE_DIR "/models")},
                              std::pair{"{d}", std::string(VKATTN_GOLDEN_DECODER_DIR "/decoder2_post_gelu_norm_padding")},
                              std::pair{"{q}", std::string(VKATTN_GOLDEN_GROUPED_QUERY_DIR "/gqa_half")}}) {
      if (auto at = a.find(key); at != std::string::npos) a.replace(at, std::string(key).size(), value);
    }
    args.push_back(a);
  }
  Exit e = vkattn(args);
  EXPECT_EQ(e.code, 2) << e.err;
  ASSERT_FALSE(e.err.empty());
  EXPECT_EQ(e.err.find('\n'), e.err.size() - 1) << "not exactly one line:\n" << e.err;
  EXPECT_NE(e.err.find(GetParam().message), std::string::npos) << e.err;
  EXPECT_EQ(outputs(inputs_), std::vector<std::string>{}) << "an output or a temporary was left behind";
}

// Arguments that run fine, with one bad change: `change` replaces the value of an option
// already there, or is appended.
std::vector<std::string> changed(std::vector<std::string> args, const std::vector<std::string>& change) {
  auto at = std::find(args.begin(), args.end(), change[0]);
  if (at != args.end() && change.size() == 2) {
    *(at + 1) = change[1];
  } else {
    args.insert(args.end(), change.begin(), change.end());
  }
  return args;
}

std::vector<std::string> good(const std::vector<std::string>& change) {
  return changed({"run", "--weights", "{g}/weights.safetensors", "--query", "{g}/query.npy", "--out", "{dir}/out.npy",
                  "--attn-weights", "{dir}/w.npy"},
                 change);
}

std::vector<std::string> good_grouped(const std::vector<std::string>& change) {
  return changed({"run", "--weights", "{q}/weights.safetensors", "--query", "{q}/x.npy", "--causal", "--out",
                  "{dir}/out.npy"},
                 change);
}

std::vector<std::string> with_query(const std::string& query) {
  return {"run", "--weights", "{g}/weights.safetensors", "--query", query, "--out", "{dir}/out.npy"};
}

const std::vector<BadRun> kRunBadInputs = {
    BadRun{"no_weights", {"run", "--query", "{g}/query.npy", "--out", "{dir}/out.npy"}, "--weights is required"},
    BadRun{"weights_missing", {"run", "--weights", "{dir}/nope.safetensors", "--query", "{g}/query.npy", "--out", "{dir}/out.npy"},
           "nope.safetensors: no such file"},
    BadRun{"weights_not_safetensors", {"run", "--weights", "{g}/query.npy", "--query", "{g}/query.npy", "--out", "{dir}/out.npy"},
           "query.npy: header length"},
    BadRun{"weights_empty", {"run", "--weights", "{dir}/empty.npy", "--query", "{g}/query.npy", "--out", "{dir}/out.npy"},
           "empty.npy: too short for a safetensors file"},
    BadRun{"weights_header_past_end", good({"--weights", "{dir}/header_past_end.safetensors"}),
           "header_past_end.safetensors: header length 1000 runs past the end of the 10-byte file"},
    BadRun{"weights_not_json", good({"--weights", "{dir}/not_json.safetensors"}), "not_json.safetensors: the header is not valid JSON"},
    BadRun{"weights_offsets_past_end", good({"--weights", "{dir}/offsets_past_end.safetensors"}),
           "tensor 'out_proj.bias': data_offsets [1120, 1152] lie past the end of the 1100-byte data buffer"},
    BadRun{"weights_overlap", good({"--weights", "{dir}/overlap.safetensors"}),
           "tensors 'out_proj.weight' and 'out_proj.bias' overlap in the data buffer"},
    BadRun{"weights_dtype", good({"--weights", "{dir}/dtype.safetensors"}), "tensor 'out_proj.bias': dtype I64 is not supported"},
    BadRun{"weights_size_mismatch", good({"--weights", "{dir}/size_mismatch.safetensors"}),
           "tensor 'out_proj.bias': data_offsets [1120, 1152] hold 32 bytes but shape (9,) of F32 needs 36"},
    BadRun{"weights_missing_tensor", good({"--weights", "{dir}/missing_tensor.safetensors"}),
           "missing_tensor.safetensors: missing tensor 'out_proj.weight', expected shape (E, E)"},
    BadRun{"weights_misshaped", good({"--weights", "{dir}/misshaped.safetensors"}),
           "misshaped.safetensors: tensor 'in_proj_weight' has shape (24, 7), expected"},
    BadRun{"weights_unexpected_tensor", good({"--weights", "{dir}/unexpected_tensor.safetensors"}),
           "unexpected_tensor.safetensors: unexpected tensor 'extra' (1,)"},
    BadRun{"weights_bool", good({"--weights", "{dir}/bool_weight.safetensors"}),
           "bool_weight.safetensors: tensor 'in_proj_bias' is bool; a float tensor is expected"},
    BadRun{"query_missing", with_query("{dir}/nope.npy"), "nope.npy: no such file"},
    BadRun{"query_big_endian", with_query("{dir}/big_endian.npy"), "big_endian.npy: big-endian data ('>f4') is not supported"},
    BadRun{"query_int16", with_query("{dir}/int16.npy"), "int16.npy: dtype '<i2' is not supported"},
    BadRun{"query_header_past_end", with_query("{dir}/header_past_end.npy"), "header_past_end.npy: header length 32767 runs past the end"},
    BadRun{"query_malformed", with_query("{dir}/malformed.npy"), "malformed.npy: malformed .npy header"},
    BadRun{"query_empty", with_query("{dir}/empty.npy"), "empty.npy: empty file"},
    BadRun{"query_text", with_query("{dir}/text.npy"), "text.npy: not an .npy file"},
    BadRun{"query_truncated", with_query("{dir}/truncated.npy"), "truncated.npy: truncated"},
    BadRun{"query_fortran", with_query("{dir}/fortran.npy"), "fortran.npy: Fortran-order arrays are not supported"},
    BadRun{"query_bool", with_query("{dir}/bool.npy"), "bool.npy: the query is bool"},
    BadRun{"query_rank4", with_query("{dir}/rank4.npy"), "rank4.npy: the query has shape (1, 2, 5, 8)"},
    BadRun{"query_nan", with_query("{dir}/nan.npy"), "nan.npy: the query holds NaN at (0, 1, 2)"},
    BadRun{"query_wrong_features", with_query("{dir}/e7.npy"), "query (2, 5, 7)"},
    BadRun{"key_without_value", good({"--key", "{g}/query.npy"}), "--key requires --value"},
    BadRun{"key_padding_wrong_shape", good({"--key-padding-mask", "{dir}/mask_wrong.npy"}), "key_padding_mask (2, 4)"},
    BadRun{"attn_mask_wrong_shape", good({"--attn-mask", "{dir}/mask_wrong.npy"}), "attn_mask (2, 4)"},
    BadRun{"attn_mask_nan", good({"--attn-mask", "{dir}/mask_nan.npy"}), "mask_nan.npy: the attention mask holds NaN at (3, 1)"},
    BadRun{"heads_zero", good({"--heads", "0"}), "--heads"},
    BadRun{"heads_disagree", good({"--heads", "4"}), "--heads 4 disagrees with num_heads 2"},
    BadRun{"heads_unknown",
           {"run", "--weights", "{g}/../one_head/weights.safetensors", "--query", "{g}/query.npy", "--out", "{dir}/out.npy"},
           "the number of heads is unknown"},
    BadRun{"heads_not_dividing",
           {"run", "--weights", "{g}/../one_head/weights.safetensors", "--heads", "3", "--query", "{g}/query.npy",
            "--out", "{dir}/out.npy"},
           "not divisible by num_heads=3"},
    BadRun{"unknown_backend", good({"--backend", "tpu"}), "--backend"},
    BadRun{"unknown_device", good({"--device", "nosuchgpu"}), "--device: "},
    BadRun{"device_with_cpu", good({"--backend", "cpu", "--device", "0"}), "--device: a device ('0') chooses a GPU; it does not apply to the cpu backend"},
    BadRun{"per_head_without_weights",
           {"run", "--weights", "{g}/weights.safetensors", "--query", "{g}/query.npy", "--per-head-weights"},
           "--per-head-weights requires --attn-weights"},
    BadRun{"out_dir_missing", good({"--out", "{dir}/no/such/dir/out.npy"}), "out.npy: its directory does not exist"},
    BadRun{"weights_dir_missing", good({"--attn-weights", "{dir}/missing/w.npy"}), "w.npy: its directory does not exist"},
    BadRun{"out_is_directory", good({"--out", "{dir}"}), "is a directory, not a file"},
    BadRun{"same_output_twice", good({"--attn-weights", "{dir}/out.npy"}), "--out and --attn-weights both name"},
    BadRun{"trace_values_without_trace", good({"--trace-values"}), "--trace-values requires --trace"},
    BadRun{"fused_with_weights", good({"--attention", "fused"}),
           "the fused path (flash_attention) never holds the attention weights"},
    BadRun{"unknown_attention", good({"--attention", "flash"}), "--attention: flash not in {auto,unfused,fused}"},
    BadRun{"side_by_side_with_backend", good({"--side-by-side", "--backend", "cpu"}), "--backend excludes --side-by-side"},
    BadRun{"atol_without_side_by_side", good({"--atol", "1e-3"}), "--atol requires --side-by-side"},
    BadRun{"negative_rtol", good({"--side-by-side", "--rtol", "-1"}), "--rtol: -1 is not a number >= 0"},
    BadRun{"unknown_flag", good({"--bogus"}), "--bogus"},
    // a grouped-query attention ({q}: Hugging Face's names, E 32, H 4, H_kv 2, d 8)
    BadRun{"rope_on_multihead", good({"--rope", "pairs"}),
           "--kv-heads, --rope, --rope-theta, --rotary-dims and --window configure a grouped-query attention"},
    BadRun{"kv_heads_disagree", good_grouped({"--kv-heads", "4"}),
           "--kv-heads 4 disagrees with tensor 'k_proj.weight' (16, 32): 2 heads of d = 8"},
    BadRun{"grouped_heads_disagree", good_grouped({"--heads", "3"}), "--heads 3 disagrees with num_heads 4 in __metadata__"},
    BadRun{"window_without_causal", {"run", "--weights", "{q}/weights.safetensors", "--query", "{q}/x.npy", "--window", "4"},
           "--window 4 needs --causal"},
    BadRun{"grouped_with_key", good_grouped({"--key", "{q}/x.npy", "--value", "{q}/x.npy"}),
           "which attends a sequence to itself: drop --key and --value"},
    BadRun{"grouped_with_attn_mask", good_grouped({"--attn-mask", "{dir}/mask_wrong.npy"}),
           "it takes --causal, --window and --key-padding-mask, not --attn-mask"},
    BadRun{"unknown_rope", good_grouped({"--rope", "neox"}), "--rope: neox not in {half,pairs}"},
    BadRun{"rotary_dims_odd", good_grouped({"--rotary-dims", "3"}), "rotary_dims=3 must be even"},
    BadRun{"rope_theta_one", good_grouped({"--rope-theta", "1"}), "--rope-theta"},
    BadRun{"grouped_padding_wrong_shape", good_grouped({"--key-padding-mask", "{dir}/mask_wrong.npy"}),
           "key_padding_mask (2, 4) must be (B, T) = (2, 17)"}};
INSTANTIATE_TEST_SUITE_P(Cli, CliBadInput, ::testing::ValuesIn(kRunBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// `vkattn encode` with one bad change to a good command line.
std::vector<std::string> good_encode(const std::vector<std::string>& change) {
  return changed({"encode", "--weights", "{e}/weights.safetensors", "--input", "{e}/src.npy", "--src-key-padding-mask",
                  "{e}/src_key_padding_mask.npy", "--out", "{dir}/out.npy"},
                 change);
}

const std::vector<BadRun> kEncodeBadInputs = {
    BadRun{"no_input", {"encode", "--weights", "{e}/weights.safetensors", "--out", "{dir}/out.npy"}, "--input is required"},
    BadRun{"weights_missing", good_encode({"--weights", "{dir}/nope.safetensors"}), "nope.safetensors: no such file"},
    BadRun{"weights_of_attention", good_encode({"--weights", "{g}/weights.safetensors"}),
           "unexpected tensor 'in_proj_bias' (24,) in an nn.TransformerEncoderLayer state_dict"},
    BadRun{"input_empty", good_encode({"--input", "{dir}/empty.npy"}), "empty.npy: empty file"},
    BadRun{"input_truncated", good_encode({"--input", "{dir}/truncated.npy"}), "truncated.npy: truncated"},
    BadRun{"input_bool", good_encode({"--input", "{dir}/bool.npy"}), "bool.npy: the input is bool"},
    BadRun{"input_rank4", good_encode({"--input", "{dir}/rank4.npy"}), "rank4.npy: the input has shape (1, 2, 5, 8)"},
    BadRun{"input_nan", good_encode({"--input", "{dir}/nan.npy"}), "nan.npy: the input holds NaN at (0, 1, 2)"},
    BadRun{"input_wrong_features", good_encode({"--input", "{dir}/e7.npy"}), "src (2, 5, 7) has 7 features but d_model=16"},
    BadRun{"padding_mask_wrong_shape", good_encode({"--src-key-padding-mask", "{dir}/mask_wrong.npy"}),
           "src_key_padding_mask (2, 4) must be (B, L) = (2, 6)"},
    BadRun{"mask_wrong_shape", good_encode({"--mask", "{dir}/mask_wrong.npy"}), "mask (2, 4) must be (L, L) = (6, 6)"},
    BadRun{"mask_nan", good_encode({"--mask", "{dir}/mask_nan.npy"}), "mask_nan.npy: the mask holds NaN at (3, 1)"},
    BadRun{"heads_disagree", good_encode({"--heads", "4"}), "--heads 4 disagrees with num_heads 2"},
    BadRun{"unknown_activation", good_encode({"--activation", "swish"}), "--activation: swish not in {relu,gelu}"},
    BadRun{"negative_eps", good_encode({"--eps", "-1e-5"}), "--eps: -1e-5 is not a number > 0"},
    BadRun{"unknown_backend", good_encode({"--backend", "tpu"}), "--backend"},
    BadRun{"out_dir_missing", good_encode({"--out", "{dir}/no/such/dir/out.npy"}), "out.npy: its directory does not exist"},
    BadRun{"trace_values_without_trace", good_encode({"--trace-values"}), "--trace-values requires --trace"},
    BadRun{"unknown_flag", good_encode({"--bogus"}), "--bogus"}};
INSTANTIATE_TEST_SUITE_P(CliEncode, CliBadInput, ::testing::ValuesIn(kEncodeBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// `vkattn decode` with one bad change to a good command line ({d}: a decoder fixture, E 12, B 3,
// T 6, S 5).
std::vector<std::string> good_decode(const std::vector<std::string>& change) {
  return changed({"decode", "--weights", "{d}/weights.safetensors", "--tgt", "{d}/tgt.npy", "--memory", "{d}/memory.npy",
                  "--causal", "--out", "{dir}/out.npy"},
                 change);
}

const std::vector<BadRun> kDecodeBadInputs = {
    BadRun{"no_memory", {"decode", "--weights", "{d}/weights.safetensors", "--tgt", "{d}/tgt.npy"}, "--memory is required"},
    BadRun{"weights_of_encoder", good_decode({"--weights", "{e}/weights.safetensors"}),
           "missing tensor 'layers.0.multihead_attn.out_proj.weight', expected shape (E, E)"},
    BadRun{"memory_wrong_features", good_decode({"--memory", "{e}/src.npy"}),
           "memory (2, 6, 16) has 16 features but d_model=12"},
    BadRun{"memory_nan", good_decode({"--memory", "{dir}/nan.npy"}), "nan.npy: the memory holds NaN at (0, 1, 2)"},
    BadRun{"memory_padding_wrong_shape", good_decode({"--memory-key-padding-mask", "{d}/tgt_key_padding_mask.npy"}),
           "memory_key_padding_mask (3, 6) must be (B, S) = (3, 5)"},
    BadRun{"tgt_mask_wrong_shape", good_decode({"--tgt-mask", "{dir}/mask_wrong.npy"}),
           "tgt_mask (2, 4) must be (T, T) = (6, 6)"},
    BadRun{"unknown_flag", good_decode({"--bogus"}), "--bogus"}};
INSTANTIATE_TEST_SUITE_P(CliDecode, CliBadInput, ::testing::ValuesIn(kDecodeBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// `vkattn generate` with one bad change to a good command line ({m}: models/tiny_char).
std::vector<std::string> good_generate(const std::vector<std::string>& change) {
  return changed({"generate", "--weights", "{m}/model.safetensors", "--prompt", "Alice", "--max-new-tokens", "5"}, change);
}

// `vkattn run --model` ({models}: the repository's models/)
const std::vector<BadRun> kRunModelBadInputs = {
    BadRun{"model_without_text", {"run", "--model", "{models}/tiny_gpt2"}, "--model requires --text"},
    BadRun{"model_with_query", {"run", "--model", "{models}/tiny_gpt2", "--text", "Alice", "--query", "{g}/query.npy"},
           "--query configures an attention module's run; --model"},
    BadRun{"model_text_empty", {"run", "--model", "{models}/tiny_gpt2", "--text", ""},
           "--text is empty: give the model at least one token"},
    BadRun{"weights_dtype_without_model", good({"--weights-dtype", "BF16"}), "--weights-dtype requires --model"},
    BadRun{"text_pair_empty", {"run", "--model", "{models}/tiny_bert", "--text", "Alice", "--text-pair", " "},
           "--text-pair is empty: give it at least one token"},
    BadRun{"text_pair_of_a_language_model", {"run", "--model", "{models}/tiny_gpt2", "--text", "Alice", "--text-pair", "b"},
           "is a language model, which reads one text"},
    BadRun{"text_pair_not_utf8", {"run", "--model", "{models}/tiny_bert", "--text", "Alice", "--text-pair", "b\xff"},
           "--text-pair: the text is not UTF-8 at byte 1"},
    BadRun{"top_k_without_a_mask", {"run", "--model", "{models}/tiny_bert", "--text", "Alice was tired.", "--top-k", "3"},
           "--top-k shows a masked LM's likeliest tokens at each [MASK] of --text: the text has none"},
    BadRun{"top_k_without_a_masked_lm", {"run", "--model", "{models}/tiny_gpt2", "--text", "Alice", "--top-k", "3"},
           "has no masked-LM head"},
    BadRun{"question_without_a_context", {"run", "--model", "{dir}/qa", "--text", "Who was tired?"},
           "qa answers a question from a context (BertForQuestionAnswering): give the question as --text and the "
           "context as --text-pair"},
    BadRun{"max_answer_len_without_an_answerer",
           {"run", "--model", "{models}/tiny_bert", "--text", "Alice", "--max-answer-len", "3"},
           "--max-answer-len is a question answerer's (…ForQuestionAnswering); "},
    BadRun{"max_answer_len_zero",
           {"run", "--model", "{dir}/qa", "--text", "Who?", "--text-pair", "Alice.", "--max-answer-len", "0"},
           "--max-answer-len: 0 is not a number > 0"},
    BadRun{"doc_stride_without_an_answerer",
           {"run", "--model", "{models}/tiny_bert", "--text", "Alice", "--doc-stride", "8"},
           "--doc-stride is a question answerer's (…ForQuestionAnswering); "},
    BadRun{"max_seq_len_past_the_positions",
           {"run", "--model", "{dir}/qa", "--text", "Who?", "--text-pair", "Alice.", "--max-seq-len", "999"},
           "the context's windows: max_seq_len=999 must be from 1 to the 64 tokens the model takes"},
    BadRun{"doc_stride_of_a_whole_window",
           {"run", "--model", "{dir}/qa", "--text", "Who?", "--text-pair",
            "Alice was tired of sitting by her sister, and of reading.", "--max-seq-len", "12", "--doc-stride", "5"},
           "the context's windows: stride=5 (doc_stride) must be at least 0 and below the 5 tokens"},
    BadRun{"top_k_zero", {"run", "--model", "{models}/tiny_bert", "--text", "Alice was [MASK].", "--top-k", "0"},
           "--top-k: 0 is not a number > 0"},
    BadRun{"model_of_another_architecture", {"run", "--model", "{dir}/t5", "--text", "Alice"},
           "architecture 'T5Model' (model_type 't5') is not one vkattn runs yet (GPT2LMHeadModel, "
           "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, GemmaForCausalLM, "
           "Phi3ForCausalLM, BertModel, BertForMaskedLM, BertForSequenceClassification, BertForTokenClassification, "
           "BertForQuestionAnswering, RobertaModel, RobertaForMaskedLM, RobertaForSequenceClassification, "
           "RobertaForTokenClassification, RobertaForQuestionAnswering, DistilBertModel, DistilBertForMaskedLM, "
           "DistilBertForSequenceClassification, DistilBertForTokenClassification, DistilBertForQuestionAnswering)"}};
INSTANTIATE_TEST_SUITE_P(CliRunModel, CliBadInput, ::testing::ValuesIn(kRunModelBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

const std::vector<BadRun> kGenerateBadInputs = {
    BadRun{"prompt_outside_vocabulary", good_generate({"--prompt", "Alice~"}),
           "--prompt: character '~' at 5 is not in the model's vocabulary of 54 characters"},
    BadRun{"prompt_empty", good_generate({"--prompt", ""}),
           "--prompt is empty: give at least one character to continue"},
    BadRun{"past_the_positions", good_generate({"--max-new-tokens", "124"}),
           "--max-new-tokens 124 after a prompt of 5 tokens needs 129 positions; the model has 128"},
    BadRun{"weights_of_encoder", good_generate({"--weights", "{e}/weights.safetensors"}),
           "missing tensor 'token_embedding.weight'"},
    BadRun{"negative_temperature", good_generate({"--temperature", "-1"}), "--temperature"},
    BadRun{"model_and_weights", good_generate({"--model", "{models}/tiny_gpt2"}), "--model excludes --weights"},
    BadRun{"neither_model_nor_weights",
           {"generate", "--prompt", "Alice"},
           "generate needs --model DIR or --weights M.safetensors"},
    BadRun{"prompt_not_utf8",
           {"generate", "--model", "{models}/tiny_gpt2", "--prompt", "Alice\xff"},
           "--prompt: the text is not UTF-8 at byte 5"},
    BadRun{"model_is_an_encoder",
           {"generate", "--model", "{models}/tiny_bert", "--prompt", "Alice"},
           "tiny_bert: a BertForMaskedLM encodes text but does not generate it (try vkattn run --model "},
    BadRun{"model_not_a_checkpoint",
           {"generate", "--model", "{models}", "--prompt", "Alice"},
           "models: no config.json (a checkpoint folder as the hub lays it out has config.json, model.safetensors "
           "and the tokenizer's files)"},
    BadRun{"weights_dtype_of_a_state_dict", good_generate({"--weights-dtype", "BF16"}),
           "--weights-dtype BF16 rounds a --model folder's weights; --weights"},
    BadRun{"weights_dtype_unknown",
           {"generate", "--model", "{models}/tiny_gpt2", "--prompt", "Alice", "--weights-dtype", "F8"},
           "--weights-dtype: F8 not in {stored,BF16,F16}"},
    BadRun{"cache_dtype_without_a_cache", good_generate({"--no-cache", "--cache-dtype", "F16"}),
           "--cache-dtype F16 is the KV cache's, and --no-cache makes none"}};
INSTANTIATE_TEST_SUITE_P(CliGenerate, CliBadInput, ::testing::ValuesIn(kGenerateBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// `vkattn check DIR` ({g}: a directory of .npy files, read as recorded steps before the module)
const std::vector<BadRun> kCheckBadInputs = {
    BadRun{"neither_weights_nor_model", {"check", "{g}", "--query", "{g}/query.npy"},
           "give the module as --weights W.safetensors and its input as --query X.npy, or a checkpoint folder as "
           "--model DIR with --text"},
    BadRun{"flag_of_another_module",
           {"check", "{g}", "--weights", "{g}/weights.safetensors", "--query", "{g}/query.npy", "--memory", "{g}/query.npy"},
           "weights.safetensors is an attention's state_dict, which does not take --memory"},
    BadRun{"encoder_with_key",
           {"check", "{g}", "--weights", "{e}/weights.safetensors", "--query", "{e}/src.npy", "--key", "{e}/src.npy",
            "--value", "{e}/src.npy"},
           "--key and --value: an encoder takes its input as --query"},
    BadRun{"decoder_without_memory", {"check", "{g}", "--weights", "{d}/weights.safetensors", "--query", "{d}/tgt.npy"},
           "weights.safetensors is a decoder's state_dict: give its memory with --memory"},
    BadRun{"model_with_query", {"check", "{g}", "--model", "{models}/tiny_gpt2", "--text", "Alice", "--query", "{g}/query.npy"},
           "--query is for a module's state_dict; --model"},
    BadRun{"weights_dtype_without_model",
           {"check", "{g}", "--weights", "{g}/weights.safetensors", "--query", "{g}/query.npy", "--weights-dtype", "F16"},
           "--weights-dtype requires --model"}};
INSTANTIATE_TEST_SUITE_P(CliCheck, CliBadInput, ::testing::ValuesIn(kCheckBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// `vkattn report` ({dir}/dump_q and dump_k: one step each, q_proj and k_proj).
const std::vector<BadRun> kReportBadInputs = {
    BadRun{"no_out", {"report", "{dir}/dump_q"}, "--out is required"},
    BadRun{"dump_missing", {"report", "{dir}/nope", "-o", "{dir}/r.html"}, "nope/trace.json: no such file"},
    BadRun{"not_a_dump", {"report", "{dir}/not_a_dump", "-o", "{dir}/r.html"},
           "not_a_dump/trace.json: not a vkattn trace (no \"format\": \"vkattn-trace\")"},
    BadRun{"different_recipes", {"report", "{dir}/dump_q", "--against", "{dir}/dump_k", "-o", "{dir}/r.html"},
           "the passes describe different recipes: step 0 is q_proj (linear) (2, 2) in one and k_proj (linear) (2, 2) "
           "in the other"},
    BadRun{"out_directory_missing", {"report", "{dir}/dump_q", "-o", "{dir}/nope/r.html"}, "r.html: its directory does not exist"}};
INSTANTIATE_TEST_SUITE_P(CliReport, CliBadInput, ::testing::ValuesIn(kReportBadInputs),
                         [](const auto& p) { return std::string(p.param.name); });

// docs/bad_input.md lists every case above as `run/NAME`, `encode/NAME`, `decode/NAME`, `generate/NAME`,
// `check/NAME` or `report/NAME` with a message holding
// the test's, and every other row names a check that exists: `cli/WHAT` in cli_test.sh, a gtest
// case `Suite.Name` in test_errors.cpp.
TEST(BadInputTable, ListsEveryCaseWithItsMessage) {
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in) << path;
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  std::map<std::string, std::string> rows;  // test -> its row, '\|' unescaped
  std::istringstream doc(read(VKATTN_SOURCE_DIR "/docs/bad_input.md"));
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("| `", 0) != 0) continue;
    const size_t end = line.find('`', 3);
    for (size_t at; (at = line.find("\\|")) != std::string::npos;) line.replace(at, 2, "|");
    rows[line.substr(3, end - 3)] = line;
  }
  std::set<std::string> cases;
  for (const auto* list : {&kRunBadInputs, &kRunModelBadInputs, &kEncodeBadInputs, &kDecodeBadInputs, &kGenerateBadInputs,
                           &kCheckBadInputs, &kReportBadInputs}) {
    for (const BadRun& bad : *list) {
      const std::string name = bad.args[0] + "/" + bad.name;
      cases.insert(name);
      ASSERT_TRUE(rows.count(name)) << name << " is not in docs/bad_input.md";
      EXPECT_NE(rows[name].find(bad.message), std::string::npos) << name << "'s row lacks: " << bad.message;
    }
  }
  const std::string cli_test = read(VKATTN_SOURCE_DIR "/tests/tools/cli_test.sh");
  const std::string test_errors = read(VKATTN_SOURCE_DIR "/tests/ops/test_errors.cpp");
  for (const auto& [name, row] : rows) {
    if (name.rfind("cli/", 0) == 0) {
      EXPECT_NE(cli_test.find("\"" + name.substr(4) + "\""), std::string::npos) << name << " is not in cli_test.sh";
    } else if (auto dot = name.find('.'); dot != std::string::npos) {
      EXPECT_NE(test_errors.find(name.substr(0, dot) + ", " + name.substr(dot + 1)), std::string::npos)
          << name << " is not in test_errors.cpp";
    } else {
      EXPECT_TRUE(cases.count(name)) << name << " is in docs/bad_input.md but no test has it";
    }
  }
}

// ---- vkattn encode: every encoder fixture, both backends ----

class CliEncodeGolden : public CliRun, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(CliEncodeGolden, WritesWhatPyTorchComputes) {
  const auto& [name, backend] = GetParam();
  const fs::path fixture = fs::path(VKATTN_GOLDEN_ENCODER_DIR) / name;
  std::ifstream in(fixture / "config.json");
  auto config = nlohmann::json::parse(in);
  std::ostringstream eps;
  eps << config.at("layer_norm_eps").get<double>();
  std::vector<std::string> args = {"encode", "--weights", (fixture / "weights.safetensors").string(), "--input",
                                   (fixture / "src.npy").string(), "--activation", config.at("activation"), "--eps",
                                   eps.str(), "--backend", backend, "--out", path("out.npy")};
  if (config.at("norm_first").get<bool>()) args.push_back("--norm-first");
  if (config.at("is_causal").get<bool>()) args.push_back("--causal");
  if (fs::exists(fixture / "src_key_padding_mask.npy")) {
    args.insert(args.end(), {"--src-key-padding-mask", (fixture / "src_key_padding_mask.npy").string()});
  }
  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "");
  EXPECT_NE(e.out.find(config.at("module") == "TransformerEncoder" ? "nn.TransformerEncoder(" : "nn.TransformerEncoderLayer("),
            std::string::npos) << e.out;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(fixture / "expected_output.npy"),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CliEncodeGolden,
                         ::testing::Combine(::testing::Values("layer_post_relu", "layer_pre_gelu_padding",
                                                              "encoder2_post_gelu_norm_padding", "encoder3_pre_relu_causal_eps",
                                                              "encoder1_post_relu_norm_awkward",
                                                              "encoder2_pre_gelu_norm_unbatched"),
                                            ::testing::Values("gpu", "cpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

// ---- vkattn decode: every decoder fixture (not nn.Transformer's), both backends ----

class CliDecodeGolden : public CliRun, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(CliDecodeGolden, WritesWhatPyTorchComputes) {
  const auto& [name, backend] = GetParam();
  const fs::path fixture = fs::path(VKATTN_GOLDEN_DECODER_DIR) / name;
  std::ifstream in(fixture / "config.json");
  auto config = nlohmann::json::parse(in);
  std::ostringstream eps;
  eps << config.at("layer_norm_eps").get<double>();
  std::vector<std::string> args = {"decode", "--weights", (fixture / "weights.safetensors").string(), "--tgt",
                                   (fixture / "tgt.npy").string(), "--memory", (fixture / "memory.npy").string(),
                                   "--activation", config.at("activation"), "--eps", eps.str(), "--backend", backend,
                                   "--out", path("out.npy")};
  if (config.at("norm_first").get<bool>()) args.push_back("--norm-first");
  if (config.at("tgt_is_causal").get<bool>()) args.push_back("--causal");
  for (const char* mask : {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask"}) {
    if (!fs::exists(fixture / (std::string(mask) + ".npy"))) continue;
    std::string flag = std::string("--") + mask;
    std::replace(flag.begin(), flag.end(), '_', '-');
    args.insert(args.end(), {flag, (fixture / (std::string(mask) + ".npy")).string()});
  }
  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "");
  EXPECT_NE(e.out.find("nn." + config.at("module").get<std::string>() + "("), std::string::npos) << e.out;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(fixture / "expected_output.npy"),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CliDecodeGolden,
                         ::testing::Combine(::testing::Values("layer_post_relu_causal", "layer_pre_gelu_masks",
                                                              "decoder2_post_gelu_norm_padding",
                                                              "decoder3_pre_relu_awkward_eps",
                                                              "decoder2_pre_gelu_norm_unbatched"),
                                            ::testing::Values("gpu", "cpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

// ---- vkattn run on a grouped-query attention: every fixture, both backends ----

class CliGroupedQueryGolden : public CliRun, public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(CliGroupedQueryGolden, WritesWhatPyTorchComputes) {
  const auto& [name, backend] = GetParam();
  const fs::path fixture = fs::path(VKATTN_GOLDEN_GROUPED_QUERY_DIR) / name;
  std::ifstream in(fixture / "config.json");
  auto config = nlohmann::json::parse(in);
  std::ostringstream theta;
  theta << config.at("rope_theta").get<double>();
  std::vector<std::string> args = {"run", "--weights", (fixture / "weights.safetensors").string(), "--query",
                                   (fixture / "x.npy").string(), "--causal", "--kv-heads",
                                   std::to_string(config.at("num_kv_heads").get<int64_t>()), "--rope",
                                   config.at("rope"), "--rope-theta", theta.str(), "--backend", backend, "--out",
                                   path("out.npy")};
  if (int64_t r = config.at("rotary_dims").get<int64_t>()) args.insert(args.end(), {"--rotary-dims", std::to_string(r)});
  if (int64_t w = config.at("window").get<int64_t>()) args.insert(args.end(), {"--window", std::to_string(w)});
  if (fs::exists(fixture / "key_padding_mask.npy")) {
    args.insert(args.end(), {"--key-padding-mask", (fixture / "key_padding_mask.npy").string()});
  }
  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err, "");
  EXPECT_NE(e.out.find("grouped-query attention: E="), std::string::npos) << e.out;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(fixture / "expected_output.npy"),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CliGroupedQueryGolden,
                         ::testing::Combine(::testing::Values("gqa_half", "gqa_pairs", "mqa_theta500k", "mha_llama",
                                                              "window_padding", "qwen_bias_partial", "qwen3_qk_norm"),
                                            ::testing::Values("gpu", "cpu")),
                         [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param); });

TEST_F(CliRun, EncodeTracesEveryStepOfEveryLayer) {
  const fs::path fixture = fs::path(VKATTN_GOLDEN_ENCODER_DIR) / "encoder3_pre_relu_causal_eps";
  Exit e = vkattn({"encode", "--weights", (fixture / "weights.safetensors").string(), "--input", (fixture / "src.npy").string(),
                   "--norm-first", "--eps", "1e-6", "--causal", "--attention", "fused", "--trace", path("trace"), "--trace-values"});
  ASSERT_EQ(e.code, 0) << e.err;
  std::ifstream in(dir_ / "trace" / "trace.json");
  auto trace = nlohmann::json::parse(in);
  EXPECT_EQ(trace.at("config").at("module"), "nn.TransformerEncoder");
  EXPECT_EQ(trace.at("config").at("num_layers"), 3);
  const auto& steps = trace.at("steps");
  // per pre-norm layer: norm1, q/k/v_proj each with its split_heads, flash_attention, merge_heads, out_proj,
  // residual_add1, norm2, linear1, relu, linear2, residual_add2 = 16 steps
  ASSERT_EQ(steps.size(), 3u * 16u);
  EXPECT_EQ(steps[0].at("name"), "layers.0.norm1");
  EXPECT_EQ(steps[7].at("name"), "layers.0.self_attn.flash_attention");
  EXPECT_EQ(steps[47].at("name"), "layers.2.residual_add2");
  EXPECT_EQ(steps[47].at("op"), "residual_add");
  for (const auto& step : steps) EXPECT_TRUE(fs::exists(dir_ / "trace" / step.at("output").at("file").get<std::string>()));
  // the last step's dump is the output
  EXPECT_TRUE(testing::all_close(io::read_npy(dir_ / "trace" / steps[47].at("output").at("file").get<std::string>()),
                                 io::read_npy(fixture / "expected_output.npy"), {.atol = 1e-4f, .rtol = 0.0f}));
}

TEST_F(CliRun, PackInProjProjectsSelfAttentionWithOneGemmAndWritesWhatPyTorchComputes) {
  const auto g = golden_fixture("self_attention");
  ASSERT_FALSE(g.has("key")) << "self-attention: one input";
  std::vector<std::string> args = {"run", "--weights", g.weights().string(), "--query", g.npy("query").string(), "--pack-in-proj",
                                   "--attention", "fused", "--out", path("out.npy"), "--trace", path("trace")};
  if (g.config.at("is_causal").get<bool>()) args.push_back("--causal");
  if (g.has("key_padding_mask")) args.insert(args.end(), {"--key-padding-mask", g.npy("key_padding_mask").string()});
  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(g.npy("expected_output")),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
  std::ifstream in(dir_ / "trace" / "trace.json");
  auto trace = nlohmann::json::parse(in);
  EXPECT_EQ(trace.at("config").at("pack_in_proj"), true);
  const auto& first = trace.at("steps").at(0);
  EXPECT_EQ(first.at("name"), "in_proj");
  EXPECT_EQ(first.at("op"), "linear");
  const auto query_shape = io::read_npy(g.npy("query")).shape;  // (B, L, E)
  EXPECT_EQ(first.at("output").at("shape"), (Shape{query_shape[0], query_shape[1], 3 * query_shape[2]}));
  EXPECT_EQ(trace.at("steps").at(1).at("inputs").at(0).at("name"), "in_proj") << "split_heads_q reads the packed projection";
}

TEST_F(CliRun, EncodePacksEachLayersProjectionsIntoOneInProjGemm) {
  const fs::path fixture = fs::path(VKATTN_GOLDEN_ENCODER_DIR) / "encoder3_pre_relu_causal_eps";
  Exit e = vkattn({"encode", "--weights", (fixture / "weights.safetensors").string(), "--input", (fixture / "src.npy").string(),
                   "--norm-first", "--eps", "1e-6", "--causal", "--pack-in-proj", "--trace", path("trace"), "--out", path("out.npy")});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(fixture / "expected_output.npy"),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
  std::ifstream in(dir_ / "trace" / "trace.json");
  auto trace = nlohmann::json::parse(in);
  const auto& steps = trace.at("steps");
  // per pre-norm layer: norm1, in_proj, 3 split_heads, flash_attention, merge_heads, out_proj,
  // residual_add1, norm2, linear1, relu, linear2, residual_add2 = 14 steps
  ASSERT_EQ(steps.size(), 3u * 14u);
  for (int layer = 0; layer < 3; ++layer) {
    EXPECT_EQ(steps[layer * 14 + 1].at("name"), "layers." + std::to_string(layer) + ".self_attn.in_proj");
  }
}

// ---- --trace and vkattn diff ----

TEST_F(CliRun, TraceDumpsOfBothBackendsAgreeAndDiffFindsACorruptedStep) {
  const auto g = golden_fixture("self_attention");
  auto run = [&](const std::string& backend, bool values) {
    std::vector<std::string> args = {"run", "--weights", g.weights().string(), "--query", g.npy("query").string(),
                                     "--backend", backend, "--attention", "unfused", "--trace", path(backend)};
    if (values) args.push_back("--trace-values");
    return vkattn(args);
  };
  Exit e = run("cpu", true);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(std::regex_search(e.out, std::regex(R"(\n7 +softmax +\(2, 2, 5, 5\) -> \(2, 2, 5, 5\) +[\d.]+\n)"))) << e.out;
  ASSERT_EQ(run("gpu", true).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "gpu" / "timeline.json"));

  e = vkattn({"diff", path("cpu"), path("gpu")});
  EXPECT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("all 11 compared steps agree"), std::string::npos) << e.out;

  Tensor p = io::read_npy(dir_ / "gpu" / "007_softmax.npy");  // (2, 2, 5, 5)
  p.at({1, 0, 3, 2}) = 0.5f;
  io::write_npy(dir_ / "gpu" / "007_softmax.npy", p);
  e = vkattn({"diff", path("cpu"), path("gpu")});
  EXPECT_EQ(e.code, 1) << e.out << e.err;
  EXPECT_NE(e.out.find("first divergent step: 7 softmax (softmax), 1 of 100 elements"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("first at flat index 67 = (b=1, h=0, i=3, j=2)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("B = 0.5"), std::string::npos) << e.out;

  e = vkattn({"diff", path("cpu"), path("nowhere")});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("nowhere/trace.json: no such file"), std::string::npos) << e.err;
  ASSERT_EQ(run("cpu", false).code, 0);  // shapes only
  ASSERT_EQ(run("gpu", false).code, 0);
  e = vkattn({"diff", path("cpu"), path("gpu")});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("no step values to compare"), std::string::npos) << e.err;
}

// ---- vkattn report and --report: the pages themselves are tested in a browser (tests/browser) ----

TEST_F(CliRun, ReportWritesOnePageOfTheDumpsAndRunWritesOneOfBothPasses) {
  const auto g = golden_fixture("self_attention");
  const std::vector<std::string> run = {"run", "--weights", g.weights().string(), "--query", g.npy("query").string(),
                                        "--attention", "unfused", "--side-by-side", "--trace", path("dump"),
                                        "--trace-values", "--report", path("run.html")};
  Exit e = vkattn(run);
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("report: " + path("run.html") + " ("), std::string::npos) << e.out;
  const auto page = [&](const std::string& name) {
    std::ifstream in(dir_ / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_NE(page("run.html").find(R"("label":"gpu")"), std::string::npos);
  EXPECT_NE(page("run.html").find(R"("label":"cpu")"), std::string::npos);

  Tensor p = io::read_npy(dir_ / "dump" / "gpu" / "007_softmax.npy");
  p.at({1, 0, 3, 2}) = 0.5f;
  io::write_npy(dir_ / "dump" / "gpu" / "007_softmax.npy", p);
  e = vkattn({"report", path("dump/gpu"), "--against", path("dump/cpu"), "-o", path("diff.html")});
  ASSERT_EQ(e.code, 0) << e.err;  // a page of dumps that disagree is still a page
  EXPECT_NE(e.out.find("11 steps; it opens at the first divergent step, 7 softmax"), std::string::npos) << e.out;
  EXPECT_NE(page("diff.html").find("first at flat index 67 = (b=1, h=0, i=3, j=2)"), std::string::npos);
}

// ---- faults of the device (VKATTN_FAULT, engine/vulkan/faults.h): exit 1, one line, no file ----

TEST_F(CliRun, ADeviceFaultExitsOneWithOneLineAndWritesNothing) {
  const auto g = golden_fixture("self_attention");
  const std::pair<const char*, const char*> cases[] = {
      {"allocation:1:out_of_device_memory:softmax",
       "vkattn: softmax: allocating 400 bytes of device memory: vk::Device::allocateMemory failed with "
       "VK_ERROR_OUT_OF_DEVICE_MEMORY; the device ran out of memory"},
      {"fence_wait:1:device_lost:reading back out_proj",
       "vkattn: reading back out_proj: vkWaitForFences failed with VK_ERROR_DEVICE_LOST; the driver lost the device"},
      {"fence_wait:1:timeout", "did not finish within 600 s (VKATTN_FENCE_TIMEOUT): the device is treated as lost"}};
  for (const auto& [fault, says] : cases) {
    ::setenv("VKATTN_FAULT", fault, 1);
    Exit e = vkattn({"run", "--weights", g.weights().string(), "--query", g.npy("query").string(), "--attention",
                     "unfused", "--out", path("out.npy")});
    ::unsetenv("VKATTN_FAULT");
    EXPECT_EQ(e.code, 1) << fault << ": " << e.err;
    EXPECT_EQ(e.err.find('\n'), e.err.size() - 1) << "not one line: " << e.err;
    EXPECT_NE(e.err.find(says), std::string::npos) << fault << ": " << e.err;
    EXPECT_EQ(outputs(), std::vector<std::string>{}) << fault;
  }
  ::setenv("VKATTN_FAULT", "allocation:0:out_of_device_memory", 1);
  Exit e = vkattn({"run", "--weights", g.weights().string(), "--query", g.npy("query").string()});
  ::unsetenv("VKATTN_FAULT");
  EXPECT_EQ(e.code, 2) << e.err;
  EXPECT_NE(e.err.find("VKATTN_FAULT=allocation:0:out_of_device_memory: expected SITE:N:RESULT[:STEP]"), std::string::npos)
      << e.err;
}

// ---- --side-by-side ----

TEST_F(CliRun, SideBySideComparesEveryStepWritesBothDumpsAndTheGpuResult) {
  const auto g = golden_fixture("causal_padding_per_head");  // causal self-attention, padding, per-head weights
  std::vector<std::string> args = {"run", "--weights", g.weights().string(), "--query", g.npy("query").string(),
                                   "--key-padding-mask", g.npy("key_padding_mask").string(), "--causal",
                                   "--side-by-side", "--trace", path("dump"), "--trace-values",
                                   "--out", path("out.npy"), "--attn-weights", path("w.npy"), "--per-head-weights"};
  Exit e = vkattn(args);
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  for (const char* step : {"q_proj", "attention_scores", "attention_mask", "softmax", "attention_values", "merge_heads", "out_proj"}) {
    EXPECT_NE(e.out.find(step), std::string::npos) << step << "\n" << e.out;
  }
  EXPECT_NE(e.out.find("max |gpu - cpu|"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("every step agrees: gpu and cpu within atol 1e-05"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("gpu backend: "), std::string::npos) << e.out;
  EXPECT_TRUE(testing::all_close(io::read_npy(path("out.npy")), io::read_npy(g.npy("expected_output")), {.atol = 1e-4f, .rtol = 0.0f}));
  EXPECT_TRUE(testing::all_close(io::read_npy(path("w.npy")), io::read_npy(g.npy("expected_weights")), {.atol = 1e-5f, .rtol = 0.0f}));

  for (const char* backend : {"gpu", "cpu"}) EXPECT_TRUE(fs::exists(dir_ / "dump" / backend / "001_split_heads_q.npy")) << backend;
  e = vkattn({"diff", path("dump/gpu"), path("dump/cpu")});
  EXPECT_EQ(e.code, 0) << e.out << e.err;
}

TEST_F(CliRun, SideBySideWithAZeroToleranceShowsWhereTheBackendsDifferAndWritesNothing) {
  // The GPU's softmax and the reference's round differently in the last bit; atol = rtol = 0
  // turns that into a divergence, which must name its step and write no output.
  const auto g = golden_fixture("awkward_sizes");
  Exit e = vkattn({"run", "--weights", g.weights().string(), "--query", g.npy("query").string(), "--key",
                   g.npy("key").string(), "--value", g.npy("value").string(), "--side-by-side", "--atol", "0",
                   "--rtol", "0", "--out", path("out.npy")});
  EXPECT_EQ(e.code, 1) << e.out << e.err;
  EXPECT_NE(e.out.find("DIVERGES"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("first divergent step: "), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("first at flat index"), std::string::npos) << e.out;
  EXPECT_NE(e.err.find("the gpu and cpu passes disagree from step"), std::string::npos) << e.err;
  EXPECT_NE(e.err.find("nothing was written"), std::string::npos) << e.err;
  EXPECT_TRUE(outputs().empty());
}

// ---- --images ----

TEST_F(CliRun, ImagesDrawsOneHeatmapPerBatchItemAndHead) {
  const auto g = golden_fixture("causal_padding_per_head");  // B 3, H 4, L = S = 6
  Exit e = vkattn({"run", "--weights", g.weights().string(), "--query", g.npy("query").string(), "--causal",
                   "--attn-weights", path("w.npy"), "--per-head-weights", "--images", path("pictures")});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("12 heatmaps -> "), std::string::npos) << e.out;
  size_t images = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "pictures")) {
    std::string svg = slurp(entry.path());
    EXPECT_NE(svg.find("data-rows=\"6\" data-cols=\"6\""), std::string::npos) << entry.path();
    ++images;
  }
  EXPECT_EQ(images, 12u);
  EXPECT_TRUE(fs::exists(dir_ / "pictures" / "attn_weights_b2_h3.svg"));
  e = vkattn({"run", "--weights", g.weights().string(), "--query", g.npy("query").string(), "--images", path("p")});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("--images requires --attn-weights"), std::string::npos) << e.err;
}

// ---- vkattn bench ----

TEST_F(CliRun, BenchValidatesTimesAndReportsEveryStepAsJson) {
  Exit e = vkattn({"bench", "--batch", "2", "--seq", "17", "--kv-seq", "3", "--embed", "12", "--heads", "3", "--causal",
                   "--attention", "unfused", "--iters", "3", "--warmup", "1", "--tracing-overhead", "--json"});
  ASSERT_EQ(e.code, 0) << e.err;
  auto j = nlohmann::json::parse(e.out);
  EXPECT_EQ(j["backend"], "gpu");
  EXPECT_GT(j["total_ms"].get<double>(), 0.0);
  EXPECT_LE(j["min_ms"].get<double>(), j["total_ms"].get<double>());
  // 2 B (L E E + 2 S E E + L E E) + 4 B L S E: the projections, Q·Kᵀ and P·V
  EXPECT_DOUBLE_EQ(j["flops"].get<double>(), 2.0 * 2 * (17 * 144 + 2 * 3 * 144 + 17 * 144) + 4.0 * 2 * 17 * 3 * 12);
  EXPECT_NEAR(j["gflops"].get<double>(), j["flops"].get<double>() / (j["total_ms"].get<double>() * 1e6), 1e-9);
  EXPECT_GT(j["peak_device_bytes"].get<uint64_t>(), 4u * 2 * 3 * 17 * 3) << "at least the scores (B, H, L, S)";
  EXPECT_LE(j["validation_max_abs_error"].get<double>(), 1e-5);
  EXPECT_EQ(j["step_clock"], "gpu");
  // the roofline: the device's peak, and each step's least work against it
  EXPECT_GT(j["device_peak"]["flops_per_s"].get<double>(), 1e8);
  EXPECT_GT(j["device_peak"]["bytes_per_s"].get<double>(), 1e8);
  std::vector<std::string> names;
  for (const auto& step : j["steps"]) {
    names.push_back(step["name"]);
    EXPECT_GE(step["time_us"].get<double>(), 0.0) << step;
    if (step["time_us"].get<double>() > 0) {
      EXPECT_GT(step["of_roofline"].get<double>(), 0.0) << step;
    }
  }
  EXPECT_EQ(j["steps"][0]["flops"].get<double>(), 2.0 * 2 * 17 * 12 * 12) << "q_proj: 2·B·L·E·E";
  EXPECT_EQ(j["steps"][0]["bytes"].get<double>(), 4.0 * (2 * 17 * 12 + 144 + 12 + 2 * 17 * 12)) << "x, W, b and y";
  EXPECT_EQ(names, (std::vector<std::string>{"q_proj", "split_heads_q", "k_proj", "split_heads_k", "v_proj", "split_heads_v",
                                             "attention_scores", "attention_mask", "softmax", "attention_values",
                                             "merge_heads", "out_proj"}));
  for (const char* mode : {"none", "shapes", "values"}) EXPECT_GT(j["tracing"][mode]["median_ms"].get<double>(), 0.0) << mode;
  EXPECT_TRUE(j["tracing"]["shapes"]["overhead"].is_number());
}

TEST_F(CliRun, BenchResidentCarriesNothingAndFromTheHostCarriesInputWeightsAndOutput) {
  // cross-attention B 2, L 7, S 3, E 8: from the host the query, the memory, four (8, 8) weights
  // and four biases go up and the output comes back; resident, nothing crosses
  const uint64_t up = (2 * 7 * 8 + 2 * 3 * 8 + 4 * 64 + 4 * 8) * 4, down = 2 * 7 * 8 * 4;
  for (bool resident : {false, true}) {
    std::vector<std::string> args{"bench", "--batch", "2", "--seq", "7", "--kv-seq", "3", "--embed", "8", "--heads", "2",
                                  "--iters", "2", "--json"};
    if (resident) args.push_back("--resident");
    Exit e = vkattn(args);
    ASSERT_EQ(e.code, 0) << e.err;
    auto j = nlohmann::json::parse(e.out);
    EXPECT_EQ(j["config"]["resident"], resident);
    EXPECT_EQ(j["uploaded_bytes"].get<uint64_t>(), resident ? 0 : up) << resident;
    EXPECT_EQ(j["downloaded_bytes"].get<uint64_t>(), resident ? 0 : down) << resident;
    EXPECT_LE(j["validation_max_abs_error"].get<double>(), 1e-5) << "the resident output is read back to be checked";
    // the host's share of a resident forward: part of its time; none from the host
    if (resident) {
      EXPECT_GT(j["host_ms"].get<double>(), 0.0);
      EXPECT_LE(j["host_ms"].get<double>(), j["total_ms"].get<double>()) << "each forward's part, the median of them";
    } else {
      EXPECT_TRUE(j["host_ms"].is_null()) << j["host_ms"];
    }
  }
}

TEST_F(CliRun, BenchPrintsAReportAndRefusesBadShapes) {
  Exit e = vkattn({"bench", "--batch", "1", "--seq", "5", "--embed", "8", "--heads", "2", "--iters", "2", "--backend", "cpu"});
  ASSERT_EQ(e.code, 0) << e.err;
  // without weights, bench's default path is the fused one
  EXPECT_NE(e.out.find("self-attention B=1 L=5 S=5 E=8 H=2 d=4, need_weights=False, fused, on cpu"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("#   step                    output              host µs   share  GFLOP/s    GB/s\n"),
            std::string::npos) << e.out;
  EXPECT_NE(e.out.find("6   flash_attention         (1, 2, 5, 4)"), std::string::npos) << e.out;
  EXPECT_EQ(e.out.find("of peak"), std::string::npos) << "the reference has no device peak\n" << e.out;
  e = vkattn({"bench", "--embed", "10", "--heads", "3"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("embed_dim=10 is not divisible by num_heads=3"), std::string::npos) << e.err;
  e = vkattn({"bench", "--trace", "everything"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("--trace"), std::string::npos) << e.err;
}

// --float16-products: on a device with float16 cooperative matrices (lavapipe of Mesa 25.1 on:
// scripts/cooperative-matrices runs this there) the products are float16's, further from the
// float32 reference than float32's products come and within the 1e-2 bench holds them to;
// elsewhere the device is named with what it lacks (exit 1, as for a missing device); the
// reference backend has none (exit 2).
TEST_F(CliRun, BenchFloat16ProductsRunWhereTheDeviceHasThemAndAreRefusedElsewhere) {
  const auto& device = testing::shared_context()->device_report();
  Exit e = vkattn({"bench", "--seq", "17", "--embed", "64", "--heads", "4", "--iters", "2", "--json",
                   "--float16-products"});
  if (device.float16_products) {
    ASSERT_EQ(e.code, 0) << e.err;
    auto j = nlohmann::json::parse(e.out, nullptr, /*allow_exceptions=*/false);  // [] below: not const
    ASSERT_TRUE(j.is_object()) << "stdout is not one JSON object: '" << e.out << "'; stderr: " << e.err;
    EXPECT_EQ(j["config"]["float16_products"], true);
    EXPECT_GT(j["validation_max_abs_error"].get<double>(), 1e-5) << "float32's products: the option not taken";
    EXPECT_LE(j["validation_max_abs_error"].get<double>(), 1e-2);
  } else {
    EXPECT_EQ(e.code, 2) << e.out;  // the user's request, named by its flag: not a device failing
    EXPECT_NE(e.err.find("--float16-products: '" + device.name + "' has no float16 cooperative matrices"),
              std::string::npos) << e.err;
  }
  e = vkattn({"bench", "--backend", "cpu", "--float16-products"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("--float16-products: the cpu backend computes in float32 only; give --backend gpu"),
            std::string::npos) << e.err;
}

// ---- vkattn tune, and the plans vkattn devices shows ------------------------------------------------
TEST_F(CliRun, TuneMeasuresEveryClassOnceRemembersItAndDevicesListsThePlans) {
  const std::string cache = path("cache");
  plans_ = cache;
  Exit e = vkattn({"tune", "--shapes", "2x128x256x4:causal"});
  ASSERT_EQ(e.code, 0) << e.err;
  for (const char* shape_class : {"linear: rows ≤ 256, n ≤ 256, k ≤ 256", "attention_scores: rows ≤ 1024, n ≤ 128, k ≤ 64",
                                  "attention_values: rows ≤ 1024, n ≤ 64, k ≤ 128",
                                  "flash_attention: d 64, L ≤ 128, S ≤ 128, causal",
                                  "attention path: d 64, L ≤ 128, S ≤ 128, causal",
                                  "flash_decoding: d 64, rows ≤ 8, S ≤ 128"}) {
    EXPECT_NE(e.out.find(std::string("  ") + shape_class + ": "), std::string::npos) << shape_class << "\n" << e.out;
  }
  EXPECT_NE(e.out.find("    chosen  "), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("6 shape classes in "), std::string::npos) << e.out;
  EXPECT_NE(e.err.find("  tuning linear (256, 256) · (256, 256)ᵀ: done"), std::string::npos) << e.err;
  ASSERT_EQ(std::distance(fs::directory_iterator(fs::path(cache) / "vkattn"), fs::directory_iterator()), 2)
      << "the plans and their lock file";
  // remembered: the same classes again are not measured
  e = vkattn({"tune", "--shapes", "2x128x256x4:causal"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_EQ(e.err.find("tuning"), std::string::npos) << e.err;
  EXPECT_NE(e.out.find("6 shape classes in "), std::string::npos) << e.out;
  e = vkattn({"devices"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("plans measured on this device"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("(" + cache + "/vkattn/plans-"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("       flash_attention: d 64, L ≤ 128, S ≤ 128, causal\n"), std::string::npos) << e.out;
  // --again measures them anew
  e = vkattn({"tune", "--shapes", "2x128x256x4:causal", "--again"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.err.find("tuning flash_attention"), std::string::npos) << e.err;
  for (const char* bad : {"S9", "2x128x256x3", "0x1x4x1", "2x128"}) {
    e = vkattn({"tune", "--shapes", bad});
    EXPECT_EQ(e.code, 2) << bad << ": " << e.err;
    EXPECT_NE(e.err.find(std::string("vkattn: --shapes: '") + bad + "'"), std::string::npos) << e.err;
    EXPECT_EQ(e.err.find('\n'), e.err.size() - 1) << "not one line: " << e.err;
  }
}

// ---- vkattn generate: the shipped tiny model, against the tokens torch chose ---------------------
const std::string kTinyModel = VKATTN_SOURCE_DIR "/models/tiny_char/model.safetensors";

nlohmann::json generated(const Exit& e) {
  EXPECT_EQ(e.code, 0) << e.err;
  return nlohmann::json::parse(e.out);
}

TEST_F(CliRun, GenerateGreedyEqualsTorchTokenForToken) {
  const auto expected = nlohmann::json::parse(slurp(VKATTN_SOURCE_DIR "/models/tiny_char/expected.json"));
  const std::string prompt = expected["prompt"], n = std::to_string(expected["new_tokens"].get<int>());
  const size_t elements = 2 * 2 * 4 * (prompt.size() + expected["new_tokens"].get<size_t>()) * 16;  // 2·layers·H·C·d
  for (const char* backend : {"gpu", "cpu"}) {
    // no cache, a float32 one, and 16-bit ones (their rounding changes no greedy choice here)
    for (const char* cache : {"none", "F32", "F16", "BF16"}) {
      if (cache == std::string("none") && std::string(backend) == "cpu") continue;  // slow and no news
      std::vector<std::string> args{"generate", "--weights", kTinyModel, "--prompt", prompt, "--max-new-tokens", n,
                                    "--backend", backend, "--json"};
      if (cache == std::string("none")) {
        args.push_back("--no-cache");
      } else {
        args.insert(args.end(), {"--cache-dtype", cache});
      }
      auto out = generated(vkattn(args));
      EXPECT_EQ(out["tokens"], expected["tokens"]) << backend << ", cache " << cache;
      EXPECT_EQ(out["text"], expected["text"]);
      const std::map<std::string, std::pair<std::string, size_t>> stored = {
          {"none", {"none", 0}}, {"F32", {"float32", 4}}, {"F16", {"float16", 2}}, {"BF16", {"bfloat16", 2}}};
      EXPECT_EQ(out["cache_dtype"], stored.at(cache).first);
      EXPECT_EQ(out["cache_bytes"], elements * stored.at(cache).second);
    }
  }
}

// models/tiny_gpt2 and tiny_llama, folders as the hub lays out GPT-2 and Llama: torch's tokens,
// through vkattn's tokenizers (vocab.json + merges.txt, tokenizer.json)
TEST_F(CliRun, GenerateFromAHubFolderEqualsTorchTokenForToken) {
  for (const char* name : {"tiny_gpt2", "tiny_llama"}) {
    const std::string model = VKATTN_SOURCE_DIR "/models/" + std::string(name);
    const auto expected = nlohmann::json::parse(slurp(model + "/expected.json"));
    const std::string prompt = expected["prompt"], n = std::to_string(expected["new_tokens"].get<int>());
    for (const char* backend : {"gpu", "cpu"}) {
      auto out = generated(vkattn({"generate", "--model", model, "--prompt", prompt, "--max-new-tokens", n,
                                   "--backend", backend, "--json"}));
      EXPECT_EQ(out["prompt_tokens"], expected["prompt_ids"].size());
      EXPECT_EQ(out["tokens"], expected["tokens"]) << name << " on " << backend;
      EXPECT_EQ(out["text"], expected["text"]);
      EXPECT_EQ(out["stopped_at_end_of_text"], false);
      // the prompt's pass timed twice: the first makes pipelines, the second is warm
      EXPECT_GT(out["prompt_ms"].get<double>(), 0.0);
      EXPECT_GT(out["warm_prompt_ms"].get<double>(), 0.0);
    }
  }
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_gpt2";
  const std::string prompt = "Alice was beginning";
  const Exit text = vkattn({"generate", "--model", model, "--prompt", prompt, "--max-new-tokens", "3"});
  EXPECT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("GPT2LMHeadModel: 0.14 M parameters, 551.2 KiB as F32 in the files"), std::string::npos) << text.out;
  // 16-bit in the files and its matrices 16-bit on the device (the reference's all float32): said
  for (const char* backend : {"gpu", "cpu"}) {
    const Exit llama = vkattn({"generate", "--model", VKATTN_SOURCE_DIR "/models/tiny_llama", "--prompt", prompt,
                               "--max-new-tokens", "3", "--backend", backend});
    EXPECT_NE(llama.out.find("LlamaForCausalLM: 0.16 M parameters, 305.9 KiB as BF16 in the files\n" +
                             std::string(backend == std::string("gpu")
                                             ? "  306.5 KiB kept on the device (its matrices kept 16-bit, the rest "
                                               "float32; 611.8 KiB as float32)"
                                             : "  611.8 KiB kept on the device (float32)")),
              std::string::npos)
        << llama.out;
  }
  // an F32 checkpoint rounded to bfloat16 or float16 as it is read: its matrices kept 16-bit on the GPU
  for (const char* dtype : {"BF16", "F16"}) {
    const Exit rounded =
        vkattn({"generate", "--model", model, "--prompt", prompt, "--max-new-tokens", "3", "--weights-dtype", dtype});
    EXPECT_EQ(rounded.code, 0) << rounded.err;
    EXPECT_NE(rounded.out.find("GPT2LMHeadModel: 0.14 M parameters, 551.2 KiB as F32 in the files\n"
                               "  263.1 KiB kept on the device (its matrices kept 16-bit, the rest float32"),
              std::string::npos)
        << dtype << ": " << rounded.out;
  }
}

// `vkattn run --model`: every step of GPT-2 traced, both backends agreeing, torch's logits out
TEST_F(CliRun, RunAHubFolderOnATextTracesEveryStepOfTheModel) {
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_gpt2";
  const auto expected = nlohmann::json::parse(slurp(model + "/expected.json"));
  Exit e = vkattn({"run", "--model", model, "--text", expected["prompt"], "--side-by-side", "--trace", path("dump"),
                   "--out", path("logits.npy")});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("every step agrees"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("GPT2LMHeadModel: the text's 7 tokens through\n  vocab 513, 128 positions, 2 × "
                       "TransformerEncoderLayer(d_model=64"),
            std::string::npos) << e.out;
  std::ifstream in(dir_ / "dump" / "gpu" / "trace.json");
  const auto trace = nlohmann::json::parse(in);
  EXPECT_EQ(trace.at("config").at("module"), "GPT2LMHeadModel");
  EXPECT_EQ(trace.at("config").at("ids"), expected["prompt_ids"]);
  std::vector<std::string> names;
  for (const auto& step : trace.at("steps")) names.push_back(step.at("name"));
  // embeddings, 2 pre-norm layers of 16 steps, the final norm and the head
  ASSERT_EQ(names.size(), 2u + 2u * 16u + 2u);
  EXPECT_EQ(names.front(), "token_embedding");
  EXPECT_EQ(names[2 + 13], "layers.0.gelu_tanh");  // after the two embeddings, the layer's 14th step
  EXPECT_EQ(names.back(), "lm_head");
  const Tensor logits = io::read_npy(path("logits.npy"));  // (1, T, V)
  ASSERT_EQ(logits.shape, (Shape{1, 7, 513}));
  const auto torch_last = expected["last_logits"].get<std::vector<float>>();
  const std::vector<float> last(logits.data.end() - 513, logits.data.end());
  EXPECT_TRUE(testing::all_close(Tensor({513}, last), Tensor({513}, torch_last), {.atol = 1e-4f, .rtol = 0.0f}));
}

// `vkattn run --model … --weights-dtype BF16|F16`: the checkpoint's weights rounded as they are
// read, said so, in the trace, and the logits load_pretrained gives with them rounded alike
TEST_F(CliRun, RunAHubFolderWithItsWeightsRounded) {
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_gpt2";
  const std::string text = "Alice was beginning";
  auto logits_of = [&](Narrow narrow) {
    const io::Pretrained p = io::load_pretrained(model, {.weights_dtype = narrow});
    const std::vector<int64_t> ids = p.tokenizer->encode(text);
    ReferenceBackend cpu;
    return p.model->forward(cpu, Tensor({1, int64_t(ids.size())}, std::vector<float>(ids.begin(), ids.end()),
                                        DType::int64));
  };
  const Tensor stored = logits_of(Narrow::none);
  for (auto [dtype, narrow, name] : {std::tuple{"BF16", Narrow::bfloat16, "bfloat16"},
                                     std::tuple{"F16", Narrow::float16, "float16"}}) {
    const std::string out = path(std::string("logits_") + dtype + ".npy"), dump = path(std::string("dump_") + dtype);
    const Exit e = vkattn({"run", "--model", model, "--text", text, "--weights-dtype", dtype, "--backend", "cpu",
                           "--out", out, "--trace", dump});
    ASSERT_EQ(e.code, 0) << e.out << e.err;
    EXPECT_NE(e.out.find("pre-norm), lm_head tied to token_embedding\n  its weights rounded to " + std::string(name) +
                         " as they were read (--weights-dtype " + dtype + ")\n  from " + model + "\n"),
              std::string::npos)
        << e.out;
    EXPECT_EQ(nlohmann::json::parse(slurp(dump + "/trace.json")).at("config").at("weights_dtype"), dtype);
    const Tensor logits = io::read_npy(out), expected = logits_of(narrow);
    EXPECT_TRUE(testing::all_close(logits, expected, {.atol = 1e-5f, .rtol = 0.0f})) << dtype;
    EXPECT_FALSE(testing::all_close(logits, stored, {.atol = 1e-4f, .rtol = 0.0f})) << dtype << ": not rounded";
  }
}

// `vkattn run --model` on an encoder: BERT's hidden states out, its pooler in the trace
TEST_F(CliRun, RunABertFolderGivesItsLastHiddenState) {
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_bert";
  const auto expected = nlohmann::json::parse(slurp(model + "/expected.json"));
  Exit e = vkattn({"run", "--model", model, "--text", expected["texts"][1], "--side-by-side", "--trace", path("dump"),
                   "--out", path("hidden.npy")});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("every step agrees"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("BertForMaskedLM: the text's 10 tokens through\n  vocab 266, 64 positions, 2 token types"),
            std::string::npos) << e.out;
  const auto trace = nlohmann::json::parse(slurp((dir_ / "dump" / "gpu" / "trace.json").string()));
  EXPECT_EQ(trace.at("steps").back().at("name"), "pooler.tanh");
  // --attention unfused: each layer's scores and pattern are steps of the trace
  ASSERT_EQ(vkattn({"run", "--model", model, "--text", "Alice", "--attention", "unfused", "--trace", path("unfused")}).code, 0);
  const auto unfused = nlohmann::json::parse(slurp((dir_ / "unfused" / "trace.json").string()));
  std::vector<std::string> names;
  for (const auto& step : unfused.at("steps")) names.push_back(step.at("name"));
  EXPECT_NE(std::find(names.begin(), names.end(), "layers.1.self_attn.softmax"), names.end());
  // the second text's 10 tokens, unpadded: torch's rows for them (it was padded to 15 there)
  const Tensor hidden = io::read_npy(path("hidden.npy"));  // (1, T, E)
  ASSERT_EQ(hidden.shape, (Shape{1, 10, 64}));
  const auto rows = expected["batch"]["last_hidden_state"].get<std::vector<float>>();
  const std::vector<float> torch_rows(rows.begin() + 15 * 64, rows.begin() + 15 * 64 + 10 * 64);
  EXPECT_TRUE(testing::all_close(hidden, Tensor({1, 10, 64}, torch_rows), {.atol = 1e-4f, .rtol = 0.0f}));
}

// A pair of sentences (--text-pair): joined as BERT's tokenizer joins them, token types and all,
// they give torch's hidden states for the same pair (tiny_bert's expected.json).
TEST_F(CliRun, RunABertFolderOnAPairOfTextsGivesTorchsHiddenStates) {
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_bert";
  const auto expected = nlohmann::json::parse(slurp(model + "/expected.json"));
  Exit e = vkattn({"run", "--model", model, "--text", expected["pair"][0], "--text-pair", expected["pair"][1], "--out",
                   path("hidden.npy"), "--trace", path("dump")});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("BertForMaskedLM: the pair's 23 tokens through"), std::string::npos) << e.out;
  const auto& pair = expected["pair_case"];
  const Tensor hidden = io::read_npy(path("hidden.npy"));
  ASSERT_EQ(hidden.shape, (Shape{1, 23, 64}));
  EXPECT_TRUE(testing::all_close(hidden, Tensor({1, 23, 64}, pair["last_hidden_state"].get<std::vector<float>>()),
                                 {.atol = 1e-4f, .rtol = 0.0f}));
  const auto trace = nlohmann::json::parse(slurp((dir_ / "dump" / "trace.json").string()));
  EXPECT_EQ(trace.at("config").at("text_pair"), expected["pair"][1]);
  EXPECT_EQ(trace.at("config").at("ids"), pair["ids"][0]);
}

// A masked LM's folder on a text with [MASK]s: `vkattn run --model` writes the logits (1, T, V)
// and says, at each mask, the likeliest tokens by the softmax of its row, as fill-mask's pipeline.
TEST_F(CliRun, RunAMaskedLMOnAMaskedTextSaysTheLikeliestTokensAtEachMask) {
  const std::string model = VKATTN_SOURCE_DIR "/models/tiny_bert";
  const std::string text = "Alice was [MASK] of sitting by her [MASK].";
  Exit e = vkattn({"run", "--model", model, "--text", text, "--top-k", "3", "--out", path("logits.npy")});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const io::Pretrained p = io::load_pretrained(model);
  const std::vector<int64_t> ids = p.tokenizer->encode(text);
  const int64_t T = int64_t(ids.size()), V = p.encoder->vocab_size();
  ReferenceBackend cpu;
  const Tensor logits = p.encoder->masked_lm(cpu, Tensor({1, T}, std::vector<float>(ids.begin(), ids.end()), DType::int64));
  EXPECT_TRUE(testing::all_close(io::read_npy(path("logits.npy")), logits, {.atol = 1e-4f, .rtol = 0.0f}));
  const int64_t mask = p.tokenizer->token_id("[MASK]");
  std::vector<int64_t> masked;
  for (int64_t t = 0; t < T; ++t) {
    if (ids[size_t(t)] == mask) masked.push_back(t);
  }
  ASSERT_EQ(masked.size(), 2u);
  size_t at = 0;
  for (size_t m = 0; m < masked.size(); ++m) {  // each mask's header, then its 3 likeliest, in order
    const std::string header = "the 3 likeliest tokens at [MASK] " + std::to_string(m + 1) + " of 2, token " +
                               std::to_string(masked[m] + 1) + " of " + std::to_string(T) + " (softmax of its " +
                               std::to_string(V) + " logits):\n";
    at = e.out.find(header, at);
    ASSERT_NE(at, std::string::npos) << header << e.out;
    std::vector<double> q(static_cast<size_t>(V));
    const float* row = logits.data.data() + masked[m] * V;
    const double top = *std::max_element(row, row + V);
    for (int64_t v = 0; v < V; ++v) q[size_t(v)] = std::exp(double(row[v]) - top);
    const double sum = std::accumulate(q.begin(), q.end(), 0.0);
    std::vector<int64_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return q[size_t(a)] > q[size_t(b)]; });
    std::istringstream lines(e.out.substr(at + header.size()));
    for (size_t k = 0; k < 3; ++k) {
      std::string line;
      ASSERT_TRUE(std::getline(lines, line)) << e.out;
      const int64_t id = order[k];
      char probability[32];
      std::snprintf(probability, sizeof probability, "%.3f", q[size_t(id)] / sum);
      const std::string token = nlohmann::json(p.tokenizer->decode(std::span(&id, 1))).dump();
      EXPECT_EQ(line.rfind("  " + token + " ", 0), 0u) << "fill " << k << " of mask " << m << ": " << line;
      EXPECT_EQ(line.substr(line.size() - 5), probability) << line;
    }
  }
  // a text without a mask still gives the last hidden state
  e = vkattn({"run", "--model", model, "--text", "Alice was tired."});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("last hidden state (B, T, E)"), std::string::npos) << e.out;
  EXPECT_EQ(e.out.find("likeliest tokens"), std::string::npos) << e.out;
}

// A classifier's folder (tiny_bert's encoder with a classifier of its architecture's kind):
// `vkattn run --model` says what its logits mean label by label, as the library's classify()
// gives them on the reference: a sequence's labels by probability, each token's likeliest.
TEST_F(CliRun, RunAClassifierFolderSaysItsLabels) {
  const fs::path tiny = VKATTN_SOURCE_DIR "/models/tiny_bert";
  const std::string text = "Alice was tired.";
  auto folder = [&](const std::string& name, const std::string& architecture, const nlohmann::json& labels) {
    const fs::path dir = testing::copy_of(tiny, "cli_" + name);
    std::map<std::string, Tensor> tensors = io::read_safetensors(tiny / "model.safetensors").tensors;
    const auto L = static_cast<int64_t>(labels.size());
    Tensor weight({L, 64}), bias({L});
    for (size_t i = 0; i < weight.data.size(); ++i) weight.data[i] = 0.3f * std::sin(0.37f * float(i));
    for (size_t i = 0; i < bias.data.size(); ++i) bias.data[i] = 0.1f * float(i);
    tensors["classifier.weight"] = weight;
    tensors["classifier.bias"] = bias;
    testing::write_safetensors(dir / "model.safetensors", tensors);
    testing::rewrite_config(dir, [&](nlohmann::json& c) {
      c["architectures"] = {architecture};
      c["id2label"] = labels;
    });
    return dir;
  };
  // softmax of logits[row·n …], and a probability as printed
  auto softmax = [](const Tensor& logits, size_t row, size_t n) {
    std::vector<double> p(n);
    double sum = 0;
    for (size_t i = 0; i < n; ++i) sum += p[i] = std::exp(double(logits.data[row * n + i]));
    for (double& v : p) v /= sum;
    return p;
  };
  auto printed = [](double v) {
    char digits[32];
    std::snprintf(digits, sizeof digits, "%.3f", v);
    return std::string(digits);
  };
  // the line of `out` that starts with label `name` (padded to the longest, then its numbers)
  auto line_of = [](const std::string& out, const std::string& name) {
    const size_t at = out.find("\n  " + name + " ");
    return at == std::string::npos ? std::string() : out.substr(at + 1, out.find('\n', at + 1) - at - 1);
  };
  auto classify = [&](const fs::path& dir) {
    const io::Pretrained p = io::load_pretrained(dir);
    const std::vector<int64_t> ids = p.tokenizer->encode(text);
    ReferenceBackend cpu;
    return p.encoder->classify(
        cpu, Tensor({1, int64_t(ids.size())}, std::vector<float>(ids.begin(), ids.end()), DType::int64));
  };

  const std::vector<std::string> moods{"sad", "calm", "glad"};
  const fs::path sequence =
      folder("moods", "BertForSequenceClassification", {{"0", "sad"}, {"1", "calm"}, {"2", "glad"}});
  Exit e = vkattn({"run", "--model", sequence.string(), "--text", text});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("logits (B, num_labels) (1, 3)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("the labels' probabilities (softmax of the logits):\n"), std::string::npos) << e.out;
  const std::vector<double> p = softmax(classify(sequence), 0, 3);
  std::vector<size_t> likeliest{0, 1, 2};
  std::sort(likeliest.begin(), likeliest.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  size_t previous = 0;
  for (size_t i : likeliest) {  // each with its probability, the likeliest first
    const size_t at = e.out.find("\n  " + moods[i] + " ");
    EXPECT_NE(line_of(e.out, moods[i]).find(" " + printed(p[i]) + "   (logit "), std::string::npos) << e.out;
    EXPECT_GT(at, previous) << moods[i] << " is out of order:\n" << e.out;
    previous = at;
  }

  // multi-label: each label's sigmoid; one label: a regression's value
  const Tensor sequence_logits = classify(sequence);
  testing::rewrite_config(sequence, [](nlohmann::json& c) { c["problem_type"] = "multi_label_classification"; });
  e = vkattn({"run", "--model", sequence.string(), "--text", text});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("each label's probability (sigmoid of its logit):\n"), std::string::npos) << e.out;
  for (size_t i : {0, 1, 2}) {
    const std::string sigmoid = printed(1.0 / (1.0 + std::exp(-double(sequence_logits.data[i]))));
    EXPECT_NE(line_of(e.out, moods[i]).find(" " + sigmoid + "   (logit "), std::string::npos) << sigmoid << e.out;
  }
  const fs::path regression = folder("regression", "BertForSequenceClassification", {{"0", "LABEL_0"}});
  e = vkattn({"run", "--model", regression.string(), "--text", text});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  char value[32];
  std::snprintf(value, sizeof value, "%.4f", classify(regression).data[0]);
  EXPECT_NE(e.out.find(std::string("the regression's value: ") + value + "\n"), std::string::npos) << e.out;

  const std::vector<std::string> tags{"O", "B-PER", "I-PER"};
  const fs::path tokens = folder("tags", "BertForTokenClassification", {{"0", "O"}, {"1", "B-PER"}, {"2", "I-PER"}});
  e = vkattn({"run", "--model", tokens.string(), "--text", text});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const Tensor logits = classify(tokens);  // (1, T, 3)
  ASSERT_EQ(logits.rank(), 3u);
  const std::string header = "each token's likeliest label (softmax of its 3 logits):\n";
  const size_t start = e.out.find(header);
  ASSERT_NE(start, std::string::npos) << e.out;
  std::istringstream lines(e.out.substr(start + header.size()));
  for (size_t t = 0; t < size_t(logits.dim(1)); ++t) {
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << e.out;
    const std::vector<double> q = softmax(logits, t, 3);
    const size_t best = size_t(std::max_element(q.begin(), q.end()) - q.begin());
    EXPECT_EQ(line.rfind("  \"", 0), 0u) << line;  // the token, quoted
    EXPECT_NE(line.find("  " + tags[best] + " "), std::string::npos) << "token " << t << ": " << line;
    EXPECT_EQ(line.substr(line.size() - 5), printed(q[best])) << line;
  }
}

// A question answerer's folder (tiny_bert's encoder with a qa_outputs): `vkattn run --model` on a
// question (--text) and its context (--text-pair) says its answers, each the bytes of the context
// and the tokens io::answers gives them on the reference, with their scores.
TEST_F(CliRun, RunAQuestionAnswererSaysItsAnswers) {
  const fs::path qa = dir_ / "qa";
  write_question_answerer(qa);
  const std::string question = "Who was tired?", context = "Alice was tired of sitting by her sister, and of reading.";
  const io::Pretrained p = io::load_pretrained(qa);
  const text::EncodedPair pair = p.tokenizer->encode_pair(question, context);
  const auto T = int64_t(pair.ids.size());
  ReferenceBackend cpu;
  const Tensor logits = p.encoder->classify(
      cpu, Tensor({1, T}, std::vector<float>(pair.ids.begin(), pair.ids.end()), DType::int64),
      Tensor({1, T}, std::vector<float>(pair.type_ids.begin(), pair.type_ids.end()), DType::int64));
  // each answer's line: its text quoted, its score, its bytes and tokens
  auto line = [](const io::Answer& a) {
    char score[32];
    std::snprintf(score, sizeof score, "%.3f", a.score);
    return nlohmann::json(a.text).dump() + "  " + score + "   (bytes " + std::to_string(a.begin) + "-" +
           std::to_string(a.end) + " of the context, tokens " + std::to_string(a.first_token) + "-" +
           std::to_string(a.last_token) + ")";
  };
  auto lines_after = [](const std::string& out, const std::string& header) {
    std::vector<std::string> lines;
    const size_t at = out.find(header);
    if (at == std::string::npos) return lines;
    std::istringstream rest(out.substr(at + header.size()));
    for (std::string l; std::getline(rest, l) && l.starts_with("  ");) lines.push_back(l.substr(2));
    return lines;
  };
  Exit e = vkattn({"run", "--model", qa.string(), "--text", question, "--text-pair", context, "--top-k", "4"});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  EXPECT_NE(e.out.find("start and end logits (B, T, 2) (1, " + std::to_string(T) + ", 2)"), std::string::npos) << e.out;
  const std::vector<io::Answer> four = io::answers({pair}, context, logits, {.top_k = 4});
  ASSERT_GE(four.size(), 2u);
  const std::string header = "the " + std::to_string(four.size()) +
                             " likeliest answers in --text-pair (score: P(start) · P(end), softmaxes over the context):\n";
  std::vector<std::string> expected;
  size_t width = 0;
  for (const auto& a : four) width = std::max(width, nlohmann::json(a.text).dump().size());
  for (const auto& a : four) {  // the texts padded to the longest
    const std::string text = nlohmann::json(a.text).dump();
    expected.push_back(text + std::string(width - text.size(), ' ') + line(a).substr(text.size()));
  }
  EXPECT_EQ(lines_after(e.out, header), expected) << e.out;

  // by default the likeliest alone; --max-answer-len 1: an answer of one token
  e = vkattn({"run", "--model", qa.string(), "--text", question, "--text-pair", context});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const std::string one = "the likeliest answer in --text-pair (score: P(start) · P(end), softmaxes over the context):\n";
  EXPECT_EQ(lines_after(e.out, one), std::vector<std::string>{line(four[0])}) << e.out;
  e = vkattn({"run", "--model", qa.string(), "--text", question, "--text-pair", context, "--max-answer-len", "1"});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const io::Answer short_one = io::answers({pair}, context, logits, {.max_answer_len = 1})[0];
  EXPECT_EQ(short_one.first_token, short_one.last_token);
  EXPECT_EQ(lines_after(e.out, one), std::vector<std::string>{line(short_one)}) << e.out;

  // a context past --max-seq-len: read in windows, one batch; each answer says its window
  const io::AnswerOptions windowed{.top_k = 3, .max_seq_len = 16, .doc_stride = 3};
  const io::QuestionInputs in = io::question_inputs(*p.tokenizer, question, context, windowed, p.encoder->max_tokens());
  ASSERT_EQ(in.windows.size(), 3u);
  const std::vector<io::Answer> three =
      io::answers(in.windows, context, p.encoder->classify(cpu, in.ids, in.type_ids, in.key_padding_mask), windowed);
  ASSERT_EQ(three.size(), 3u);
  e = vkattn({"run", "--model", qa.string(), "--text", question, "--text-pair", context, "--top-k", "3",
              "--max-seq-len", "16", "--doc-stride", "3"});
  ASSERT_EQ(e.code, 0) << e.out << e.err;
  const std::string header3 = "the 3 likeliest answers in --text-pair (score: P(start) · P(end), softmaxes over the "
                              "context):\n  (the context read in 3 windows that overlap, --max-seq-len and --doc-stride;\n"
                              "   a text found in two is one answer, its scores summed)\n";
  std::vector<std::string> in_windows;
  width = 0;
  for (const auto& a : three) width = std::max(width, nlohmann::json(a.text).dump().size());
  for (const auto& a : three) {
    const std::string text = nlohmann::json(a.text).dump(), rest = line(a).substr(text.size());
    in_windows.push_back(text + std::string(width - text.size(), ' ') + rest.substr(0, rest.size() - 1) +
                         " of window " + std::to_string(a.window + 1) + " of 3)");
  }
  EXPECT_EQ(lines_after(e.out, header3), in_windows) << e.out;
  e = vkattn({"run", "--model", qa.string(), "--text", question, "--text-pair", context, "--max-seq-len", "6"});
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(e.err.find("the context's windows: the first text and the template take 9 tokens, which leaves no room"), std::string::npos)
      << e.err;
}

TEST_F(CliRun, GenerateSamplesTheSameTextFromTheSameSeed) {
  auto sample = [&](const char* seed) {
    return generated(vkattn({"generate", "--weights", kTinyModel, "--prompt", "Down", "--max-new-tokens", "60",
                             "--temperature", "1.5", "--top-k", "10", "--seed", seed, "--json"}))["tokens"];
  };
  const auto first = sample("1");
  EXPECT_EQ(sample("1"), first);
  EXPECT_NE(sample("2"), first);
  // top-k 1 is greedy, whatever the temperature
  auto greedy = generated(vkattn({"generate", "--weights", kTinyModel, "--prompt", "Down", "--max-new-tokens", "60", "--json"}));
  auto top1 = generated(vkattn({"generate", "--weights", kTinyModel, "--prompt", "Down", "--max-new-tokens", "60",
                                "--temperature", "5", "--top-k", "1", "--seed", "3", "--json"}));
  EXPECT_EQ(top1["tokens"], greedy["tokens"]);
}

}  // namespace
}  // namespace vkattn
