// vkattn run: a PyTorch nn.MultiheadAttention, from its state_dict in a safetensors file — or a
// Llama-style grouped-query attention, from Hugging Face's q_proj … o_proj names — on batch-first
// .npy inputs; or a checkpoint folder as the Hugging Face hub lays it out (--model: GPT-2, Llama,
// BERT, RoBERTa) on a text; on the GPU (or the CPU reference with --backend cpu). Outputs are
// written whole or not at all: every file is finished under a temporary name before any is
// renamed into place.
#include <exception>
#include <functional>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/io/file.h"
#include "tools/commands.h"
#include "tools/first_forward.h"
#include "tools/inputs.h"
#include "tools/interrupt.h"
#include "tools/labels.h"
#include "tools/validators.h"
#include "vkattn/errors.h"
#include "vkattn/io/heatmap.h"
#include "vkattn/io/npy.h"
#include "vkattn/io/pretrained.h"
#include "vkattn/io/question_answering.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/report.h"
#include "vkattn/tracing/side_by_side.h"
#include "vkattn/tracing/trace_dump.h"

namespace vkattn::cli {

namespace {

const char* python_bool(bool b) { return b ? "True" : "False"; }

// The files the run read, for its trace.
nlohmann::json trace_files(const AttentionArgs& in) {
  nlohmann::json files = {{"weights", in.weights}, {"query", in.query}};
  for (auto [name, path] : {std::pair{"key", &in.key}, {"value", &in.value}, {"key_padding_mask", &in.key_padding_mask},
                            {"attn_mask", &in.attn_mask}}) {
    if (!path->empty()) files[name] = *path;
  }
  return files;
}

// The module `run` runs, whichever it is: its forward on a backend, its repr and its trace config.
struct Runnable {
  std::function<AttentionResult(Backend&)> forward;
  std::string repr;      // "nn.MultiheadAttention(embed_dim=16, …)"
  nlohmann::json trace;  // the module's config and the files read
  // Fixes an automatic path to the one `backend` takes (a tuning GPU may prefer the unfused
  // steps), for every later forward, so that both passes of a side by side take it; returns its
  // name. Empty where the module has no such choice.
  std::function<std::string(Backend&)> settle_path;
  std::string output = "output";  // what the output is, for the summary
  std::string source;             // the file or folder the module came from
  std::function<void(const Tensor&)> explain;  // prints what the output says, after the summary; may be empty
};

// An nn.MultiheadAttention state_dict (PyTorch's names) on its inputs.
Runnable multi_head_run(const RunArgs& a) {
  auto in = std::make_shared<AttentionInputs>(read_attention_inputs(a.inputs));
  ForwardOptions& options = in->options;
  options.need_weights = !a.attn_weights.empty();
  options.average_attn_weights = !a.per_head_weights;
  options.attention = parse_attention_path(a.attention);
  options.pack_in_proj = a.pack_in_proj;
  const auto& c = in->module.config();
  std::ostringstream repr;
  repr << "nn.MultiheadAttention(embed_dim=" << c.embed_dim << ", num_heads=" << c.num_heads
       << ", bias=" << python_bool(c.bias) << ", add_bias_kv=" << python_bool(c.add_bias_kv) << ", kdim=" << c.key_dim()
       << ", vdim=" << c.value_dim() << ", batch_first=True)";
  nlohmann::json trace = {
      {"module", "nn.MultiheadAttention"}, {"embed_dim", c.embed_dim}, {"num_heads", c.num_heads}, {"bias", c.bias},
      {"add_bias_kv", c.add_bias_kv}, {"kdim", c.key_dim()}, {"vdim", c.value_dim()}, {"batch_first", true},
      {"is_causal", a.inputs.causal}, {"need_weights", options.need_weights},
      {"average_attn_weights", options.average_attn_weights},
      {"attention", attention_path_name(resolve_attention(options.attention, options.need_weights))},
      {"pack_in_proj", a.pack_in_proj}, {"files", trace_files(a.inputs)}};
  return {[in](Backend& b) { return in->module.forward(b, in->query, in->key_or_query(), in->value_or_query(), in->options); },
          repr.str(), trace, [in](Backend& b) {
            in->options.attention = in->module.path(b, in->query, in->key_or_query(), in->options);
            return std::string(attention_path_name(in->options.attention));
          }};
}

// A grouped-query attention (Hugging Face's q_proj … o_proj) on the query alone.
Runnable grouped_query_run(const RunArgs& a) {
  if (a.pack_in_proj) throw UsageError("--pack-in-proj packs nn.MultiheadAttention's in_proj; " + a.inputs.weights +
                                       " has separate q_proj, k_proj and v_proj");
  auto module = std::make_shared<GroupedQueryAttention>(read_grouped_query(a.inputs, a.grouped));
  auto x = std::make_shared<Tensor>(read_input(a.inputs.query, "query"));
  GroupedQueryOptions options;
  options.key_padding_mask = read_mask(a.inputs.key_padding_mask, "key padding mask");
  options.need_weights = !a.attn_weights.empty();
  options.average_attn_weights = !a.per_head_weights;
  options.attention = parse_attention_path(a.attention);
  const auto& c = module->config();
  std::ostringstream repr;
  repr << "grouped-query attention: E=" << c.hidden_size << ", H=" << c.num_heads << ", H_kv=" << c.kv_heads()
       << ", d=" << c.dim() << "; RoPE " << (c.rope == RotaryConvention::half ? "half" : "pairs") << ", θ="
       << c.rope_theta << " on " << (c.rotary_dims ? c.rotary_dims : c.dim()) << " dims; "
       << (c.causal ? "causal" : "not causal");
  if (c.sliding_window) repr << ", window " << c.sliding_window;
  if (c.qk_norm) repr << "; q and k RMS-normalised per head (q_norm, k_norm)";
  nlohmann::json trace = {
      {"module", "grouped-query attention"}, {"hidden_size", c.hidden_size}, {"num_heads", c.num_heads},
      {"num_key_value_heads", c.kv_heads()}, {"head_dim", c.dim()}, {"attention_bias", c.attention_bias},
      {"o_proj_bias", c.o_proj_bias}, {"rope", c.rope == RotaryConvention::half ? "half" : "pairs"},
      {"rope_theta", c.rope_theta}, {"rotary_dims", c.rotary_dims ? c.rotary_dims : c.dim()},
      {"is_causal", c.causal}, {"sliding_window", c.sliding_window}, {"qk_norm", c.qk_norm},
      {"need_weights", options.need_weights},
      {"average_attn_weights", options.average_attn_weights},
      {"attention", attention_path_name(resolve_attention(options.attention, options.need_weights))},
      {"files", trace_files(a.inputs)}};
  return {[module, x, options](Backend& b) { return module->forward(b, *x, options); }, repr.str(), trace};
}

// A hub checkpoint folder on a text, every step traced: a language model's (GPT-2, Llama) logits
// (1, T, V), an encoder's (BERT, RoBERTa) last hidden state (1, T, E), its pooled output in the
// trace, a classifier's logits (1, num_labels) or (1, T, num_labels), said by label, a masked LM's
// (1, T, V) on a text with [MASK]s (RoBERTa's <mask>), said by the tokens likeliest there, or a
// question answerer's (W, T, 2) on a question and its context (in W windows), said by its answers.
Runnable model_run(const RunArgs& a) {
  const auto& in = a.inputs;
  for (auto [given, flag] : {std::pair{!in.weights.empty(), "--weights"}, {!in.query.empty(), "--query"},
                             {!in.key.empty(), "--key"}, {!in.key_padding_mask.empty(), "--key-padding-mask"},
                             {!in.attn_mask.empty(), "--attn-mask"}, {in.causal, "--causal"}, {in.heads != 0, "--heads"},
                             {!a.attn_weights.empty(), "--attn-weights"}, {a.pack_in_proj, "--pack-in-proj"},
                             {a.grouped.given(), "--kv-heads, --rope, --rope-theta, --rotary-dims or --window"}}) {
    if (given) {
      throw UsageError(std::string(flag) + " configures an attention module's run; --model " + a.model +
                       " runs the checkpoint on --text (its config.json says the rest)");
    }
  }
  auto p = std::make_shared<io::Pretrained>(load_model(a.model, a.weights_dtype));
  const bool answers = p->encoder && p->encoder->config().num_labels > 0 &&
                       p->encoder->config().classifier == BertClassifier::spans;
  if (answers && !a.text_pair) {
    throw UsageError(a.model + " answers a question from a context (" + p->architecture +
                     "): give the question as --text and the context as --text-pair");
  }
  for (auto [given, flag] : {std::pair{a.max_answer_len > 0, "--max-answer-len"},
                             {a.max_seq_len.has_value(), "--max-seq-len"}, {a.doc_stride.has_value(), "--doc-stride"}}) {
    if (given && !answers) {
      throw UsageError(std::string(flag) + " is a question answerer's (…ForQuestionAnswering); " + a.model + " is a " +
                       p->architecture);
    }
  }
  io::AnswerOptions options;  // the pipeline's defaults, where not given
  if (a.top_k > 0) options.top_k = a.top_k;
  if (a.max_answer_len > 0) options.max_answer_len = a.max_answer_len;
  options.max_seq_len = a.max_seq_len;
  options.doc_stride = a.doc_stride;
  auto tokens = std::make_shared<Tensor>(text_tokens(*p, a.text));
  std::optional<Tensor> types;  // a pair's token types, where the encoder has them
  std::optional<Tensor> padding;  // a question answerer's windows past their ends (where more than one)
  auto windows = std::make_shared<std::vector<text::EncodedPair>>();
  if (a.text_pair) {
    if (!p->encoder) throw UsageError("--text-pair: " + a.model + " is a language model, which reads one text");
    const TextPair joined = text_pair_tokens(*p, a.text, *a.text_pair);
    *tokens = joined.ids;
    types = joined.type_ids;
  }
  const std::vector<int64_t> ids(tokens->data.begin(), tokens->data.end());
  if (answers) {  // the context in windows of --max-seq-len tokens, one batch
    io::QuestionInputs windowed;
    try {
      windowed = io::question_inputs(*p->tokenizer, a.text, *a.text_pair, options, p->encoder->max_tokens());
    } catch (const ConfigError& e) {  // --max-seq-len or --doc-stride out of range
      throw UsageError(std::string("the context's windows: ") + e.what());
    }
    *tokens = windowed.ids;
    if (types) types = windowed.type_ids;
    padding = windowed.key_padding_mask;
    *windows = std::move(windowed.windows);
  }
  const std::string repr = p->architecture + ": the " + (a.text_pair ? "pair" : "text") + "'s " +
                           std::to_string(ids.size()) + " tokens through\n  " +
                           (p->model ? p->model->describe() : p->encoder->describe()) + rounded_words(a.weights_dtype);
  nlohmann::json trace = {{"module", p->architecture}, {"model", a.model}, {"text", a.text}, {"ids", ids},
                          {"config", p->config}, {"stored_dtype", p->stored_dtype},
                          {"weights_dtype", a.weights_dtype}};
  if (a.text_pair) trace["text_pair"] = *a.text_pair;
  if (windows->size() > 1) {
    trace["windows"] = nlohmann::json::array();
    for (const text::EncodedPair& w : *windows) trace["windows"].push_back(w.ids);
  }
  const AttentionPath path = parse_attention_path(a.attention);
  const bool classifies = p->encoder && p->encoder->config().num_labels > 0;
  const bool masked_lm = p->encoder && p->encoder->config().masked_lm && !classifies;
  const std::vector<int64_t> masked = masked_lm ? io::mask_positions(*p, ids) : std::vector<int64_t>();
  if (a.top_k > 0 && masked.empty() && !answers) {
    const std::string mask = io::mask_token(*p);
    throw UsageError("--top-k shows a masked LM's likeliest tokens at each " + (mask.empty() ? "[MASK]" : mask) +
                     " of --text: " + (masked_lm ? "the text has none" : a.model + " has no masked-LM head"));
  }
  if (classifies) {
    const bool every_token = p->encoder->config().classifier == BertClassifier::tokens || answers;
    Runnable run{.repr = repr, .trace = trace, .source = a.model};
    run.forward = [p, tokens, types, padding, path](Backend& b) {
      return AttentionResult{p->encoder->classify(b, *tokens, types, padding, path), std::nullopt};
    };
    run.output = answers ? "start and end logits (B, T, 2)"
                 : every_token ? "logits (B, T, num_labels)"
                               : "logits (B, num_labels)";
    if (answers) {
      run.explain = [windows, context = *a.text_pair, options](const Tensor& logits) {
        print_answers(std::cout, *windows, context, logits, options);
      };
    } else {
      run.explain = [p, ids](const Tensor& logits) { print_labels(std::cout, *p, ids, logits); };
    }
    return run;
  }
  if (!masked.empty()) {
    Runnable run{.repr = repr, .trace = trace, .source = a.model};
    run.forward = [p, tokens, types, path](Backend& b) {
      return AttentionResult{p->encoder->masked_lm(b, *tokens, types, {}, path), std::nullopt};
    };
    run.output = "logits (B, T, vocab)";
    run.explain = [p, masked, top_k = a.top_k > 0 ? a.top_k : 5](const Tensor& logits) {
      print_fills(std::cout, *p, masked, logits, top_k);
    };
    return run;
  }
  if (p->encoder) {
    return {[p, tokens, types, path](Backend& b) {
              return AttentionResult{p->encoder->forward(b, *tokens, types, {}, path).last_hidden_state, std::nullopt};
            },
            repr, trace, nullptr, "last hidden state (B, T, E)", a.model};
  }
  return {[p, tokens, path](Backend& b) { return AttentionResult{p->model->forward(b, *tokens, {}, path), std::nullopt}; },
          repr, trace, nullptr, "logits (B, T, vocab)", a.model};
}

}  // namespace

CLI::App* add_run(CLI::App& app, RunArgs& a) {
  auto* cmd = app.add_subcommand("run", "run a PyTorch nn.MultiheadAttention state_dict (or a grouped-query "
                                        "attention's: q_proj … o_proj) on .npy inputs, or a hub checkpoint "
                                        "folder (--model) on a text");
  add_attention_args(*cmd, a.inputs, true);
  add_grouped_query_args(*cmd, a.grouped);
  auto* model = cmd->add_option("--model", a.model,
                                "DIR: instead of --weights and --query, a checkpoint folder as the Hugging Face hub "
                                "lays it out (GPT-2, Llama, BERT, RoBERTa: config.json, model.safetensors, its "
                                "tokenizer) on --text");
  auto* text = cmd->add_option("--text", a.text, "with --model: the text the model reads (its tokenizer's ids)");
  cmd->add_option("--text-pair", a.text_pair,
                  "with --model on an encoder: a second text (a question's context, a sentence to compare), joined "
                  "to --text as its tokenizer joins a pair: [CLS] text [SEP] pair [SEP], token types 0 then 1")
      ->needs(text);
  model->needs(text);
  text->needs(model);
  add_weights_dtype(*cmd, a.weights_dtype)->needs(model);
  cmd->add_option("--top-k", a.top_k,
                  "with --model on a masked LM (BertForMaskedLM …) and a text with [MASK]s: the tokens shown at each "
                  "(default 5); on a question answerer (…ForQuestionAnswering): the answers shown (default 1)")
      ->check(kPositiveNumber)
      ->needs(model);
  cmd->add_option("--max-answer-len", a.max_answer_len,
                  "with --model on a question answerer: an answer's tokens at most (default 15)")
      ->check(kPositiveNumber)
      ->needs(model);
  cmd->add_option("--max-seq-len", a.max_seq_len,
                  "with --model on a question answerer: a context too long is read in windows of this many tokens, "
                  "question and template included (default: 384 or the model's most, the fewer)")
      ->needs(model);
  cmd->add_option("--doc-stride", a.doc_stride,
                  "with --model on a question answerer: the context's tokens two neighbouring windows share "
                  "(default: half --max-seq-len, at most 128)")
      ->needs(model);
  cmd->add_option("--attention", a.attention,
                  "auto (fused when no weights are written, else unfused), unfused (scores, mask, softmax, values: four steps) or fused (one flash_attention step, no weights)")
      ->check(CLI::IsMember({"auto", "unfused", "fused"}))
      ->capture_default_str();
  cmd->add_flag("--pack-in-proj", a.pack_in_proj,
                "self-attention: project q, k and v with one in_proj GEMM (B, L, E) -> (B, L, 3E), as PyTorch packs them");
  auto* backend = cmd->add_option("--backend", a.backend, "gpu (a Vulkan device) or cpu (the reference)")
                      ->check(CLI::IsMember({"gpu", "cpu"}))
                      ->capture_default_str();
  cmd->add_option("--device", a.device, "GPU index or name substring (see vkattn devices); default: the best");
  cmd->add_option("--out", a.out, "O.npy: write the output (B, L, E)");
  auto* weights = cmd->add_option("--attn-weights", a.attn_weights,
                                  "P.npy: write the attention weights (B, L, S), averaged over heads");
  cmd->add_flag("--per-head-weights", a.per_head_weights, "write the weights per head, (B, H, L, S)")->needs(weights);
  cmd->add_option("--images", a.images, "DIR: also draw the attention weights, one SVG heatmap per batch item (and head)")
      ->needs(weights);
  auto* trace = cmd->add_option("--trace", a.trace, "DIR: print every step and write DIR/trace.json and DIR/timeline.json");
  cmd->add_flag("--trace-values", a.trace_values, "also read back every step's output: DIR/NNN_<step>.npy")->needs(trace);
  auto* side = cmd->add_flag("--side-by-side", a.side_by_side,
                             "run on the GPU and the CPU reference; print each step's max |gpu - cpu| "
                             "(with --trace: DIR/gpu and DIR/cpu); write outputs only when every step agrees")
                   ->excludes(backend);
  cmd->add_option("--report", a.report,
                  "FILE.html: the pass (side by side: both, and their difference) as one page to explore in a browser");
  cmd->add_option("--atol", a.atol, "--side-by-side's absolute tolerance")->capture_default_str()->check(kNonNegativeNumber)->needs(side);
  cmd->add_option("--rtol", a.rtol, "--side-by-side's relative tolerance (times |cpu|)")->capture_default_str()->check(kNonNegativeNumber)->needs(side);
  return cmd;
}

int run_run(const RunArgs& a) {
  if (!a.out.empty() && a.out == a.attn_weights) throw UsageError("--out and --attn-weights both name " + a.out);
  for (const auto& path : {a.out, a.attn_weights, a.report})
    if (!path.empty()) io::check_output_path(path);

  if (a.model.empty()) {
    if (a.inputs.weights.empty()) throw UsageError("--weights is required (or --model DIR with --text)");
    if (a.inputs.query.empty()) throw UsageError("--query is required");
  }
  const bool grouped = a.model.empty() && module_kind(a.inputs.weights) == "grouped-query attention";
  if (a.model.empty() && !grouped && a.grouped.given()) {
    throw UsageError("--kv-heads, --rope, --rope-theta, --rotary-dims and --window configure a grouped-query "
                     "attention (q_proj … o_proj); " + a.inputs.weights + " holds an nn.MultiheadAttention");
  }
  Runnable module = !a.model.empty() ? model_run(a) : grouped ? grouped_query_run(a) : multi_head_run(a);
  if (module.source.empty()) module.source = a.inputs.weights;

  // One pass, or two side by side (the GPU's is the result; the reference checks it).
  std::vector<std::unique_ptr<Backend>> backends;
  for (const std::string& name : a.side_by_side ? std::vector<std::string>{"gpu", "cpu"} : std::vector{a.backend}) {
    // --device picks the GPU
    backends.push_back(make_watched_backend(name, a.side_by_side && name == "cpu" ? "" : a.device));
  }
  if (module.settle_path) module.trace["attention"] = module.settle_path(*backends.front());
  // Side by side, the GPU's times are shown: its first forward, which makes the pipelines, is not.
  std::string first;
  if (a.side_by_side) {
    first = untimed_first_forward([&] { module.forward(*backends.front()); });
  }
  std::vector<std::unique_ptr<StepRecorder>> recorders;
  std::vector<std::unique_ptr<Tracer>> sinks;
  for (auto& backend : backends) {
    if (a.side_by_side || !a.report.empty()) backend->add_tracer(*recorders.emplace_back(std::make_unique<StepRecorder>(true)));
    if (a.trace.empty()) continue;
    auto dir = a.side_by_side ? std::filesystem::path(a.trace) / backend->name() : std::filesystem::path(a.trace);
    backend->add_tracer(*sinks.emplace_back(std::make_unique<TraceDump>(dir, a.trace_values, module.trace)));
    if (!a.side_by_side) backend->add_tracer(*sinks.emplace_back(std::make_unique<ConsoleTracer>(std::cout, a.trace_values)));
  }
  // Side by side, a failing pass does not stop the other: the table shows how far each got.
  std::optional<AttentionResult> result_of_first;
  std::exception_ptr failure;
  for (auto& backend : backends) {
    try {
      AttentionResult r = module.forward(*backend);
      if (!result_of_first) result_of_first = std::move(r);
    } catch (...) {
      if (!a.side_by_side) throw;
      if (!failure) failure = std::current_exception();
    }
  }
  if (!a.report.empty()) {  // also when the passes disagree: that is when the page helps most
    ReportSection section{.title = module.repr, .pass = recorders[0].get(), .pass_label = backends[0]->name()};
    if (a.side_by_side) section.against = recorders[1].get(), section.against_label = backends[1]->name();
    write_report(a.report, {section}, {.title = "vkattn run " + module.source, .atol = a.atol, .rtol = a.rtol});
  }
  if (a.side_by_side) {
    SideBySide table(*recorders[0], *recorders[1], a.atol, a.rtol);
    std::cout << first;
    table.print(std::cout);
    if (!a.report.empty()) say_report_written(a.report, "every step of both passes and their difference");
    if (failure) std::rethrow_exception(failure);
    if (!table.agree()) {
      const auto& step = table.rows()[*table.first_divergent()].event();
      throw std::runtime_error("the gpu and cpu passes disagree from step " + std::to_string(step.index) + " " +
                               step.name + " on; nothing was written");
    }
  }
  const AttentionResult& result = *result_of_first;  // the GPU's, side by side
  const Backend& backend = *backends.front();
  require_finite(result.output, module.output.c_str());
  if (result.weights) require_finite(*result.weights, "attention weights");

  stop_if_interrupted();
  std::vector<io::PendingFile> files;
  if (!a.out.empty()) files.emplace_back(a.out, io::encode_npy(result.output));
  if (result.weights) files.emplace_back(a.attn_weights, io::encode_npy(*result.weights));
  for (auto& file : files) file.commit();
  std::vector<std::filesystem::path> images;
  if (!a.images.empty()) {
    std::filesystem::create_directories(a.images);
    const bool batched = result.weights->rank() == (a.per_head_weights ? 4 : 3);
    std::vector<std::string> dims = batched ? std::vector<std::string>{"b"} : std::vector<std::string>{};
    if (a.per_head_weights) dims.push_back("h");
    images = io::write_heatmaps(a.images, "attn_weights", *result.weights, dims,
                                {.title = a.per_head_weights ? "attention weights" : "attention weights, averaged over heads"});
  }

  std::cout << backend.name() << " backend: " << backend.device_name() << (a.side_by_side ? ", checked by the cpu reference" : "") << "\n"
            << module.repr << "\n  from " << module.source << "\n";
  print_summary(result.output, module.output, a.out);
  if (module.explain) module.explain(result.output);
  if (result.weights) {
    print_summary(*result.weights, a.per_head_weights ? "attention weights per head" : "attention weights averaged over heads",
                  a.attn_weights);
  }
  if (!a.report.empty() && !a.side_by_side) say_report_written(a.report, "every step of the pass");
  if (!images.empty()) std::cout << images.size() << " heatmap" << (images.size() > 1 ? "s" : "") << " -> " << a.images << "/attn_weights*.svg\n";
  return 0;
}

bool is_bad_input(const std::exception& e) {
  return dynamic_cast<const UsageError*>(&e) || dynamic_cast<const ShapeError*>(&e) ||
         dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const FileError*>(&e);
}

}  // namespace vkattn::cli
