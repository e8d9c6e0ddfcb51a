// vkattn generate: a causal language model continues a prompt, one token at a time — a checkpoint
// folder as the Hugging Face hub lays it out (--model: GPT-2, Llama; <vkattn/io/pretrained.h>)
// or a CausalLM's safetensors with its characters for tokens (--weights, models/tiny_char) — with
// the KV cache (each new token computes only its own row) or, with --no-cache, recomputing every
// position each time, as a model without a cache must. Greedy by default; --temperature and
// --top-k sample, reproducibly from --seed.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/commands.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/causal_lm.h"
#include "vkattn/modules/generation.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::cli {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// UTF-8 text as code points; a UsageError naming `what` for bytes that are not UTF-8.
std::vector<char32_t> code_points(const std::string& text, const std::string& what) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const int length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xe ? 3 : (byte >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || i + static_cast<size_t>(length) > text.size()) {
      throw UsageError(what + " is not UTF-8 (byte " + std::to_string(i) + ")");
    }
    char32_t c = length == 1 ? byte : byte & (0x7f >> length);
    for (int k = 1; k < length; ++k) c = (c << 6) | (static_cast<unsigned char>(text[i + static_cast<size_t>(k)]) & 0x3f);
    out.push_back(c);
    i += static_cast<size_t>(length);
  }
  return out;
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xc0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xe0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    s += static_cast<char>(0xf0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    s += static_cast<char>(0x80 | (c & 0x3f));
  }
  return s;
}

std::string bytes_text(uint64_t bytes) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1);
  if (bytes >= (uint64_t{1} << 30)) out << static_cast<double>(bytes) / (1 << 30) << " GiB";
  else if (bytes >= (uint64_t{1} << 20)) out << static_cast<double>(bytes) / (1 << 20) << " MiB";
  else out << static_cast<double>(bytes) / 1024 << " KiB";
  return out.str();
}

// models/tiny_char's tokenizer: one token a character, the characters in its __metadata__ vocab.
class CharVocabulary : public text::Tokenizer {
 public:
  explicit CharVocabulary(std::vector<char32_t> characters) : characters_(std::move(characters)) {}
  std::vector<int64_t> encode(std::string_view text) const override {
    std::vector<int64_t> ids;
    const auto prompt = code_points(std::string(text), "--prompt");
    for (size_t i = 0; i < prompt.size(); ++i) {
      auto it = std::find(characters_.begin(), characters_.end(), prompt[i]);
      if (it == characters_.end()) {
        throw UsageError("--prompt: character '" + utf8(prompt[i]) + "' at " + std::to_string(i) +
                         " is not in the model's vocabulary of " + std::to_string(characters_.size()) + " characters");
      }
      ids.push_back(it - characters_.begin());
    }
    return ids;
  }
  std::string decode(std::span<const int64_t> ids) const override {
    std::string text;
    for (int64_t id : ids) text += utf8(characters_.at(static_cast<size_t>(id)));
    return text;
  }
  int64_t vocab_size() const override { return static_cast<int64_t>(characters_.size()); }
  int64_t token_id(const std::string&) const override { return -1; }

 private:
  std::vector<char32_t> characters_;
};

// A model, its tokenizer, and the lines that say what they are.
struct Loaded {
  std::unique_ptr<LanguageModel> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::string name;        // "GPT2LMHeadModel", "CausalLM"
  std::string weights;     // weights_line's
  int64_t eos_token_id = -1;  // generation stops there
};

// "0.16 M parameters, 305.9 KiB as BF16 in the files"
std::string weights_line(uint64_t parameters, uint64_t stored_bytes, const std::string& dtype) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(2) << static_cast<double>(parameters) / 1e6 << " M parameters, "
      << bytes_text(stored_bytes) << " as " << dtype << " in the files";
  return out.str();
}

// "  306.5 KiB kept on the device (its matrices kept 16-bit, the rest float32)": what the weights the
// KV cache keeps take there, against the `parameters` · 4 bytes of float32
std::string device_weights_line(const KeptWeights& kept, uint64_t parameters) {
  const uint64_t bytes = kept.bytes();
  const bool narrow = std::any_of(kept.values.begin(), kept.values.end(),
                                  [](const auto& v) { return v.second.narrow != Narrow::none; });
  return "  " + bytes_text(bytes) + " kept on the device" +
         (narrow ? " (its matrices kept 16-bit, the rest float32; " + bytes_text(parameters * 4) + " as float32)"
                 : " (float32)");
}

