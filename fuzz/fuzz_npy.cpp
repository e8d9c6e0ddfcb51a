// libFuzzer target: the .npy reader. Any bytes are parsed; an accepted array must hold as many
// values as its shape says and survive a write and a re-read unchanged.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "fuzz/fuzz_contract.h"
#include "vkattn/io/npy.h"

using namespace vkattn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source = "input.npy";
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  Tensor t;
  if (!fuzz::refuses_cleanly(source, [&] { t = io::parse_npy(bytes, source); })) return 0;
  if (static_cast<int64_t>(t.data.size()) != element_count(t.shape)) {
    fuzz::finding("shape " + shape_string(t.shape) + " with " + std::to_string(t.data.size()) + " values");
  }
  Tensor again = io::parse_npy(io::encode_npy(t), "rewritten.npy");
  if (again.shape != t.shape || again.dtype != t.dtype ||
      (!t.data.empty() && std::memcmp(again.data.data(), t.data.data(), t.data.size() * sizeof(float)) != 0)) {
    fuzz::finding("an array of shape " + shape_string(t.shape) + " changed when written and read again");
  }
  return 0;
}
