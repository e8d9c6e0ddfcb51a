// vkattn._Pretrained: a checkpoint folder as the hub lays it out (io::load_pretrained) — a
// language model (GPT-2, Llama) or an encoder (BERT) — kept on its device, with its tokenizer.
#include "binding.h"

#include <algorithm>

#include "vkattn/io/fill_mask.h"
#include "vkattn/io/question_answering.h"

namespace vkattn::python {
namespace {

using IdArray = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// Integer ids as a Tensor, each below `limit` (ids are floats in a Tensor: range-checked while
// exact): ShapeError "<what> N at index K is outside <among> [0, limit)".
Tensor ids_tensor(const IdArray& ids, int64_t limit, const std::string& what, const std::string& among) {
  Tensor t(shape_of(ids), DType::int64);
  for (py::ssize_t k = 0; k < ids.size(); ++k) {
    const int64_t id = ids.data()[k];
    if (id < 0 || id >= limit) {
      throw ShapeError(what + " " + std::to_string(id) + " at index " + std::to_string(k) + " is outside " + among +
                       " [0, " + std::to_string(limit) + ")");
    }
    t.data[static_cast<size_t>(k)] = static_cast<float>(id);
  }
  return t;
}

io::LoadOptions load_options(const std::string& weights_dtype) {
  if (weights_dtype.empty()) return {};
  if (weights_dtype == "bfloat16") return {.weights_dtype = Narrow::bfloat16};
  if (weights_dtype == "float16") return {.weights_dtype = Narrow::float16};
  throw ConfigError("weights_dtype '" + weights_dtype +
                    "' is not one vkattn rounds weights to (None, 'bfloat16' or 'float16')");
}

class Pretrained {
 public:
  // weights_dtype: "" (as stored), "bfloat16" or "float16" (io::LoadOptions)
  Pretrained(const std::filesystem::path& dir, const std::string& kind, const std::string& selector,
             const std::string& weights_dtype)
      : device_(open_device(kind, selector)), loaded_(io::load_pretrained(dir, load_options(weights_dtype))) {
    KeepsWeights& kept = loaded_.model ? static_cast<KeepsWeights&>(*loaded_.model) : *loaded_.encoder;
    kept.keep_weights_on(*device_->backend);
    // config.json's entries, and what vkattn read of it
    config_ = loaded_.config;
    config_.update({{"module", loaded_.architecture}, {"architecture", loaded_.architecture}, {"path", dir.string()},
                    {"kind", loaded_.model ? "language model" : "encoder"},
                    {"model", loaded_.model ? loaded_.model->describe() : loaded_.encoder->describe()},
                    {"parameters", loaded_.model ? loaded_.model->parameter_count()
                                                 : loaded_.encoder->parameter_count()},
                    {"pad_token_id", special_id({"[PAD]", "<pad>"})},
                    {"mask_token_id", io::mask_token_id(loaded_)},
                    {"num_labels", loaded_.encoder ? loaded_.encoder->config().num_labels : 0},
                    {"type_vocab_size", loaded_.encoder ? loaded_.encoder->config().type_vocab_size : 0},
                    {"stored_dtype", loaded_.stored_dtype}, {"stored_bytes", loaded_.stored_bytes}});
  }

  // The first of `tokens` (BERT's name, RoBERTa's) the tokenizer has, or -1
  int64_t special_id(std::initializer_list<const char*> tokens) const {
    for (const char* token : tokens) {
      if (const int64_t id = loaded_.tokenizer->token_id(token); id >= 0) return id;
    }
    return -1;
  }

  std::string device() const { return device_label(*device_); }
  uint64_t device_bytes() const {
    return loaded_.model ? loaded_.model->kept_bytes() : loaded_.encoder->kept_bytes();
  }
  const nlohmann::json& config() const { return config_; }
  std::vector<int64_t> encode(const std::string& text) const { return loaded_.tokenizer->encode(text); }
  // Two texts joined by the tokenizer's template for pairs: (ids, token types)
  std::pair<std::vector<int64_t>, std::vector<int64_t>> encode_pair(const std::string& a, const std::string& b) const {
    text::EncodedPair pair = loaded_.tokenizer->encode_pair(a, b);
    return {std::move(pair.ids), std::move(pair.type_ids)};
  }
  py::bytes decode(const std::vector<int64_t>& ids, bool continuation) const {
    return continuation ? loaded_.tokenizer->decode_continuation(ids) : loaded_.tokenizer->decode(ids);
  }

