#include "vkattn/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "engine/io/element_types.h"
#include "engine/io/file.h"
#include "vkattn/errors.h"

namespace vkattn::io {

namespace {

using nlohmann::json;

std::optional<StoredType> stored_type(const std::string& dtype) {
  if (dtype == "F32") return StoredType::float32;
  if (dtype == "F16") return StoredType::float16;
  if (dtype == "BF16") return StoredType::bfloat16;
  if (dtype == "F64") return StoredType::float64;
  if (dtype == "BOOL") return StoredType::boolean;
  return std::nullopt;
}

struct Entry {
  std::string name;
  StoredType type;
  std::string dtype;  // as the file spells it
  Shape shape;
  uint64_t begin, end;
};

}  // namespace

Safetensors parse_safetensors(std::span<const std::byte> bytes, const std::string& source) {
  auto fail = [&](const std::string& why) { return FileError(source + ": " + why); };
  if (bytes.size() < 8) {
    throw fail("too short for a safetensors file (" + std::to_string(bytes.size()) +
               " bytes; the header length alone takes 8)");
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > bytes.size() - 8) {
    throw fail("header length " + std::to_string(header_length) + " runs past the end of the " +
               std::to_string(bytes.size()) + "-byte file");
  }
  auto header_bytes = bytes.subspan(8, header_length);
  json header;
  try {
    header = json::parse(reinterpret_cast<const char*>(header_bytes.data()),
                         reinterpret_cast<const char*>(header_bytes.data() + header_bytes.size()));
  } catch (const json::exception& e) {
    // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 3: …", or
    // "[json.exception.out_of_range.406] number overflow parsing '1e999'" (found by fuzz_safetensors)
    std::string what = e.what();
    auto colon = what.find("] ");
    throw fail("the header is not valid JSON: " + (colon == std::string::npos ? what : what.substr(colon + 2)));
  }
  if (!header.is_object()) throw fail("the header is not a JSON object");

  const auto buffer = bytes.subspan(8 + header_length);
  Safetensors out;
  std::vector<Entry> entries;
  for (const auto& item : header.items()) {
    // plain references, not a structured binding: clang before 16 cannot capture those in lambdas
    const std::string& name = item.key();
    const json& info = item.value();
    if (name == "__metadata__") {
      if (!info.is_object()) throw fail("__metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) throw fail("__metadata__ value '" + key + "' is not a string");
        out.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& why) { return fail("tensor '" + name + "': " + why); };
    if (!info.is_object()) throw bad("its entry is not an object");
    for (const auto& [key, value] : info.items()) {
      if (key != "dtype" && key != "shape" && key != "data_offsets") throw bad("unexpected field '" + key + "'");
    }
    if (!info.contains("dtype") || !info["dtype"].is_string()) throw bad("no dtype string");
    if (!info.contains("shape") || !info["shape"].is_array()) throw bad("no shape array");
    if (!info.contains("data_offsets") || !info["data_offsets"].is_array() || info["data_offsets"].size() != 2) {
      throw bad("no data_offsets [begin, end]");
    }
    Entry e{.name = name};
    auto dtype = info["dtype"].get<std::string>();
    auto type = stored_type(dtype);
    if (!type) throw bad("dtype " + dtype + " is not supported (F32, F16, BF16, F64 and BOOL are)");
    e.type = *type;
    e.dtype = dtype;
    uint64_t count = 1;
    for (const auto& d : info["shape"]) {
      if (!d.is_number_unsigned()) throw bad("its shape holds something other than a non-negative integer");
      auto dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim != 0 && count > (uint64_t{1} << 56) / dim)) throw bad("its shape is too large");
      count *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    for (const auto& o : info["data_offsets"]) {
      if (!o.is_number_unsigned()) throw bad("its data_offsets are not non-negative integers");
    }
    e.begin = info["data_offsets"][0].get<uint64_t>();
    e.end = info["data_offsets"][1].get<uint64_t>();
    const std::string range = "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin > e.end) throw bad(range + " end before they begin");
    if (e.end > buffer.size()) {
      throw bad(range + " lie past the end of the " + std::to_string(buffer.size()) + "-byte data buffer");
    }
    const uint64_t needed = count * stored_size(e.type);
    if (e.end - e.begin != needed) {
      throw bad(range + " hold " + std::to_string(e.end - e.begin) + " bytes but shape " + shape_string(e.shape) +
                " of " + dtype + " needs " + std::to_string(needed));
    }
    entries.push_back(std::move(e));
  }

  // The tensors must tile the buffer exactly: no overlaps, no gaps, nothing after the last.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return std::tie(a.begin, a.end) < std::tie(b.begin, b.end); });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& e : entries) {
    if (e.begin < covered) throw fail("tensors '" + previous->name + "' and '" + e.name + "' overlap in the data buffer");
    if (e.begin > covered) {
      throw fail("bytes " + std::to_string(covered) + ".." + std::to_string(e.begin) +
                 " of the data buffer belong to no tensor (before '" + e.name + "')");
    }
    covered = e.end;
    previous = &e;
  }
  if (covered != buffer.size()) {
    throw fail(std::to_string(buffer.size() - covered) + " bytes at the end of the data buffer belong to no tensor");
  }

  for (const Entry& e : entries) {
    auto values = decode_elements(e.type, buffer.subspan(e.begin, e.end - e.begin), source + ": tensor '" + e.name + "'");
    Tensor t(e.shape, std::move(values), engine_dtype(e.type));
    t.narrow = narrow_type(e.type);
    out.tensors.emplace(e.name, std::move(t));
    out.stored_dtypes.emplace(e.name, e.dtype);
  }
  return out;
}

Safetensors read_safetensors(const std::filesystem::path& path) {
  return parse_safetensors(read_file(path), path.string());
}

}  // namespace vkattn::io
