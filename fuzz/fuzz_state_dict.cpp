// libFuzzer target: the mapping from PyTorch state_dict names to vkattn's modules —
// nn.MultiheadAttention (bare and under a "layers.0.self_attn." prefix), nn.TransformerEncoder /
// TransformerEncoderLayer, and the SimpleTransformer example. The input is text, so that names and
// shapes mutate freely without having to keep a safetensors file consistent:
//   NAME D0 D1 …      a zero tensor of that shape (at most 6 dims, 16384 elements each)
//   @KEY VALUE        __metadata__[KEY] = VALUE
// Each loader runs with num_heads taken from the metadata and given as 1, 2 and 3. A load that
// succeeds must build its module: the loader may not accept what the module refuses, but for a
// num_heads that does not divide embed_dim, which the module itself names (the caller chose it).
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "examples/simple_transformer.h"
#include "fuzz/fuzz_contract.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer_encoder.h"

using namespace vkattn;

namespace {

constexpr int64_t kMaxElements = 16384;
constexpr size_t kMaxDims = 6;

io::Safetensors parse_listing(const std::string& text) {
  io::Safetensors file;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string name;
    if (!(words >> name)) continue;
    if (name[0] == '@') {
      std::string value;
      words >> value;
      file.metadata[name.substr(1)] = value;
      continue;
    }
    Shape shape;
    int64_t count = 1;
    std::string word;
    bool fits = true;
    while (words >> word && fits) {
      if (word.empty() || word.size() > 4 || word.find_first_not_of("0123456789") != std::string::npos) {
        fits = false;
        break;
      }
      int64_t dim = std::stoll(word);
      count *= dim;
      shape.push_back(dim);
      fits = shape.size() <= kMaxDims && count <= kMaxElements;
    }
    if (fits) file.tensors.insert_or_assign(name, Tensor(shape));
  }
  return file;
}

template <class Build>
void load_and_build(const std::string& what, Build&& build) {
  // The loader's FileError must name the source; a module that refuses what the loader accepted
  // throws an error that does not, and so is a finding too.
  fuzz::refuses_cleanly("fuzz", [&] {
    try {
      build();
    } catch (const FileError&) {
      throw;
    } catch (const Error& e) {
      const bool heads_chosen = dynamic_cast<const ConfigError*>(&e) &&
                                std::string(e.what()).find("is not divisible by num_heads") != std::string::npos;
      if (!heads_chosen) fuzz::finding(what + ": the loader accepted a state_dict its module refuses: " + e.what());
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const io::Safetensors file = parse_listing(std::string(reinterpret_cast<const char*>(data), size));
  for (int64_t heads : {0, 1, 2, 3}) {
    for (const std::string prefix : {"", "layers.0.self_attn."}) {
      load_and_build("attention", [&] {
        auto state = io::attention_from_state_dict(file, heads, "fuzz", prefix);
        MultiHeadAttention module(state.config, state.weights);
      });
    }
    load_and_build("encoder", [&] {
      auto state = io::encoder_from_state_dict(file, heads, "fuzz");
      TransformerEncoder module(state.config, state.weights);
    });
    load_and_build("simple transformer", [&] { examples::SimpleTransformer::from_state_dict(file, heads, "fuzz"); });
  }
  return 0;
}