  // A language model's logits (B, T, V) of ids (B, T), or the last logits_to_keep positions' (B, n,
  // V); with the trace, (logits, recorded).
  py::object forward(const IdArray& ids, bool trace, std::optional<bool> fold_layout_steps,
                     const std::string& attention, int64_t logits_to_keep) {
    if (!loaded_.model) throw ConfigError(loaded_.architecture + " is an encoder: call it for its hidden states");
    const Tensor t = ids_tensor(ids, loaded_.model->vocab_size(), "token id", "the vocabulary");
    const AttentionPath path = parse_attention_path(attention);
    return run([&](Backend& backend) { return loaded_.model->forward(backend, t, {}, path, logits_to_keep); }, trace,
               fold_layout_steps);
  }

  // forward()'s logits left on the model's device (LanguageModel::forward_on_device)
  DeviceTensor forward_on_device(const IdArray& ids, const std::string& attention, int64_t logits_to_keep) {
    if (!loaded_.model) throw ConfigError(loaded_.architecture + " is an encoder: call it for its hidden states");
    const Tensor t = ids_tensor(ids, loaded_.model->vocab_size(), "token id", "the vocabulary");
    const AttentionPath path = parse_attention_path(attention);
    Value logits = on_device(*device_, [&](Backend& backend) {
      return loaded_.model->forward_on_device(backend, t, {}, path, logits_to_keep);
    });
    return {device_, std::move(logits)};
  }

  // `recorded` (vkattn's step names) against the model's steps on ids (B, T), with an encoder's
  // token types (B, T) where given (a pair's).
  CheckReport check(const std::vector<std::pair<std::string, FloatArray>>& recorded, const IdArray& ids,
                    const std::optional<IdArray>& token_type_ids, double atol, double rtol) {
    std::vector<std::pair<std::string, Tensor>> yours;
    for (const auto& [name, array] : recorded) yours.emplace_back(name, to_tensor(array));
    const int64_t vocab = loaded_.model ? loaded_.model->vocab_size() : loaded_.encoder->vocab_size();
    const Tensor t = ids_tensor(ids, vocab, "token id", "the vocabulary");
    std::optional<Tensor> types;
    if (token_type_ids) types = encoder_inputs(ids, token_type_ids, std::nullopt).types;
    return on_device(*device_,
                     [&](Backend& backend) { return check_pretrained(yours, loaded_, backend, t, types, {atol, rtol}); });
  }

  // An encoder's (last_hidden_state (B, T, E), pooler_output (B, E) or None) of ids (B, T), with
  // token types (B, T) and padding (B, T) True where a position is padding; with the trace,
  // ((last_hidden_state, pooler_output), recorded).
  py::object encoder_forward(const IdArray& ids, const std::optional<IdArray>& token_type_ids,
                             const std::optional<py::array>& key_padding_mask, bool trace,
                             std::optional<bool> fold_layout_steps) {
    const EncoderInputs in = encoder_inputs(ids, token_type_ids, key_padding_mask);
    BertOutput out;  // the hidden state is the pass's result, so that traces end on it
    auto pass = [&](Backend& backend) {
      out = in.bert.forward(backend, in.ids, in.types, in.padding);
      return out.last_hidden_state;
    };
    auto pair = [&] {
      py::object pooled = out.pooler_output ? py::object(to_array(std::move(*out.pooler_output))) : py::none();
      return py::make_tuple(to_array(std::move(out.last_hidden_state)), pooled);
    };
    if (!trace) {
      on_device(*device_, pass);
      return pair();
    }
    auto [ignored, recorded] = traced(*device_, config_, pass, fold_layout_steps);
    return py::make_tuple(pair(), recorded);
  }

  // encoder_forward()'s outputs left on the model's device (Bert::forward_on_device):
  // (last_hidden_state, pooler_output or None) as vkattn.DeviceTensors
  py::tuple encoder_forward_on_device(const IdArray& ids, const std::optional<IdArray>& token_type_ids,
                                      const std::optional<py::array>& key_padding_mask) {
    const EncoderInputs in = encoder_inputs(ids, token_type_ids, key_padding_mask);
    BertValues out = on_device(*device_, [&](Backend& backend) {
      return in.bert.forward_on_device(backend, in.ids, in.types, in.padding);
    });
    py::object pooled = out.pooler_output ? py::cast(DeviceTensor{device_, std::move(*out.pooler_output)}) : py::none();
    return py::make_tuple(DeviceTensor{device_, std::move(out.last_hidden_state)}, pooled);
  }

