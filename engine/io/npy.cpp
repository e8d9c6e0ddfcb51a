#include "vkattn/io/npy.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <map>

#include "engine/io/element_types.h"
#include "engine/io/file.h"
#include "vkattn/errors.h"

namespace vkattn::io {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

// One value of the header's Python dict literal: a string, a bool, or a tuple of ints.
struct HeaderValue {
  enum class Kind { string, boolean, tuple } kind;
  std::string text;
  bool flag = false;
  std::vector<int64_t> items;
};

// Parses the header, e.g. "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }   \n",
// strictly: string keys, string / True / False / int-tuple values, nothing after the '}' but
// padding.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& source) : text_(text), source_(source) {}

  std::map<std::string, HeaderValue> parse() {
    std::map<std::string, HeaderValue> dict;
    skip_space();
    expect('{');
    while (true) {
      skip_space();
      if (peek() == '}') break;
      std::string key = parse_string();
      skip_space();
      expect(':');
      skip_space();
      HeaderValue value = parse_value();
      if (!dict.emplace(key, std::move(value)).second) fail("key '" + key + "' appears twice");
      skip_space();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') fail_here("',' or '}'");
    }
    ++pos_;
    skip_space();
    if (pos_ != text_.size()) fail("unexpected text after the closing '}'");
    return dict;
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\t')) ++pos_;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw FileError(source_ + ": malformed .npy header: " + what);
  }
  [[noreturn]] void fail_here(const std::string& wanted) const {
    std::string found = pos_ < text_.size() ? std::string("'") + text_[pos_] + "'" : std::string("the end");
    fail("expected " + wanted + " at offset " + std::to_string(pos_) + ", found " + found);
  }
  void expect(char c) {
    if (peek() != c) fail_here(std::string("'") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    char quote = peek();
    if (quote != '\'' && quote != '"') fail_here("a quoted string");
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) fail("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return s;
  }
  int64_t parse_int() {
    if (peek() < '0' || peek() > '9') fail_here("a non-negative integer");
    int64_t value = 0;
    while (peek() >= '0' && peek() <= '9') {
      int digit = peek() - '0';
      if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) fail("a dimension is too large");
      value = value * 10 + digit;
      ++pos_;
    }
    return value;
  }
  HeaderValue parse_value() {
    HeaderValue v;
    if (peek() == '\'' || peek() == '"') {
      v.kind = HeaderValue::Kind::string;
      v.text = parse_string();
    } else if (text_.substr(pos_, 4) == "True") {
      v.kind = HeaderValue::Kind::boolean;
      v.flag = true;
      pos_ += 4;
    } else if (text_.substr(pos_, 5) == "False") {
      v.kind = HeaderValue::Kind::boolean;
      pos_ += 5;
    } else if (peek() == '(') {
      // (), (3,), (2, 3) or (2, 3,)
      v.kind = HeaderValue::Kind::tuple;
      ++pos_;
      skip_space();
      bool trailing_comma = false;
      while (peek() != ')') {
        v.items.push_back(parse_int());
        skip_space();
        trailing_comma = peek() == ',';
        if (trailing_comma) {
          ++pos_;
          skip_space();
        } else if (peek() != ')') {
          fail_here("',' or ')' in the shape");
        }
      }
      // "(3)" is the int 3 in Python, not a tuple; numpy writes "(3,)".
      if (v.items.size() == 1 && !trailing_comma) fail("the shape (" + std::to_string(v.items[0]) + ") is not a tuple");
      ++pos_;
    } else if (peek() == '[') {
      fail("structured (record) dtypes are not supported");
    } else {
      fail_here("a string, True, False or a tuple");
    }
    return v;
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
};

uint32_t load_le(const std::byte* p, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= std::to_integer<uint32_t>(p[i]) << (8 * i);
  return v;
}

StoredType parse_descr(const std::string& descr, const std::string& source) {
  if (descr == "<f4") return StoredType::float32;
  if (descr == "<f2") return StoredType::float16;
  if (descr == "<f8") return StoredType::float64;
  if (descr == "|b1") return StoredType::boolean;
  if (descr == "<i4") return StoredType::int32;
  if (descr == "<i8") return StoredType::int64;
  if (!descr.empty() && descr[0] == '>') {
    throw FileError(source + ": big-endian data ('" + descr + "') is not supported; save arr.astype('<" +
                    descr.substr(1) + "')");
  }
  if (descr == "|O" || descr == "O" || descr == "<O") throw FileError(source + ": object arrays are not supported");
  throw FileError(source + ": dtype '" + descr + "' is not supported; vkattn reads float32 ('<f4'), float16 ('<f2'), "
                  "float64 ('<f8'), bool ('|b1') and int32 / int64 ('<i4', '<i8') token ids");
}

}  // namespace

