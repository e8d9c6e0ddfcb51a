#pragma once
// KeepsWeights: what a module needs to keep its weights on one backend between passes, as
// torch's module.to(device): the backend, the weights kept there, and the owner number that
// tells them from another module's or from this module's older weights (KeptWeights).
#include <cstdint>
#include <memory>

#include "vkattn/backends/backend.h"

namespace vkattn {

class KeepsWeights {
 public:
  // Keeps the module's weights on `backend` from its next pass there on: the first pass uploads
  // them, later passes on that backend take them where they lie (a pass that fails drops them;
  // the next uploads them again). Copies of the module made after this share them. Passes on
  // another backend upload theirs as always; calling this again with another backend moves them
  // there. `backend` must outlive the module's passes on it.
  void keep_weights_on(Backend& backend) { at_ = std::make_shared<At>(At{&backend, {}}); }
  // The bytes the weights kept there take (KeptWeights::bytes: a 16-bit checkpoint's matrices 2
  // each); 0 before the first pass there, or where the module keeps none.
  uint64_t kept_bytes() const { return at_ ? at_->kept.bytes() : 0; }

 protected:
  // For the scope of one pass on `backend` (a KeepWeights made around it): the kept weights
  // there, or null where the module keeps them elsewhere or nowhere.
  KeptWeights* kept_on(const Backend& backend) const {
    return at_ && at_->backend == &backend ? &at_->kept : nullptr;
  }
  // KeptWeights' owner for this module's weights: the same for its copies, new with new weights
  uint64_t weights_owner() const { return owner_; }
  // After the weights change: what any backend kept of the old ones is dropped at its next pass.
  void weights_changed() { owner_ = new_weights_owner(); }

 private:
  struct At {
    const Backend* backend = nullptr;
    KeptWeights kept;
  };
  std::shared_ptr<At> at_;
  uint64_t owner_ = new_weights_owner();
};

}  // namespace vkattn
