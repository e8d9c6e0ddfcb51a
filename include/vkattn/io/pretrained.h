#pragma once
// A checkpoint folder as the Hugging Face hub lays it out, in:
//   config.json                      the architecture ("architectures", "model_type") and its sizes
//   model.safetensors, or shards     the weights (F32, F16 or BF16, widened to float32 here and
//                                    marked 16-bit where they were: Tensor::narrow)
//     with model.safetensors.index.json
//   tokenizer.json, vocab.json + merges.txt,      the tokenizer (<vkattn/text/tokenizer.h>)
//     or vocab.txt
// Architectures so far:
//   GPT2LMHeadModel (model_type "gpt2") as a CausalLM: Conv1D weights stored (in, out) turned to
//     torch's (out, in), c_attn split into q, k, v, gelu_new as gelu_tanh, the head tied to wte
//   LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM as a Llama: RMSNorm, SwiGLU,
//     grouped-query attention with RoPE (rope_theta; rope_scaling is refused by name)
//   BertModel (also BertForMaskedLM, BertForPreTraining: their encoder and masked-LM head) as a
//     Bert: post-norm encoder layers, token types, the pooler; WordPiece for its tokenizer
// Any other is a ConfigError naming it; a missing file, or a tensor missing, extra or mis-shaped,
// a FileError naming the file and the tensor.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "vkattn/modules/bert.h"
#include "vkattn/modules/language_model.h"
#include "vkattn/tensor.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::io {

struct Pretrained {
  nlohmann::json config;     // config.json as it is
  std::string architecture;  // config.json's, e.g. "GPT2LMHeadModel"
  std::unique_ptr<LanguageModel> model;  // a CausalLM or a Llama; none for an encoder
  std::unique_ptr<Bert> encoder;         // BERT's; none for a language model
  std::unique_ptr<text::Tokenizer> tokenizer;
  int64_t eos_token_id = -1;                     // config.json's; -1 where it has none
  std::string stored_dtype;                      // the tensors' dtype in the files: F32, F16, BF16 (or "mixed")
  uint64_t stored_bytes = 0;                     // the weights' bytes in the files
};

struct LoadOptions {
  // bfloat16 or float16: every float tensor rounded to it (to nearest even) as it is read, as
  // torch's model.to(torch.bfloat16) or .half() rounds it, so that a device keeps the model's
  // matrices in 2 bytes an element (Backend::upload_matrix) — an F32 checkpoint in half the
  // memory, its numbers rounded. float16 refuses (ConfigError naming the tensor) a weight past its
  // largest, 65504, which torch would make infinite. none: the tensors as the files hold them.
  Narrow weights_dtype = Narrow::none;
};

Pretrained load_pretrained(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace vkattn::io