Tensor parse_npy(std::span<const std::byte> bytes, const std::string& source) {
  auto fail = [&](const std::string& why) -> FileError { return FileError(source + ": " + why); };
  if (bytes.size() < kMagicSize + 2 || std::memcmp(bytes.data(), kMagic, kMagicSize) != 0) {
    throw fail(bytes.empty() ? "empty file, not an .npy array" : "not an .npy file (no \\x93NUMPY magic)");
  }
  unsigned major = std::to_integer<unsigned>(bytes[6]), minor = std::to_integer<unsigned>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    throw fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
               " (1.0, 2.0 and 3.0 are read)");
  }
  const size_t length_width = major == 1 ? 2 : 4;
  const size_t header_start = kMagicSize + 2 + length_width;
  if (bytes.size() < header_start) throw fail("truncated before the header length");
  const size_t header_length = load_le(bytes.data() + kMagicSize + 2, length_width);
  if (header_length > bytes.size() - header_start) {
    throw fail("header length " + std::to_string(header_length) + " runs past the end of the " +
               std::to_string(bytes.size()) + "-byte file");
  }
  std::string_view header(reinterpret_cast<const char*>(bytes.data()) + header_start, header_length);
  if (header.empty() || header.back() != '\n') throw fail("malformed .npy header: it does not end with a newline");

  auto dict = HeaderParser(header, source).parse();
  auto field = [&](const char* key, HeaderValue::Kind kind, const char* kind_name) -> const HeaderValue& {
    auto it = dict.find(key);
    if (it == dict.end()) throw fail(std::string("malformed .npy header: no '") + key + "' key");
    if (it->second.kind != kind) throw fail(std::string("malformed .npy header: '") + key + "' is not " + kind_name);
    return it->second;
  };
  const auto& descr = field("descr", HeaderValue::Kind::string, "a string");
  const auto& fortran = field("fortran_order", HeaderValue::Kind::boolean, "True or False");
  const auto& shape = field("shape", HeaderValue::Kind::tuple, "a tuple");
  for (const auto& [key, value] : dict) {
    if (key != "descr" && key != "fortran_order" && key != "shape") {
      throw fail("malformed .npy header: unexpected key '" + key + "'");
    }
  }
  StoredType type = parse_descr(descr.text, source);
  if (fortran.flag) throw fail("Fortran-order arrays are not supported; save np.ascontiguousarray(arr)");

  const size_t data_start = header_start + header_length;
  const size_t available = bytes.size() - data_start;
  const size_t width = stored_size(type);
  // Element count, overflow-checked; even an empty array's other dims must multiply out.
  constexpr size_t kMaxElements = size_t{1} << 56;
  size_t nonzero_product = 1;
  bool empty = false;
  for (int64_t d : shape.items) {
    if (d == 0) {
      empty = true;
    } else if (nonzero_product > kMaxElements / static_cast<size_t>(d)) {
      throw fail("shape " + shape_string(shape.items) + " is too large");
    } else {
      nonzero_product *= static_cast<size_t>(d);
    }
  }
  const size_t count = empty ? 0 : nonzero_product;
  const size_t needed = count * width;
  if (needed > available) {
    throw fail("truncated: shape " + shape_string(shape.items) + " of " + stored_type_name(type) + " needs " +
               std::to_string(needed) + " data bytes but the file has " + std::to_string(available));
  }
  if (needed < available) {
    throw fail(std::to_string(available - needed) + " unexpected bytes after the " + std::to_string(needed) +
               " data bytes of shape " + shape_string(shape.items));
  }
  auto values = decode_elements(type, bytes.subspan(data_start, needed), source);
  return Tensor(shape.items, std::move(values), engine_dtype(type));
}

Tensor read_npy(const std::filesystem::path& path) { return parse_npy(read_file(path), path.string()); }

std::vector<std::byte> encode_npy(const Tensor& tensor) {
  const bool boolean = tensor.dtype == DType::boolean;
  const bool integer = tensor.dtype == DType::int64;
  std::string header = "{'descr': '";
  header += boolean ? "|b1" : integer ? "<i8" : "<f4";
  header += "', 'fortran_order': False, 'shape': " + shape_string(tensor.shape) + ", }";
  // NumPy pads the header with spaces so that the data starts 64-byte aligned, and ends it in '\n'.
  const bool version2 = header.size() + 12 >= 65535;
  const size_t prefix = kMagicSize + 2 + (version2 ? 4 : 2);
  const size_t total = (prefix + header.size() + 1 + 63) / 64 * 64;
  header.append(total - prefix - header.size() - 1, ' ');
  header += '\n';

  const size_t width = boolean ? 1 : integer ? 8 : 4;
  std::vector<std::byte> out(total + tensor.data.size() * width);
  std::memcpy(out.data(), kMagic, kMagicSize);
  out[6] = std::byte{static_cast<unsigned char>(version2 ? 2 : 1)};
  out[7] = std::byte{0};
  for (size_t i = 0; i < prefix - 8; ++i) out[8 + i] = std::byte{static_cast<unsigned char>(header.size() >> (8 * i))};
  std::memcpy(out.data() + prefix, header.data(), header.size());
  std::byte* data = out.data() + total;
  if (boolean) {
    for (size_t i = 0; i < tensor.data.size(); ++i) data[i] = std::byte{tensor.data[i] != 0.0f};
  } else if (integer) {
    for (size_t i = 0; i < tensor.data.size(); ++i) {
      auto v = static_cast<int64_t>(tensor.data[i]);
      std::memcpy(data + 8 * i, &v, sizeof v);
    }
  } else if (!tensor.data.empty()) {  // memcpy from an empty vector's null data() is undefined
    std::memcpy(data, tensor.data.data(), tensor.data.size() * sizeof(float));
  }
  return out;
}

void write_npy(const std::filesystem::path& path, const Tensor& tensor) { write_file(path, encode_npy(tensor)); }

}  // namespace vkattn::io
