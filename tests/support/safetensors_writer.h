#pragma once
// A safetensors writer for the reader tests: float tensors stored F32, F16 or BF16 (rounded to
// nearest even), the header padded to 8 bytes as the format's writers do.
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/support/sixteen_bit.h"
#include "vkattn/tensor.h"

namespace vkattn::testing {

inline void write_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                              const std::string& dtype = "F32", const std::map<std::string, std::string>& metadata = {}) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string data;
  for (const auto& [name, t] : tensors) {
    const size_t begin = data.size();
    for (float v : t.data) {
      if (dtype == "BF16" || dtype == "F16") {  // rounded to nearest even
        const auto b = static_cast<uint16_t>(reference::narrow_bits(v, dtype == "BF16" ? 2 : 1));
        data.append(reinterpret_cast<const char*>(&b), 2);
      } else {
        data.append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    header[name] = {{"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t length = text.size();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << text << data;
}

}  // namespace vkattn::testing
