// libFuzzer target: the safetensors reader. Any bytes are parsed; every tensor of an accepted
// file must hold as many values as its shape says.
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz/fuzz_contract.h"
#include "vkattn/io/safetensors.h"

using namespace vkattn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source = "input.safetensors";
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  io::Safetensors file;
  if (!fuzz::refuses_cleanly(source, [&] { file = io::parse_safetensors(bytes, source); })) return 0;
  for (const auto& [name, t] : file.tensors) {
    if (static_cast<int64_t>(t.data.size()) != element_count(t.shape)) {
      fuzz::finding("tensor '" + name + "' of shape " + shape_string(t.shape) + " with " +
                    std::to_string(t.data.size()) + " values");
    }
  }
  return 0;
}
