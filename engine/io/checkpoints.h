#pragma once
// The architectures of the hub's checkpoints, each as one of vkattn's modules: config.json and the
// tensors under the hub's names in, the module's config and weights out (engine/io/pretrained.cpp
// reads the folder and picks one by config.json's "architectures").
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "vkattn/io/state_dict.h"
#include "vkattn/tensor.h"

namespace vkattn::io::checkpoints {

// GPT2LMHeadModel (or GPT2Model's names, without "transformer.") as a CausalLM. `source` names
// the folder in errors.
CausalLMState gpt2(const nlohmann::json& config, std::map<std::string, Tensor> tensors, const std::string& source);

}  // namespace vkattn::io::checkpoints
