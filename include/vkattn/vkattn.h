#pragma once
// The whole public API of vkattn in one include. A program may include only the parts it uses:
//   vkattn/tensor.h, errors.h, log.h, version.h        tensors, the exceptions, logging, version
//   vkattn/backends/  backend.h (the Backend every step runs on), reference_backend.h (the CPU
//                     reference), vulkan_backend.h (one shader per step), make_backend.h (by name),
//                     roofline.h (a step's least work against the device's peak)
//   vkattn/modules/   multi_head_attention.h (torch.nn.MultiheadAttention), transformer_encoder.h,
//                     transformer_decoder.h, transformer.h (torch.nn.Transformer), kv_cache.h
//                     (keys and values kept for decoding), causal_lm.h (a decoder-only LM),
//                     grouped_query_attention.h (Llama's: shared key/value heads, RoPE, windows),
//                     llama.h (Llama, Mistral, Qwen2: RMSNorm, SwiGLU, grouped-query attention),
//                     bert.h (BERT's encoder: token types, post-norm layers, the pooler),
//                     generation.h (a language model continuing a prompt, token by token)
//   vkattn/tracing/   tracer.h (every step's tensors), trace_dump.h (trace.json + .npy per step),
//                     compare.h (tensor against tensor), side_by_side.h (GPU against CPU)
//   vkattn/io/        npy.h, safetensors.h, state_dict.h (PyTorch's names), pretrained.h (the
//                     hub's checkpoint folders), heatmap.h
//   vkattn/text/      tokenizer.h (GPT-2's byte-level BPE, BERT's WordPiece)
// Everything else (the Vulkan plumbing, the plans, push constants) is internal and not installed.
#include "vkattn/backends/backend.h"
#include "vkattn/backends/make_backend.h"
#include "vkattn/backends/reference_backend.h"
#include "vkattn/backends/roofline.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/errors.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/safetensors.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/log.h"
#include "vkattn/modules/bert.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/generation.h"
#include "vkattn/modules/grouped_query_attention.h"
#include "vkattn/modules/kv_cache.h"
#include "vkattn/modules/llama.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/modules/transformer.h"
#include "vkattn/modules/transformer_decoder.h"
#include "vkattn/modules/transformer_encoder.h"
#include "vkattn/tensor.h"
#include "vkattn/text/tokenizer.h"
#include "vkattn/tracing/check.h"
#include "vkattn/tracing/diagnoses.h"
#include "vkattn/tracing/compare.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/trace_dump.h"
#include "vkattn/tracing/tracer.h"
#include "vkattn/version.h"