Loaded load(const GenerateArgs& a) {
  if (!a.model.empty()) {
    io::Pretrained p = load_model(a.model, a.weights_dtype);
    if (!p.model) {
      throw UsageError("--model " + a.model + ": a " + p.architecture + " encodes text but does not generate it " +
                       "(try vkattn run --model " + a.model + " --text …)");
    }
    std::string weights = weights_line(p.model->parameter_count(), p.stored_bytes, p.stored_dtype);
    return Loaded{std::move(p.model), std::move(p.tokenizer), p.architecture, weights, p.eos_token_id};
  }
  io::CausalLMState state = io::load_causal_lm(a.weights);
  auto vocab_it = state.metadata.find("vocab");
  if (vocab_it == state.metadata.end()) {
    throw FileError(a.weights + ": __metadata__ has no vocab (the characters of token ids 0, 1, …)");
  }
  std::vector<char32_t> vocab = code_points(vocab_it->second, a.weights + ": __metadata__ vocab");
  if (static_cast<int64_t>(vocab.size()) != state.config.vocab_size) {
    throw FileError(a.weights + ": __metadata__ vocab has " + std::to_string(vocab.size()) +
                    " characters but token_embedding.weight has " + std::to_string(state.config.vocab_size) + " rows");
  }
  auto model = std::make_unique<CausalLM>(state.config, std::move(state.weights));
  std::string weights = weights_line(model->parameter_count(), model->parameter_count() * 4, "F32");
  return Loaded{std::move(model), std::make_unique<CharVocabulary>(std::move(vocab)), "CausalLM", weights, -1};
}

}  // namespace

