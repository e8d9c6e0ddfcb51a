// torch.nn.MultiheadAttention's state_dict, saved with safetensors, run on the default Vulkan
// device by a program that knows vkattn only as an installed package.
//   consumer WEIGHTS.safetensors QUERY.npy [EXPECTED.npy]
// QUERY is (B, L, E), batch first; EXPECTED, PyTorch's output for it: exit 1 if they differ.
#include <vkattn/vkattn.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: consumer WEIGHTS.safetensors QUERY.npy [EXPECTED.npy]\n";
    return 2;
  }
  try {
    auto [config, weights] = vkattn::io::load_attention(argv[1]);  // num_heads from __metadata__
    config.batch_first = true;
    const vkattn::MultiHeadAttention attention(config, weights);
    auto gpu = vkattn::make_backend("gpu");  // VKATTN_DEVICE, else the best Vulkan device
    const vkattn::Tensor query = vkattn::io::read_npy(argv[2]);
    const vkattn::Tensor output = attention.forward(*gpu, query, {.need_weights = false}).output;
    std::cout << "vkattn " << VKATTN_VERSION_STRING << " on " << gpu->device_name() << ": query "
              << vkattn::shape_string(query.shape) << " -> output " << vkattn::shape_string(output.shape) << "\n";
    if (argc == 4) {
      const auto diff = vkattn::compare_values(output, vkattn::io::read_npy(argv[3]), 1e-4, 1e-4);
      std::cout << "max |vkattn - PyTorch| = " << diff.max_abs_error << ", " << diff.mismatches
                << " elements beyond 1e-4\n";
      return diff.mismatches == 0 ? 0 : 1;
    }
    return 0;
  } catch (const vkattn::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}
