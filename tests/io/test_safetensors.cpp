// The safetensors reader: every supported dtype, __metadata__, and a FileError naming the file
// and the tensor for every header that lies about the data.
#include <gtest/gtest.h>


#include "tests/support/bytes.h"
#include "tests/support/expect_error.h"
#include "vkattn/errors.h"
#include "vkattn/io/safetensors.h"

namespace vkattn {
namespace {

using testing::expect_error;
using testing::raw;

// [8-byte little-endian header length][header][data], as the format lays it out.
std::vector<std::byte> safetensors(const std::string& header, const std::string& data) {
  uint64_t n = header.size();
  return testing::bytes_of(std::string(reinterpret_cast<const char*>(&n), 8) + header + data);
}

TEST(Safetensors, ReadsEveryDtypeAndTheMetadata) {
  std::string header = R"({"__metadata__": {"num_heads": "4", "format": "pt"},
    "a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
    "b": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
    "c": {"dtype": "BF16", "shape": [2], "data_offsets": [22, 26]},
    "d": {"dtype": "F64", "shape": [1], "data_offsets": [26, 34]},
    "e": {"dtype": "BOOL", "shape": [1, 2], "data_offsets": [34, 36]},
    "f": {"dtype": "F32", "shape": [0, 5], "data_offsets": [36, 36]}})";
  std::string data = raw<float>({1, 2, 3, 4}) + raw<uint16_t>({0x3C00, 0xB800, 0x7BFF}) +
                     raw<uint16_t>({0x3F80, 0xC0A0}) + raw<double>({0.125}) + std::string("\x01\x00", 2);
  auto file = io::parse_safetensors(safetensors(header, data), "w.safetensors");
  EXPECT_EQ(file.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"num_heads", "4"}}));
  EXPECT_EQ(file.stored_dtypes, (std::map<std::string, std::string>{
                                    {"a", "F32"}, {"b", "F16"}, {"c", "BF16"}, {"d", "F64"}, {"e", "BOOL"}, {"f", "F32"}}));
  ASSERT_EQ(file.tensors.size(), 6u);
  EXPECT_EQ(file.tensors["a"].shape, (Shape{2, 2}));
  EXPECT_EQ(file.tensors["a"].data, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(file.tensors["b"].data, (std::vector<float>{1.0f, -0.5f, 65504.0f}));
  EXPECT_EQ(file.tensors["c"].data, (std::vector<float>{1.0f, -5.0f}));  // bfloat16 0x3F80 = 1, 0xC0A0 = -5
  EXPECT_EQ(file.tensors["d"].data, (std::vector<float>{0.125f}));
  EXPECT_EQ(file.tensors["e"].dtype, DType::boolean);
  EXPECT_EQ(file.tensors["e"].data, (std::vector<float>{1, 0}));
  EXPECT_EQ(file.tensors["f"].shape, (Shape{0, 5}));
}

TEST(Safetensors, ReadsAFileWithNoTensors) {
  auto file = io::parse_safetensors(safetensors("{}", ""), "empty.safetensors");
  EXPECT_TRUE(file.tensors.empty());
  EXPECT_TRUE(file.metadata.empty());
}

TEST(Safetensors, TensorsMayBeStoredInAnyOrder) {
  std::string header = R"({"late": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                           "early": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  auto file = io::parse_safetensors(safetensors(header, raw<float>({1, 2})), "w.safetensors");
  EXPECT_EQ(file.tensors["early"].data, std::vector<float>{1});
  EXPECT_EQ(file.tensors["late"].data, std::vector<float>{2});
}

struct BadFile {
  const char* name;
  std::vector<std::byte> bytes;
  const char* message;
};
void PrintTo(const BadFile& bad, std::ostream* os) { *os << bad.name; }

class SafetensorsErrors : public ::testing::TestWithParam<BadFile> {};

TEST_P(SafetensorsErrors, NameTheFileTheTensorAndTheProblem) {
  const auto& bad = GetParam();
  expect_error<FileError>([&] { io::parse_safetensors(bad.bytes, "w.safetensors"); }, {"w.safetensors: ", bad.message});
}

std::string one(const std::string& fields) { return R"({"t": {)" + fields + "}}"; }
const std::string kFloats = raw<float>({1, 2});

