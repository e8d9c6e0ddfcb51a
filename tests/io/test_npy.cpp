// The .npy reader and writer: round trips, every header version, dtype conversion, and a clear
// FileError naming the source for every malformed file.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/io/file.h"
#include "tests/support/bytes.h"
#include "tests/support/expect_error.h"
#include "tests/support/gpu.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"

namespace vkattn {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::bytes_of;
using testing::raw;

// An .npy file built by hand: magic, version major.0, the header length field, the header (the
// dict as given, padded to 64 bytes with '\n' last unless `newline` is false), then `data`.
std::vector<std::byte> npy(const std::string& dict, const std::string& data, int major = 1, bool newline = true) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string header = dict;
  if (newline) {
    header.append((64 - (prefix + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
  }
  std::string file = "\x93NUMPY";
  file += static_cast<char>(major);
  file += '\0';
  for (size_t i = 0; i < prefix - 8; ++i) file += static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes_of(file + header + data);
}

const std::string kF32Dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";

TEST(Npy, RoundTripsFloat32) {
  Tensor t = testing::random_tensor({2, 3, 5}, 7);
  auto bytes = io::encode_npy(t);
  // NumPy's layout: the data starts 64-byte aligned after a '\n'-terminated version-1.0 header.
  ASSERT_EQ(std::to_integer<int>(bytes[6]), 1);
  size_t header_length = std::to_integer<size_t>(bytes[8]) | std::to_integer<size_t>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_length) % 64, 0u);
  EXPECT_EQ(static_cast<char>(bytes[10 + header_length - 1]), '\n');
  Tensor back = io::parse_npy(bytes, "t.npy");
  EXPECT_EQ(back.shape, t.shape);
  EXPECT_EQ(back.dtype, DType::float32);
  EXPECT_EQ(back.data, t.data);
}

TEST(Npy, RoundTripsBool) {
  Tensor mask({3, 4}, {1, 0, 0, 1, 0, 0, 0, 0, 1, 1, 1, 1}, DType::boolean);
  Tensor back = io::parse_npy(io::encode_npy(mask), "m.npy");
  EXPECT_EQ(back.dtype, DType::boolean);
  EXPECT_EQ(back.shape, mask.shape);
  EXPECT_EQ(back.data, mask.data);
}

TEST(Npy, RoundTripsScalarVectorAndEmptyShapes) {
  for (Shape shape : {Shape{}, Shape{1}, Shape{7}, Shape{0, 3}, Shape{2, 0}}) {
    Tensor t = testing::random_tensor(shape, 3);
    Tensor back = io::parse_npy(io::encode_npy(t), "t.npy");
    EXPECT_EQ(back.shape, shape) << shape_string(shape);
    EXPECT_EQ(back.data, t.data) << shape_string(shape);
  }
}

TEST(Npy, ReadsFormatVersions1To3) {
  for (int major : {1, 2, 3}) {
    Tensor t = io::parse_npy(npy(kF32Dict, raw<float>({1.5f, -2.0f, 0.25f, 8.0f}), major), "v.npy");
    EXPECT_EQ(t.shape, (Shape{2, 2})) << major;
    EXPECT_EQ(t.data, (std::vector<float>{1.5f, -2.0f, 0.25f, 8.0f})) << major;
  }
}

TEST(Npy, AcceptsEveryHeaderSpellingNumpyWrites) {
  // Double quotes, other key order, no trailing comma, 1-tuples, and extra spaces.
  for (std::string dict : {"{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (4,)}",
                           "{'shape': (4,), 'fortran_order': False, 'descr': '<f4'}",
                           "{ 'descr' : '<f4' , 'fortran_order' : False , 'shape' : ( 4 , ) , }"}) {
    Tensor t = io::parse_npy(npy(dict, raw<float>({1, 2, 3, 4})), "s.npy");
    EXPECT_EQ(t.shape, (Shape{4})) << dict;
    EXPECT_EQ(t.data, (std::vector<float>{1, 2, 3, 4})) << dict;
  }
}

TEST(Npy, ConvertsFloat16AndFloat64ToFloat32) {
  // float16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), +inf, 0.333251953125
  auto f16 = npy("{'descr': '<f2', 'fortran_order': False, 'shape': (6,), }",
                 raw<uint16_t>({0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7C00, 0x3555}));
  Tensor h = io::parse_npy(f16, "h.npy");
  EXPECT_EQ(h.dtype, DType::float32);
  EXPECT_EQ(h.data, (std::vector<float>{1.0f, -2.0f, 65504.0f, 5.9604644775390625e-8f, INFINITY, 0.333251953125f}));

  auto f64 = npy("{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", raw<double>({0.1, -1e10, 3.0}));
  Tensor d = io::parse_npy(f64, "d.npy");
  EXPECT_EQ(d.data, (std::vector<float>{0.1f, -1e10f, 3.0f}));
}

TEST(Npy, ReadsIntegersAsTokenIdsAndWritesThemBack) {
  auto i64 = npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 2), }", raw<int64_t>({0, 999, -3, 16777216}));
  Tensor t = io::parse_npy(i64, "ids.npy");
  EXPECT_EQ(t.dtype, DType::int64);
  EXPECT_EQ(t.data, (std::vector<float>{0.0f, 999.0f, -3.0f, 16777216.0f}));
  auto i32 = npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }", raw<int32_t>({7, -1, 42}));
  Tensor u = io::parse_npy(i32, "ids.npy");
  EXPECT_EQ(u.dtype, DType::int64);
  EXPECT_EQ(u.data, (std::vector<float>{7.0f, -1.0f, 42.0f}));
  // written as '<i8', read back the same
  Tensor back = io::parse_npy(io::encode_npy(t), "back.npy");
  EXPECT_EQ(back.dtype, DType::int64);
  EXPECT_EQ(back.data, t.data);
}