  // The logits of an encoder's head, inputs as encoder_forward's: Bert::masked_lm's (B, T, V)
  // (BertForMaskedLM's) or Bert::classify's (B, num_labels) or (B, T, num_labels) (a sequence
  // classifier's, a token classifier's).
  template <auto Head>
  py::object encoder_head(const IdArray& ids, const std::optional<IdArray>& token_type_ids,
                          const std::optional<py::array>& key_padding_mask, bool trace,
                          std::optional<bool> fold_layout_steps) {
    const EncoderInputs in = encoder_inputs(ids, token_type_ids, key_padding_mask);
    auto pass = [&](Backend& backend) {
      return (in.bert.*Head)(backend, in.ids, in.types, in.padding, AttentionPath::automatic);
    };
    return run(pass, trace, fold_layout_steps);
  }

  // The top_k likeliest tokens at each mask token of `text` (io::mask_fills): [[(token's bytes,
  // probability), …] per mask, in order]. ShapeError where the text has none.
  std::vector<std::vector<std::pair<py::bytes, double>>> fill_mask(const std::string& text, int64_t top_k) {
    const std::vector<int64_t> ids = loaded_.tokenizer->encode(text);
    const std::vector<int64_t> where = io::mask_positions(loaded_, ids);
    if (where.empty()) {
      const std::string mask = io::mask_token(loaded_);
      throw ShapeError("fill_mask: \"" + text + "\" has no " + (mask.empty() ? "[MASK]" : mask) + " token to fill");
    }
    if (!loaded_.encoder) throw ConfigError(loaded_.architecture + " is a language model: it has no masked-LM head");
    const Tensor t({1, int64_t(ids.size())}, std::vector<float>(ids.begin(), ids.end()), DType::int64);
    const Tensor logits = on_device(*device_, [&](Backend& backend) { return loaded_.encoder->masked_lm(backend, t); });
    std::vector<std::vector<std::pair<py::bytes, double>>> out;
    for (const auto& fills : io::mask_fills(loaded_, where, logits, top_k)) {
      auto& here = out.emplace_back();
      for (const io::Fill& fill : fills) here.emplace_back(py::bytes(fill.token), fill.probability);
    }
    return out;
  }

  // The answers to `question` in `context` (io::answers) of a question answerer
  // (…ForQuestionAnswering): [(score, start, end, answer)], start and end the answer's characters
  // [start, end) of the context (Python's str indices), as the pipeline gives them.
  std::vector<py::tuple> answer(const std::string& question, const std::string& context,
                                const io::AnswerOptions& options) {
    const Bert* bert = loaded_.encoder.get();
    if (!bert || bert->config().num_labels == 0 || bert->config().classifier != BertClassifier::spans) {
      throw ConfigError("answer: " + loaded_.architecture +
                        " has no question-answering head (qa_outputs: …ForQuestionAnswering's)");
    }
    const io::QuestionInputs in = io::question_inputs(*loaded_.tokenizer, question, context, options, bert->max_tokens());
    std::optional<Tensor> types;
    if (bert->config().type_vocab_size > 0) types = in.type_ids;
    const Tensor logits = on_device(*device_, [&](Backend& backend) {
      return bert->classify(backend, in.ids, types, in.key_padding_mask);
    });
    auto characters = [&](size_t bytes) {  // the characters of context's first `bytes` (UTF-8's lead bytes)
      return std::count_if(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(bytes),
                           [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; });
    };
    std::vector<py::tuple> out;
    for (const io::Answer& a : io::answers(in.windows, context, logits, options)) {
      out.push_back(py::make_tuple(a.score, characters(a.begin), characters(a.end), py::str(a.text)));
    }
    return out;
  }

  // `max_new_tokens` ids after `prompt` through the KV cache (Generation): greedy at temperature
  // 0, else sampled from `seed`; fewer where the model gives its end-of-text token (not returned).
  // cache_dtype: "" or "float32", "float16", "bfloat16" (KVCache's dtype).
  std::vector<int64_t> generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens, double temperature,
                                int64_t top_k, uint64_t seed, const std::string& cache_dtype) {
    if (!loaded_.model) throw ConfigError(loaded_.architecture + " is an encoder: it does not generate text");
    Narrow dtype = Narrow::none;
    if (cache_dtype == "float16" || cache_dtype == "bfloat16") {
      dtype = cache_dtype == "float16" ? Narrow::float16 : Narrow::bfloat16;
    } else if (!cache_dtype.empty() && cache_dtype != "float32") {
      throw ConfigError("cache_dtype '" + cache_dtype +
                        "' is not one a KV cache keeps (None, 'float32', 'float16' or 'bfloat16')");
    }
    const GenerationOptions options{.max_new_tokens = max_new_tokens,
                                    .temperature = temperature,
                                    .top_k = top_k,
                                    .seed = seed,
                                    .use_cache = true,
                                    .cache_dtype = dtype,
                                    .eos_token_id = loaded_.eos_token_id};
    return on_device(*device_, [&](Backend& backend) { return Generation(backend, *loaded_.model, prompt, options).run(); });
  }