INSTANTIATE_TEST_SUITE_P(
    Safetensors, SafetensorsErrors,
    ::testing::Values(
        BadFile{"too_short", std::vector<std::byte>(5), "too short for a safetensors file (5 bytes"},
        BadFile{"header_past_end",
                [] {
                  auto b = safetensors("{}", "");
                  b[0] = std::byte{200};
                  return b;
                }(),
                "header length 200 runs past the end of the 10-byte file"},
        BadFile{"not_json", safetensors("{\"t\": [1, 2", ""), "the header is not valid JSON"},
        // found by fuzz_safetensors: nlohmann throws out_of_range, not parse_error, for this
        BadFile{"number_overflow", safetensors(R"({"t": 1e999})", ""),
                "the header is not valid JSON: number overflow parsing '1e999'"},
        BadFile{"not_an_object", safetensors("[1, 2]", ""), "the header is not a JSON object"},
        BadFile{"metadata_not_object", safetensors(R"({"__metadata__": 3})", ""), "__metadata__ is not an object"},
        BadFile{"metadata_not_string", safetensors(R"({"__metadata__": {"num_heads": 4}})", ""),
                "__metadata__ value 'num_heads' is not a string"},
        BadFile{"entry_not_object", safetensors(R"({"t": 5})", ""), "tensor 't': its entry is not an object"},
        BadFile{"no_dtype", safetensors(one(R"("shape": [2], "data_offsets": [0, 8])"), kFloats), "tensor 't': no dtype"},
        BadFile{"no_shape", safetensors(one(R"("dtype": "F32", "data_offsets": [0, 8])"), kFloats), "tensor 't': no shape"},
        BadFile{"no_offsets", safetensors(one(R"("dtype": "F32", "shape": [2])"), kFloats), "tensor 't': no data_offsets"},
        BadFile{"unexpected_field", safetensors(one(R"("dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1)"), kFloats),
                "tensor 't': unexpected field 'x'"},
        BadFile{"int64", safetensors(one(R"("dtype": "I64", "shape": [1], "data_offsets": [0, 8])"), kFloats),
                "tensor 't': dtype I64 is not supported"},
        BadFile{"negative_dim", safetensors(one(R"("dtype": "F32", "shape": [-2], "data_offsets": [0, 8])"), kFloats),
                "tensor 't': its shape holds something other than a non-negative integer"},
        BadFile{"huge_shape", safetensors(one(R"("dtype": "F32", "shape": [1099511627776, 1099511627776], "data_offsets": [0, 8])"), kFloats),
                "tensor 't': its shape is too large"},
        BadFile{"negative_offset", safetensors(one(R"("dtype": "F32", "shape": [2], "data_offsets": [-1, 8])"), kFloats),
                "its data_offsets are not non-negative integers"},
        BadFile{"offsets_reversed", safetensors(one(R"("dtype": "F32", "shape": [0], "data_offsets": [8, 0])"), kFloats),
                "data_offsets [8, 0] end before they begin"},
        BadFile{"offsets_past_end", safetensors(one(R"("dtype": "F32", "shape": [4], "data_offsets": [0, 16])"), kFloats),
                "tensor 't': data_offsets [0, 16] lie past the end of the 8-byte data buffer"},
        BadFile{"size_mismatch", safetensors(one(R"("dtype": "F32", "shape": [3], "data_offsets": [0, 8])"), kFloats),
                "tensor 't': data_offsets [0, 8] hold 8 bytes but shape (3,) of F32 needs 12"},
        BadFile{"overlap",
                safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                            kFloats),
                "tensors 'a' and 'b' overlap"},
        BadFile{"gap",
                safetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})", kFloats),
                "bytes 0..4 of the data buffer belong to no tensor (before 'a')"},
        BadFile{"trailing",
                safetensors(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", kFloats),
                "4 bytes at the end of the data buffer belong to no tensor"},
        BadFile{"bool_not_0_or_1", safetensors(one(R"("dtype": "BOOL", "shape": [2], "data_offsets": [0, 2])"), "\x01\x05"),
                "w.safetensors: tensor 't': bool element 1 holds 5"}),
    [](const auto& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace vkattn
