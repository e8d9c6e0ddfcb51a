// vkattn check DIR: the user's own intermediate tensors, DIR/<step>.npy under vkattn's step names
// (q_proj.npy, split_heads_q.npy, attention_scores.npy, softmax.npy, …; self_attn.q_proj.npy or
// layers.1.norm2.npy in an encoder or decoder), against vkattn's recipe run on the same weights
// and inputs: every recorded step compared in the recipe's order, the first divergent one named
// with its decoded index, both values and a diagnosis. The module is the one --weights holds: an
// nn.MultiheadAttention, a grouped-query attention (q_proj … o_proj), an nn.TransformerEncoder or
// nn.TransformerDecoder (or one layer's). Exit 0 when every recorded step agrees, 1 when one
// differs, 2 for bad input (a name that is no step included: the report says which step it
// likely means).
#include <algorithm>
#include <filesystem>
#include <iostream>

#include "tools/commands.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/tracing/check.h"

namespace vkattn::cli {

CLI::App* add_check(CLI::App& app, CheckArgs& a) {
  auto* cmd = app.add_subcommand("check", "check your own attention's tensors (DIR/<step>.npy) against vkattn's recipe");
  cmd->add_option("DIR", a.dir, "a directory of .npy files named by vkattn's steps: q_proj.npy, softmax.npy, …")
      ->required();
  add_attention_args(*cmd, a.inputs, true);
  add_grouped_query_args(*cmd, a.grouped);
  add_layer_args(*cmd, a.layer, " (an encoder or decoder)");
  cmd->add_option("--memory", a.memory, "M.npy: a decoder's memory (B, S, E); its target is --query");
  cmd->add_option("--memory-mask", a.memory_mask,
                  "A.npy (T, S) or (B*H, T, S): a decoder's cross-attention mask, bool True blocks, or float added");
  cmd->add_option("--memory-key-padding-mask", a.memory_key_padding_mask,
                  "M.npy (B, S): a decoder's memory padding, bool True ignores that position, or float added");
  auto* model = cmd->add_option("--model", a.model,
                                "DIR: instead of --weights and --query, a checkpoint folder as the Hugging Face hub "
                                "lays it out (GPT-2, Llama, BERT), on --text; steps named as vkattn run --trace "
                                "names them");
  auto* text = cmd->add_option("--text", a.text, "with --model: the text the model reads (its tokenizer's ids)");
  cmd->add_option("--text-pair", a.text_pair,
                  "with --model on an encoder: the second text of the pair its steps were recorded on (as vkattn "
                  "run --text-pair joins them)")
      ->needs(text);
  model->needs(text);
  text->needs(model);
  add_weights_dtype(*cmd, a.weights_dtype)->needs(model);
  cmd->add_option("--backend", a.backend, "where vkattn's recipe runs: gpu (a Vulkan device) or cpu (the reference)")
      ->check(CLI::IsMember({"gpu", "cpu"}))
      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--atol", a.atol, "absolute tolerance")->capture_default_str()->check(kNonNegativeNumber);
  cmd->add_option("--rtol", a.rtol, "relative tolerance (times |vkattn's|)")->capture_default_str()->check(kNonNegativeNumber);
  return cmd;
}

namespace {

// A hub checkpoint's recipe on a text. UsageError for a flag of a module's state_dict.
CheckReport check_model(const CheckArgs& a, const std::vector<std::pair<std::string, Tensor>>& recorded,
                        Backend& backend) {
  const AttentionArgs& in = a.inputs;
  for (auto [given, flag] : {std::pair{!in.weights.empty(), "--weights"}, {!in.query.empty(), "--query"},
                             {!in.key.empty(), "--key"}, {!in.key_padding_mask.empty(), "--key-padding-mask"},
                             {!in.attn_mask.empty(), "--attn-mask"}, {in.causal, "--causal"},
                             {in.heads != 0, "--heads"}, {!a.memory.empty(), "--memory"},
                             {a.grouped.given(), "--kv-heads, --rope, …"}}) {
    if (given) throw UsageError(std::string(flag) + " is for a module's state_dict; --model " + a.model +
                                " is checked on --text (its config.json says the rest)");
  }
  const io::Pretrained p = load_model(a.model, a.weights_dtype);
  if (!a.text_pair) return check_pretrained(recorded, p, backend, text_tokens(p, a.text), {}, {a.atol, a.rtol});
  if (!p.encoder) throw UsageError("--text-pair: " + a.model + " is a language model, which reads one text");
  const TextPair joined = text_pair_tokens(p, a.text, *a.text_pair);
  return check_pretrained(recorded, p, backend, joined.ids, joined.type_ids, {a.atol, a.rtol});
}

// The recipe of the module --weights holds (or --model's), checked against `recorded`. UsageError
// for a flag that module does not take.
CheckReport check_module(const CheckArgs& a, const std::vector<std::pair<std::string, Tensor>>& recorded,
                         Backend& backend) {
  const AttentionArgs& in = a.inputs;
  if (!a.model.empty()) return check_model(a, recorded, backend);
  if (in.weights.empty() || in.query.empty()) {
    throw UsageError("give the module as --weights W.safetensors and its input as --query X.npy, or a checkpoint "
                     "folder as --model DIR with --text");
  }
  const std::string kind = module_kind(in.weights);
  const std::string named = (kind[0] == 'a' || kind[0] == 'e' ? "an " : "a ") + kind;  // "an encoder"
  const bool layers = kind == "encoder" || kind == "decoder";
  for (auto [wrong, flags] : {std::pair{kind != "grouped-query attention" && a.grouped.given(),
                                        "--kv-heads, --rope, --rope-theta, --rotary-dims and --window"},
                              {!layers && (a.layer.activation != "relu" || a.layer.norm_first || a.layer.eps != 1e-5),
                               "--activation, --norm-first and --eps"},
                              {kind != "decoder" && !a.memory.empty(), "--memory"},
                              {kind != "decoder" && !(a.memory_mask.empty() && a.memory_key_padding_mask.empty()),
                               "--memory-mask and --memory-key-padding-mask"}}) {
    if (wrong) throw UsageError(in.weights + " is " + named + "'s state_dict, which does not take " + flags);
  }
  if (kind == "grouped-query attention") {
    GroupedQueryAttention module = read_grouped_query(in, a.grouped);
    GroupedQueryOptions options;
    options.key_padding_mask = read_mask(in.key_padding_mask, "key padding mask");
    return check_grouped_query(recorded, module, backend, read_input(in.query, "query"), options, {a.atol, a.rtol});
  }
  if (layers && (!in.key.empty() || !in.value.empty())) {
    throw UsageError("--key and --value: " + named + " takes its input as --query" +
                     (kind == "decoder" ? " (the target) and --memory" : ""));
  }
  if (kind == "encoder") {
    auto state = io::load_encoder(in.weights, in.heads);
    apply_layer_args(a.layer, state.config.layer);
    EncoderOptions options;
    options.src_key_padding_mask = read_mask(in.key_padding_mask, "key padding mask");
    options.mask = read_mask(in.attn_mask, "attention mask");
    options.is_causal = in.causal;
    const Tensor src = read_input(in.query, "query");
    if (state.single_layer) {
      return check_encoder(recorded, TransformerEncoderLayer(state.config.layer, std::move(state.weights.layers[0])),
                           backend, src, options, {a.atol, a.rtol});
    }
    return check_encoder(recorded, TransformerEncoder(state.config, std::move(state.weights)), backend, src, options,
                         {a.atol, a.rtol});
  }
  if (kind == "decoder") {
    if (a.memory.empty()) throw UsageError(in.weights + " is a decoder's state_dict: give its memory with --memory");
    auto state = io::load_decoder(in.weights, in.heads);
    apply_layer_args(a.layer, state.config.layer);
    DecoderOptions options;
    options.tgt_key_padding_mask = read_mask(in.key_padding_mask, "key padding mask");
    options.tgt_mask = read_mask(in.attn_mask, "attention mask");
    options.tgt_is_causal = in.causal;
    options.memory_mask = read_mask(a.memory_mask, "memory mask");
    options.memory_key_padding_mask = read_mask(a.memory_key_padding_mask, "memory key padding mask");
    const Tensor tgt = read_input(in.query, "query"), memory = read_input(a.memory, "memory");
    if (state.single_layer) {
      return check_decoder(recorded, TransformerDecoderLayer(state.config.layer, std::move(state.weights.layers[0])),
                           backend, tgt, memory, options, {a.atol, a.rtol});
    }
    return check_decoder(recorded, TransformerDecoder(state.config, std::move(state.weights)), backend, tgt, memory,
                         options, {a.atol, a.rtol});
  }
  AttentionInputs attention = read_attention_inputs(in);
  return check_attention(recorded, attention.module, backend, attention.query, attention.key_or_query(),
                         attention.value_or_query(), attention.options, {a.atol, a.rtol});
}

}  // namespace

int run_check(const CheckArgs& a) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(a.dir)) throw FileError(a.dir + ": not a directory");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(a.dir)) {
    if (entry.path().extension() == ".npy") files.push_back(entry.path());
  }
  if (files.empty()) throw FileError(a.dir + ": no .npy files (name each <step>.npy: q_proj.npy, softmax.npy, …)");
  std::sort(files.begin(), files.end());
  std::vector<std::pair<std::string, Tensor>> recorded;
  for (const auto& file : files) recorded.emplace_back(file.stem().string(), io::read_npy(file));

  auto backend = make_watched_backend(a.backend, a.device);
  CheckReport report = check_module(a, recorded, *backend);
  std::cout << report.text();
  if (!report.unknown.empty()) {
    throw FileError(a.dir + "/" + report.unknown.front().first + ".npy: '" + report.unknown.front().first +
                    "' is not a step of vkattn's recipe");
  }
  return report.ok() ? 0 : 1;
}

}  // namespace vkattn::cli
