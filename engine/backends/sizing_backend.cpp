#include "engine/backends/sizing_backend.h"

#include <utility>

namespace vkattn {

namespace {
// No numbers: a buffer's size, given back to the pool when the last value holding it is gone
// (a template on the pool, which is SizingBackend's private type).
template <class Pool>
struct SizedStorage final : Storage {
  SizedStorage(std::shared_ptr<Pool> owner, uint64_t size) : pool(std::move(owner)), bytes(size) {}
  ~SizedStorage() override { pool->release(bytes); }
  std::shared_ptr<Pool> pool;
  uint64_t bytes;
  Narrow narrow = Narrow::none;  // a weight kept 16-bit
};
}  // namespace

SizingBackend::SizingBackend(uint64_t reuse_from_bytes, decltype(MemoryLimits::gemm_scratch_floats) gemm_scratch_floats,
                             bool keeps_16bit, bool folds_into_store)
    : pool_(std::make_shared<Pool>(Pool{reuse_from_bytes, {}})),
      gemm_scratch_floats_(std::move(gemm_scratch_floats)),
      keeps_16bit_(keeps_16bit),
      folds_into_store_(folds_into_store) {}

void SizingBackend::scratch(const std::string& step, const std::string& product, int64_t batch, int64_t group,
                            int64_t M, int64_t N, int64_t K, int64_t a_heads, Narrow b_format) {
  if (!gemm_scratch_floats_) return;
  if (const int64_t floats = gemm_scratch_floats_(product, batch, group, M, N, K, a_heads, b_format); floats > 0) {
    allocate(step + " (B packed)", floats);  // given back at once, as at the end of the step
  }
}

void SizingBackend::Pool::acquire(uint64_t bytes) {
  auto it = free.find(bytes);
  if (bytes >= reuse_from_bytes && it != free.end() && it->second > 0) {
    --it->second;
  } else {
    allocated += bytes;
  }
}

void SizingBackend::Pool::release(uint64_t bytes) {
  if (bytes >= reuse_from_bytes) ++free[bytes];
}

std::shared_ptr<Storage> SizingBackend::allocate(const std::string& name, int64_t count) {
  tensors_.push_back({name, count});
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
  pool_->acquire(bytes);
  return std::make_shared<SizedStorage<Pool>>(pool_, bytes);
}

std::shared_ptr<Storage> SizingBackend::store(const std::string& name, const Tensor& tensor, Narrow as) {
  auto storage = allocate(name, stored_words(tensor.size(), as));
  static_cast<SizedStorage<Pool>&>(*storage).narrow = as;
  return storage;
}

Narrow SizingBackend::format_of(const Storage& storage) {
  return static_cast<const SizedStorage<Pool>&>(storage).narrow;
}

// Zeros: a recipe that reads a value back mid-pass (a host step) gets numbers of the right count.
std::vector<float> SizingBackend::load(const Storage&, int64_t count) {
  return std::vector<float>(static_cast<size_t>(count));
}

}  // namespace vkattn