 private:
  // An encoder's ids, token types and padding mask as the engine takes them.
  struct EncoderInputs {
    const Bert& bert;
    Tensor ids;
    std::optional<Tensor> types, padding;
  };
  EncoderInputs encoder_inputs(const IdArray& ids, const std::optional<IdArray>& token_type_ids,
                               const std::optional<py::array>& key_padding_mask) const {
    if (!loaded_.encoder) throw ConfigError(loaded_.architecture + " is a language model: call it for its logits");
    const Bert& bert = *loaded_.encoder;
    EncoderInputs in{bert, ids_tensor(ids, bert.vocab_size(), "token id", "the vocabulary"), std::nullopt,
                     to_mask(key_padding_mask)};
    if (token_type_ids && bert.config().type_vocab_size == 0) {
      throw ShapeError("token_type_ids are given but " + loaded_.architecture + " has no token types");
    }
    if (token_type_ids) {
      in.types = ids_tensor(*token_type_ids, bert.config().type_vocab_size, "token type",
                            "the token types (type_vocab_size)");
    }
    return in;
  }

  template <class F>
  py::object run(F&& pass, bool trace, std::optional<bool> fold_layout_steps) {
    if (!trace) return to_array(on_device(*device_, pass));
    auto [result, recorded] = traced(*device_, config_, pass, fold_layout_steps);
    return py::make_tuple(to_array(std::move(result)), recorded);
  }

  std::shared_ptr<Device> device_;
  io::Pretrained loaded_;
  nlohmann::json config_;
};

}  // namespace

void bind_pretrained(py::module_& m) {
  py::class_<Pretrained>(m, "_Pretrained")
      .def(py::init<const std::filesystem::path&, const std::string&, const std::string&, const std::string&>(),
           py::arg("path"), py::arg("kind"), py::arg("selector"), py::arg("weights_dtype") = "")
      .def_property_readonly("device", &Pretrained::device)
      .def_property_readonly("device_bytes", &Pretrained::device_bytes)
      .def_property_readonly(
          "config", [](const Pretrained& p) { return py::module_::import("json").attr("loads")(p.config().dump()); })
      .def("encode", &Pretrained::encode, py::arg("text"))
      .def("encode_pair", &Pretrained::encode_pair, py::arg("text"), py::arg("text_pair"))
      .def("check", &Pretrained::check, py::arg("recorded"), py::arg("ids"), py::arg("token_type_ids"), py::arg("atol"),
           py::arg("rtol"))
      .def("decode", &Pretrained::decode, py::arg("ids"), py::arg("continuation") = false)
      .def("forward", &Pretrained::forward, py::arg("ids"), py::arg("trace"), py::arg("fold_layout_steps") = py::none(),
           py::arg("attention") = "auto", py::arg("logits_to_keep") = 0)
      .def("forward_on_device", &Pretrained::forward_on_device, py::arg("ids"), py::arg("attention") = "auto",
           py::arg("logits_to_keep") = 0)
      .def("encoder_forward_on_device", &Pretrained::encoder_forward_on_device, py::arg("ids"),
           py::arg("token_type_ids"), py::arg("key_padding_mask"))
      .def("encoder_forward", &Pretrained::encoder_forward, py::arg("ids"), py::arg("token_type_ids"),
           py::arg("key_padding_mask"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("masked_lm", &Pretrained::encoder_head<&Bert::masked_lm>, py::arg("ids"), py::arg("token_type_ids"),
           py::arg("key_padding_mask"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("classify", &Pretrained::encoder_head<&Bert::classify>, py::arg("ids"), py::arg("token_type_ids"),
           py::arg("key_padding_mask"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("fill_mask", &Pretrained::fill_mask, py::arg("text"), py::arg("top_k"))
      .def(
          "answer",
          [](Pretrained& p, const std::string& question, const std::string& context, int64_t top_k,
             int64_t max_answer_len, bool align_to_words, bool handle_impossible_answer,
             std::optional<int64_t> max_seq_len, std::optional<int64_t> doc_stride) {
            return p.answer(question, context,
                            {top_k, max_answer_len, align_to_words, handle_impossible_answer, max_seq_len, doc_stride});
          },
          py::arg("question"), py::arg("context"), py::arg("top_k"), py::arg("max_answer_len"),
          py::arg("align_to_words"), py::arg("handle_impossible_answer"), py::arg("max_seq_len"),
          py::arg("doc_stride"))
      .def("generate", &Pretrained::generate, py::arg("prompt"), py::arg("max_new_tokens"), py::arg("temperature"),
           py::arg("top_k"), py::arg("seed"), py::arg("cache_dtype") = "");
}

}  // namespace vkattn::python