struct BadNpy {
  const char* name;
  std::vector<std::byte> bytes;
  const char* message;
};
void PrintTo(const BadNpy& bad, std::ostream* os) { *os << bad.name; }

class NpyErrors : public ::testing::TestWithParam<BadNpy> {};

TEST_P(NpyErrors, NameTheFileAndTheProblem) {
  const auto& bad = GetParam();
  expect_error<FileError>([&] { io::parse_npy(bad.bytes, "bad.npy"); }, {"bad.npy: ", bad.message});
}

std::string four_floats = raw<float>({1, 2, 3, 4});

INSTANTIATE_TEST_SUITE_P(
    Npy, NpyErrors,
    ::testing::Values(
        BadNpy{"empty", {}, "empty file"},
        BadNpy{"no_magic", bytes_of("PK\x03\x04 this is a zip"), "not an .npy file"},
        BadNpy{"version_4", npy(kF32Dict, four_floats, 4), "unsupported .npy format version 4.0"},
        BadNpy{"header_past_end", bytes_of(std::string("\x93NUMPY\x01\x00\xff\x7f{'descr'", 17)), "header length 32767 runs past the end"},
        BadNpy{"no_newline", npy(kF32Dict, four_floats, 1, false), "does not end with a newline"},
        BadNpy{"missing_shape", npy("{'descr': '<f4', 'fortran_order': False}", four_floats), "no 'shape' key"},
        BadNpy{"extra_key", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four_floats),
               "expected a string, True, False or a tuple"},
        BadNpy{"unknown_key", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 'y'}", four_floats),
               "unexpected key 'x'"},
        BadNpy{"duplicate_key", npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (4,)}", four_floats),
               "key 'descr' appears twice"},
        BadNpy{"shape_not_tuple", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4)}", four_floats),
               "the shape (4) is not a tuple"},
        BadNpy{"negative_dim", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-4,)}", four_floats),
               "expected a non-negative integer"},
        BadNpy{"descr_not_string", npy("{'descr': True, 'fortran_order': False, 'shape': (4,)}", four_floats),
               "'descr' is not a string"},
        BadNpy{"structured", npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,)}", four_floats),
               "structured (record) dtypes are not supported"},
        BadNpy{"text_after_dict", npy(kF32Dict + " junk", four_floats), "unexpected text after the closing '}'"},
        BadNpy{"unterminated", npy("{'descr: '<f4}", four_floats), "expected ':'"},
        BadNpy{"fortran_order", npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four_floats),
               "Fortran-order arrays are not supported"},
        BadNpy{"big_endian", npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", four_floats),
               "big-endian data ('>f4') is not supported"},
        BadNpy{"object", npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
               "object arrays are not supported"},
        BadNpy{"int16", npy("{'descr': '<i2', 'fortran_order': False, 'shape': (2,), }", std::string(4, '\0')),
               "dtype '<i2' is not supported"},
        BadNpy{"int64_beyond_float32", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", raw<int64_t>({1, 16777217})),
               "integer element 1 holds 16777217, beyond the ±2^24"},
        BadNpy{"truncated", npy(kF32Dict, four_floats.substr(0, 14)), "truncated: shape (2, 2) of float32 needs 16 data bytes but the file has 14"},
        BadNpy{"trailing_bytes", npy(kF32Dict, four_floats + "xy"), "2 unexpected bytes after the 16 data bytes"},
        BadNpy{"huge_shape", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000, 100000000000)}", four_floats),
               "is too large"},
        BadNpy{"huge_dim", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", four_floats),
               "a dimension is too large"},
        // found by fuzz_npy: the file's own text, quoted, broke the message over two lines
        BadNpy{"newline_in_descr", npy("{'descr': '<\n8', 'fortran_order': False, 'shape': (2,), }", std::string(16, '\0')),
               "dtype '<\\n8' is not supported"},
        BadNpy{"bool_not_0_or_1", npy("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x02\x00", 3)),
               "bool element 1 holds 2, not 0 or 1"}),
    [](const auto& p) { return std::string(p.param.name); });

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("vkattn_npy_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                        "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  size_t files_in_dir() const { return static_cast<size_t>(std::distance(fs::directory_iterator(dir_), {})); }
  fs::path dir_;
};