CLI::App* add_generate(CLI::App& app, GenerateArgs& a) {
  auto* cmd = app.add_subcommand("generate", "continue a prompt with a small causal language model, token by token");
  auto* model = cmd->add_option("--model", a.model,
                                "DIR: a checkpoint folder as the Hugging Face hub lays it out (config.json, "
                                "model.safetensors, its tokenizer): GPT-2, Llama, Mistral, Qwen2 "
                                "(models/tiny_gpt2, models/tiny_llama)");
  auto* weights = cmd->add_option("--weights", a.weights,
                                  "M.safetensors: a CausalLM's state_dict (token_embedding, position_embedding, "
                                  "layers.N, norm, lm_head) with num_heads and its vocabulary in __metadata__, as "
                                  "models/tiny_char/train.py writes");
  model->excludes(weights);
  add_weights_dtype(*cmd, a.weights_dtype);
  cmd->add_option("--prompt", a.prompt, "the text to continue")->required();
  cmd->add_option("--max-new-tokens", a.max_new_tokens, "tokens to generate")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--temperature", a.temperature, "0: greedy (the likeliest token); > 0: sample from softmax(logits / T)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--top-k", a.top_k, "sample among the k likeliest tokens only (0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--seed", a.seed, "the sampler's seed: the same seed gives the same text")->capture_default_str();
  cmd->add_flag("--no-cache", a.no_cache, "recompute every position for each new token (no KV cache), to compare");
  cmd->add_option("--cache-dtype", a.cache_dtype,
                  "F16 or BF16: the KV cache keeps its keys and values rounded to 16 bits, 2 bytes each on the "
                  "GPU (half the bytes a token reads from it); F32: as computed")
      ->check(CLI::IsMember({"F32", "F16", "BF16"}))
      ->capture_default_str();
  cmd->add_option("--backend", a.backend, "gpu (a Vulkan device) or cpu (the reference)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_flag("--json", a.json, "print one JSON object (the tokens, the text, the times) instead of the text");
  return cmd;
}

int run_generate(const GenerateArgs& a) {
  if (a.model.empty() == a.weights.empty()) throw UsageError("generate needs --model DIR or --weights M.safetensors");
  if (a.no_cache && a.cache_dtype != "F32") {
    throw UsageError("--cache-dtype " + a.cache_dtype + " is the KV cache's, and --no-cache makes none");
  }
  if (a.weights_dtype != "stored" && a.model.empty()) {
    throw UsageError("--weights-dtype " + a.weights_dtype + " rounds a --model folder's weights; --weights " +
                     a.weights + " is read as it is");
  }
  Loaded loaded = load(a);
  const LanguageModel& model = *loaded.model;
  std::vector<int64_t> tokens;
  try {
    tokens = loaded.tokenizer->encode(a.prompt);
  } catch (const ShapeError& e) {  // not UTF-8
    throw UsageError("--prompt: " + std::string(e.what()));
  }
  if (tokens.empty()) throw UsageError("--prompt is empty: give at least one character to continue");
  const int64_t P = model.max_positions(), length = static_cast<int64_t>(tokens.size()) + a.max_new_tokens;
  if (length > P) {
    throw UsageError("--max-new-tokens " + std::to_string(a.max_new_tokens) + " after a prompt of " +
                     std::to_string(tokens.size()) + " tokens needs " + std::to_string(length) +
                     " positions; the model has " + std::to_string(P));
  }
  auto backend = make_watched_backend(a.backend, a.device);
  const size_t prompt_tokens = tokens.size();
  const GenerationOptions options{.max_new_tokens = a.max_new_tokens,
                                  .temperature = a.temperature,
                                  .top_k = a.top_k,
                                  .seed = a.seed,
                                  .use_cache = !a.no_cache,
                                  .cache_dtype = narrow_named(a.cache_dtype),
                                  .eos_token_id = loaded.eos_token_id};
  const std::vector<int64_t> prompt_ids = tokens;  // --json: the prompt's pass timed again, warm
  Generation generation(*backend, model, std::move(tokens), options);
  const KVCache* cache = generation.cache();
  const bool progress = !a.json && isatty(STDERR_FILENO);
  if (!a.json) std::cout << a.prompt << std::flush;

  // the prompt: one pass (with the cache, it fills it); its time includes making the pipelines
  auto start = Clock::now();
  generation.prompt_pass();
  const double prompt_ms = ms_since(start);
  start = Clock::now();
  std::string text;
  std::vector<double> forward_ms;  // each forward after the first token
  int64_t n = 0;
  for (std::optional<int64_t> next; (next = generation.next()); ++n) {
    const int64_t token = *next;
    // a token may end inside a character: its bytes go out as they are, the terminal joins them;
    // it continues the prompt (SentencePiece's leading space is the text's)
    const std::string piece = loaded.tokenizer->decode_continuation(std::span(&token, 1));
    text += piece;
    if (!a.json) std::cout << piece << std::flush;
    if (progress) {
      std::cerr << "\r\x1b[K" << "[token " << n + 1 << "/" << a.max_new_tokens << ", "
                << std::fixed << std::setprecision(1) << static_cast<double>(n + 1) / (ms_since(start) / 1000) << " tokens/s]"
                << "\r" << std::flush;
    }
    if (n + 1 == a.max_new_tokens) break;  // the last token needs no logits after it
    const auto forward_start = Clock::now();
    generation.pass();
    forward_ms.push_back(ms_since(forward_start));
  }
  const std::vector<int64_t>& generated = generation.generated();
  const bool stopped = generation.stopped_at_end_of_text();
  if (progress) std::cerr << "\r\x1b[K" << std::flush;
  // Every token but the first needed a forward. The first of them may make pipelines the
  // prompt's pass did not (a one-row GEMM's): the median is the time a token takes.
  const auto forwards = static_cast<int64_t>(forward_ms.size());
  const double first_forward_ms = forwards > 0 ? forward_ms.front() : 0.0;
  std::sort(forward_ms.begin(), forward_ms.end());
  const double per_token_ms = forwards > 0 ? forward_ms[forward_ms.size() / 2] : 0.0;
  const std::string mode = std::string(a.temperature == 0.0 ? "greedy" : "sampled") +
                           (a.no_cache ? ", recomputing every position (--no-cache)" : ", with the KV cache");
  if (a.json) {
    // the prompt's pass again, its pipelines made and the weights on the device: as a warm call
    Generation again(*backend, model, prompt_ids, options);
    start = Clock::now();
    again.prompt_pass();
    const double warm_prompt_ms = ms_since(start);
    nlohmann::json out = {{"prompt", a.prompt},
                          {"prompt_tokens", prompt_tokens},
                          {"text", text},
                          {"tokens", generated},
                          {"stopped_at_end_of_text", stopped},
                          {"prompt_ms", prompt_ms},
                          {"warm_prompt_ms", warm_prompt_ms},
                          {"ms_per_token", per_token_ms},
                          {"first_forward_ms", first_forward_ms},
                          {"tokens_per_second", per_token_ms > 0 ? 1000.0 / per_token_ms : 0.0},
                          {"cache", !a.no_cache},
                          {"cache_bytes", cache ? cache->bytes() : 0},
                          {"cache_dtype", cache ? narrow_name(cache->dtype()) : "none"},
                          {"backend", backend->name()},
                          {"device", backend->device_name()}};
    std::cout << out.dump() << "\n";
    return 0;
  }
  std::cout << "\n\n"
            << backend->name() << " backend: " << backend->device_name() << "\n"
            << loaded.name << ": " << loaded.weights << "\n"
            << (cache ? device_weights_line(*cache->kept_weights(*backend), model.parameter_count()) + "\n" : "")
            << "  " << model.describe() << "\n"
            << std::fixed << std::setprecision(1) << "prompt: " << prompt_tokens
            << (prompt_tokens == 1 ? " token in " : " tokens in ") << prompt_ms
            << " ms (the first pass also makes the pipelines)\n"
            << "generated: " << generated.size() << " tokens, " << mode
            << (stopped ? " (stopped at the end-of-text token)" : "") << "\n"
            << std::setprecision(2) << "  " << per_token_ms << " ms per token = " << std::setprecision(1)
            << (per_token_ms > 0 ? 1000.0 / per_token_ms : 0.0) << " tokens/s (the median of " << forwards
            << " forwards; the first took " << std::setprecision(2) << first_forward_ms << " ms)\n";
  if (cache) {
    std::cout << "KV cache: 2 (keys, values) × " << cache->layers() << " layers × 1 × " << cache->heads() << " heads × "
              << cache->capacity() << " positions × " << cache->head_dim() << " dims × "
              << (cache->dtype() == Narrow::none ? "4 bytes (float32)"
                                                 : std::string("2 bytes (") + narrow_name(cache->dtype()) + ")")
              << "\n"
              << "  = " << cache->bytes() << " bytes (" << bytes_text(cache->bytes()) << ")\n";
  }
  return 0;
}

}  // namespace vkattn::cli