TEST_F(NpyFiles, WritesAndReadsAFile) {
  Tensor t = testing::random_tensor({3, 17}, 11);
  io::write_npy(dir_ / "t.npy", t);
  EXPECT_EQ(files_in_dir(), 1u) << "a temporary was left behind";
  EXPECT_EQ(io::read_npy(dir_ / "t.npy").data, t.data);
}

TEST_F(NpyFiles, MissingFileAndDirectoryAreNamed) {
  expect_error<FileError>([&] { io::read_npy(dir_ / "nope.npy"); }, {"nope.npy: no such file"});
  expect_error<FileError>([&] { io::read_npy(dir_); }, {"is a directory"});
}

TEST_F(NpyFiles, AFailedWriteLeavesNoFile) {
  expect_error<FileError>([&] { io::write_npy(dir_ / "missing" / "t.npy", Tensor({2})); },
                          {"t.npy: its directory does not exist"});
  expect_error<FileError>([&] { io::write_npy(dir_, Tensor({2})); }, {"is a directory, not a file"});
  EXPECT_EQ(files_in_dir(), 0u);
}

TEST_F(NpyFiles, AnUncommittedPendingFileLeavesNothing) {
  {
    io::PendingFile pending(dir_ / "t.npy", io::encode_npy(Tensor({4})));
    EXPECT_EQ(files_in_dir(), 1u);  // the temporary
    EXPECT_FALSE(fs::exists(dir_ / "t.npy"));
  }
  EXPECT_EQ(files_in_dir(), 0u);
}

}  // namespace
}  // namespace vkattn
