// vkattn._vkattn: the engine's public API for the Python package (python/vkattn/ is the thin
// Python layer over it, which converts torch tensors and other dtypes to float32 numpy arrays
// before they reach this file). Arrays come in as C-order float32 (or bool masks) and go out as
// numpy arrays that own the engine's buffers; engine errors become vkattn.ShapeError,
// ConfigError, FileError (ValueError) and DeviceError (RuntimeError) with the engine's message;
// the GIL is released while a backend works.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <variant>

#include "binding.h"
#include "vkattn/vkattn.h"

namespace vkattn::python {
namespace {

// ---- state dicts ---------------------------------------------------------------------------------

// A dict of name -> float32 array (the Python layer converted torch's) as the safetensors
// structure the engine's state_dict readers take: one reader of PyTorch's names, files or not.
io::Safetensors to_state(const std::map<std::string, FloatArray>& state, std::optional<int64_t> num_heads) {
  io::Safetensors file;
  for (const auto& [name, array] : state) file.tensors[name] = to_tensor(array);
  if (num_heads) file.metadata["num_heads"] = std::to_string(*num_heads);
  return file;
}

std::string config_string(const MultiHeadAttentionConfig& c) {
  auto flag = [](bool b) { return b ? "True" : "False"; };
  return "embed_dim=" + std::to_string(c.embed_dim) + ", bias=" + flag(c.bias) + ", add_bias_kv=" +
         flag(c.add_bias_kv) + ", kdim=" + std::to_string(c.key_dim()) + ", vdim=" + std::to_string(c.value_dim());
}

// ---- modules ---------------------------------------------------------------------------------------

// An attention's inputs as the engine takes them. Self-attention passes one array (key and value
// None): it is uploaded once, and may be packed, as in the CLI.
struct Inputs {
  Tensor query;
  std::optional<Tensor> key_tensor, value_tensor;
  ForwardOptions options;  // the masks and is_causal
  const Tensor& key() const { return key_tensor ? *key_tensor : query; }
  const Tensor& value() const { return value_tensor ? *value_tensor : key(); }
};

Inputs inputs(const FloatArray& query, const std::optional<FloatArray>& key, const std::optional<FloatArray>& value,
              const std::optional<py::array>& key_padding_mask, const std::optional<py::array>& attn_mask,
              bool is_causal) {
  Inputs in{to_tensor(query), std::nullopt, std::nullopt, {}};
  if (key) in.key_tensor = to_tensor(*key);
  if (value) in.value_tensor = to_tensor(*value);
  in.options.key_padding_mask = to_mask(key_padding_mask);
  in.options.attn_mask = to_mask(attn_mask);
  in.options.is_causal = is_causal;
  return in;
}

class Attention {
 public:
  // The weights stay on the device from the first forward on, as a torch module's after
  // .to(device); load_state_dict sends the new ones at the next. So do every module's here.
  Attention(MultiHeadAttentionConfig config, const std::string& kind, const std::string& selector)
      : module_(config), device_(open_device(kind, selector)) {
    module_.keep_weights_on(*device_->backend);
  }
  // The module a state_dict describes (embed_dim, bias, add_bias_kv, kdim and vdim from its tensors).
  Attention(const std::map<std::string, FloatArray>& state, std::optional<int64_t> num_heads, bool batch_first,
            bool add_zero_attn, const std::string& kind, const std::string& selector)
      : module_(loaded(state, num_heads, batch_first, add_zero_attn)), device_(open_device(kind, selector)) {
    module_.keep_weights_on(*device_->backend);
  }

  std::string device() const { return device_label(*device_); }
  const MultiHeadAttentionConfig& config() const { return module_.config(); }

  void load_state_dict(const std::map<std::string, FloatArray>& state) {
    auto loaded = io::attention_from_state_dict(to_state(state, module_.config().num_heads), 0, "state_dict");
    MultiHeadAttentionConfig mine = module_.config(), theirs = loaded.config;
    theirs.batch_first = mine.batch_first;
    theirs.add_zero_attn = mine.add_zero_attn;
    if (config_string(mine) != config_string(theirs)) {
      throw ConfigError("state_dict: its tensors are those of a module with " + config_string(theirs) +
                        "; this one was made with " + config_string(mine));
    }
    module_.set_weights(std::move(loaded.weights));
  }

  py::dict state_dict() const {
    py::dict d;
    for (auto& [name, tensor] : io::attention_state_dict(module_.config(), module_.weights())) {
      d[name.c_str()] = to_array(std::move(tensor));
    }
    return d;
  }

  py::tuple forward(const FloatArray& query, const std::optional<FloatArray>& key, const std::optional<FloatArray>& value,
                    const std::optional<py::array>& key_padding_mask, bool need_weights,
                    const std::optional<py::array>& attn_mask, bool average_attn_weights, bool is_causal,
                    const std::string& attention, bool trace, std::optional<bool> fold_layout_steps) {
    Inputs in = inputs(query, key, value, key_padding_mask, attn_mask, is_causal);
    ForwardOptions& o = in.options;
    o.need_weights = need_weights;
    o.average_attn_weights = average_attn_weights;
    o.attention = parse_attention_path(attention);
    // automatic: the path this device takes (a tuning GPU may prefer the unfused steps), fixed
    // here so that the trace names it and a side-by-side reference can take it too
    o.attention = on_device(*device_, [&](Backend& backend) { return module_.path(backend, in.query, in.key(), o); });
    auto run = [&](Backend& backend) { return module_.forward(backend, in.query, in.key(), in.value(), o); };
    auto pack = [](AttentionResult r) {
      return py::make_tuple(to_array(std::move(r.output)), r.weights ? py::object(to_array(std::move(*r.weights))) : py::none());
    };
    if (!trace) return pack(on_device(*device_, run));
    const auto& c = module_.config();
    nlohmann::json config = {{"module", "nn.MultiheadAttention"}, {"embed_dim", c.embed_dim},
                             {"num_heads", c.num_heads}, {"bias", c.bias}, {"add_bias_kv", c.add_bias_kv},
                             {"add_zero_attn", c.add_zero_attn}, {"kdim", c.key_dim()}, {"vdim", c.value_dim()},
                             {"batch_first", c.batch_first}, {"is_causal", is_causal}, {"need_weights", need_weights},
                             {"average_attn_weights", average_attn_weights},
                             {"attention", attention_path_name(o.attention)}};
    auto [result, recorded] = traced(*device_, config, run, fold_layout_steps);
    py::tuple out = pack(std::move(result));
    return py::make_tuple(out[0], out[1], recorded);
  }

  // forward() on tensors already on this module's device (vkattn.DeviceTensor), its results left
  // there, as torch's forward on CUDA tensors: query (B, L, E) or (L, E), key (B, S, kdim) and
  // value (B, S, vdim) likewise. Batch-first only: (L, B, E) would need a transposing step first.
  py::tuple forward_on_device(const DeviceTensor& query, const DeviceTensor& key, const DeviceTensor& value,
                              const std::optional<py::array>& key_padding_mask, bool need_weights,
                              const std::optional<py::array>& attn_mask, bool average_attn_weights, bool is_causal,
                              const std::string& attention) {
    const Value& q = on_same_device(query, "query", *device_).value;
    const Value& k = on_same_device(key, "key", *device_).value;
    const Value& v = on_same_device(value, "value", *device_).value;
    if (q.rank() != k.rank() || q.rank() != v.rank() || q.rank() < 2 || q.rank() > 3) {
      throw ShapeError("forward: query " + shape_string(q.shape) + ", key " + shape_string(k.shape) + " and value " +
                       shape_string(v.shape) + " must all be batched (B, L, E) or all unbatched (L, E)");
    }
    const bool batched = q.rank() == 3;
    if (batched && !module_.config().batch_first) {
      throw ConfigError("forward: device tensors are batch-first (B, L, E), and this module was made with "
                        "batch_first=False; make it with batch_first=True");
    }
    ForwardOptions o;
    o.key_padding_mask = to_mask(key_padding_mask);
    o.attn_mask = to_mask(attn_mask);
    o.is_causal = is_causal;
    o.need_weights = need_weights;
    o.average_attn_weights = average_attn_weights;
    o.attention = parse_attention_path(attention);
    auto batch = [&](const Value& x) { return batched ? x : view(x, {1, x.dim(0), x.dim(1)}); };
    if (!batched && o.key_padding_mask && o.key_padding_mask->rank() == 1) {
      o.key_padding_mask->shape.insert(o.key_padding_mask->shape.begin(), 1);  // (S,) -> (1, S)
    }
    AttentionValues out = on_device(*device_, [&](Backend& backend) {
      return module_.forward(backend, batch(q), batch(k), batch(v), o);  // views: one tensor stays one
    });
    auto unbatch = [&](const Value& x) {  // (1, ...) -> (...)
      return batched ? x : view(x, Shape(x.shape.begin() + 1, x.shape.end()));
    };
    py::object weights = py::none();
    if (out.weights) weights = py::cast(DeviceTensor{device_, unbatch(*out.weights)});
    return py::make_tuple(DeviceTensor{device_, unbatch(out.output)}, weights);
  }

  CheckReport check(const std::vector<std::pair<std::string, FloatArray>>& recorded, const FloatArray& query,
                    const std::optional<FloatArray>& key, const std::optional<FloatArray>& value,
                    const std::optional<py::array>& key_padding_mask, const std::optional<py::array>& attn_mask,
                    bool is_causal, double atol, double rtol) {
    std::vector<std::pair<std::string, Tensor>> yours;
    for (const auto& [name, array] : recorded) yours.emplace_back(name, to_tensor(array));
    Inputs in = inputs(query, key, value, key_padding_mask, attn_mask, is_causal);
    return on_device(*device_, [&](Backend& backend) {
      return check_attention(yours, module_, backend, in.query, in.key(), in.value(), in.options, {atol, rtol});
    });
  }

 private:
  static MultiHeadAttention loaded(const std::map<std::string, FloatArray>& state, std::optional<int64_t> num_heads,
                                   bool batch_first, bool add_zero_attn) {
    if (!num_heads) throw ConfigError("state_dict: num_heads is not in a state_dict; give num_heads=");
    auto l = io::attention_from_state_dict(to_state(state, num_heads), 0, "state_dict");
    l.config.batch_first = batch_first;
    l.config.add_zero_attn = add_zero_attn;
    return MultiHeadAttention(l.config, std::move(l.weights));
  }

  MultiHeadAttention module_;
  std::shared_ptr<Device> device_;
};

// A grouped-query attention (Llama's), from a state_dict under Hugging Face's names.
class GroupedQuery {
 public:
  GroupedQuery(const std::map<std::string, FloatArray>& state, int64_t num_heads, int64_t num_kv_heads,
               const std::string& rope, double rope_theta, int64_t rotary_dims, bool causal, int64_t sliding_window,
               const std::string& kind, const std::string& selector)
      : module_(loaded(state, num_heads, num_kv_heads, rope, rope_theta, rotary_dims, causal, sliding_window)),
        device_(open_device(kind, selector)) {
    module_.keep_weights_on(*device_->backend);  // as Attention's
  }

  std::string device() const { return device_label(*device_); }

  nlohmann::json config() const {
    const auto& c = module_.config();
    return {{"module", "grouped-query attention"}, {"hidden_size", c.hidden_size}, {"num_heads", c.num_heads},
            {"num_kv_heads", c.kv_heads()}, {"head_dim", c.dim()}, {"attention_bias", c.attention_bias},
            {"o_proj_bias", c.o_proj_bias}, {"rope", c.rope == RotaryConvention::half ? "half" : "pairs"},
            {"rope_theta", c.rope_theta}, {"rotary_dims", c.rotary_dims ? c.rotary_dims : c.dim()},
            {"causal", c.causal}, {"sliding_window", c.sliding_window}, {"qk_norm", c.qk_norm}};
  }

  py::tuple forward(const FloatArray& x, const std::optional<py::array>& key_padding_mask, bool need_weights,
                    bool average_attn_weights, const std::string& attention, int64_t position, bool trace,
                    std::optional<bool> fold_layout_steps) {
    const Tensor input = to_tensor(x);
    GroupedQueryOptions o{to_mask(key_padding_mask), parse_attention_path(attention), need_weights,
                          average_attn_weights, position};
    auto run = [&](Backend& backend) { return module_.forward(backend, input, o); };
    auto pack = [](AttentionResult r) {
      return py::make_tuple(to_array(std::move(r.output)), r.weights ? py::object(to_array(std::move(*r.weights))) : py::none());
    };
    if (!trace) return pack(on_device(*device_, run));
    auto [result, recorded] = traced(*device_, config(), run, fold_layout_steps);
    py::tuple out = pack(std::move(result));
    return py::make_tuple(out[0], out[1], recorded);
  }

  // forward() on x already on this module's device, (B, T, E) or (T, E), its output and weights
  // left there.
  py::tuple forward_on_device(const DeviceTensor& x, const std::optional<py::array>& key_padding_mask,
                              bool need_weights, bool average_attn_weights, const std::string& attention,
                              int64_t position) {
    const Value& input = on_same_device(x, "x", *device_).value;
    GroupedQueryOptions o{to_mask(key_padding_mask), parse_attention_path(attention), need_weights,
                          average_attn_weights, position};
    AttentionValues out = on_device(*device_, [&](Backend& backend) { return module_.forward(backend, input, o); });
    py::object weights = py::none();
    if (out.weights) weights = py::cast(DeviceTensor{device_, std::move(*out.weights)});
    return py::make_tuple(DeviceTensor{device_, std::move(out.output)}, weights);
  }

  CheckReport check(const std::vector<std::pair<std::string, FloatArray>>& recorded, const FloatArray& x,
                    const std::optional<py::array>& key_padding_mask, int64_t position, double atol, double rtol) {
    std::vector<std::pair<std::string, Tensor>> yours;
    for (const auto& [name, array] : recorded) yours.emplace_back(name, to_tensor(array));
    const Tensor input = to_tensor(x);
    GroupedQueryOptions o;
    o.key_padding_mask = to_mask(key_padding_mask);
    o.position = position;
    return on_device(*device_, [&](Backend& backend) {
      return check_grouped_query(yours, module_, backend, input, o, {atol, rtol});
    });
  }

 private:
  static GroupedQueryAttention loaded(const std::map<std::string, FloatArray>& state, int64_t num_heads,
                                      int64_t num_kv_heads, const std::string& rope, double rope_theta,
                                      int64_t rotary_dims, bool causal, int64_t sliding_window) {
    GroupedQueryAttentionConfig config;
    config.num_heads = num_heads;
    config.num_kv_heads = num_kv_heads;
    config.rope = parse_rotary_convention(rope);
    config.rope_theta = static_cast<float>(rope_theta);
    config.rotary_dims = rotary_dims;
    config.causal = causal;
    config.sliding_window = sliding_window;
    auto l = io::grouped_query_from_state_dict(to_state(state, std::nullopt), config, "state_dict");
    return GroupedQueryAttention(l.config, std::move(l.weights));
  }

  GroupedQueryAttention module_;
  std::shared_ptr<Device> device_;
};

// A layer, or a stack of them, of an encoder or a decoder (nn.Transformer{Encoder,Decoder}[Layer])
// from a state_dict under PyTorch's names (io's EncoderState or DecoderState), its weights kept on
// its device.
template <class Layer, class Whole>
class Stack {
 public:
  template <class State>
  Stack(State loaded, const std::string& what, const std::string& activation, bool norm_first, double eps,
        const std::string& kind, const std::string& selector)
      : device_(open_device(kind, selector)) {
    auto& layer = loaded.config.layer;
    const auto parsed = activation_from_name(activation);
    if (!parsed) throw ConfigError("activation '" + activation + "' is not relu, gelu or gelu_tanh");
    layer.activation = *parsed;
    layer.norm_first = norm_first;
    layer.layer_norm_eps = static_cast<float>(eps);
    config_ = {{"module", "nn.Transformer" + what + (loaded.single_layer ? "Layer" : "")},
               {"d_model", layer.d_model}, {"nhead", layer.nhead}, {"dim_feedforward", layer.dim_feedforward},
               {"activation", activation}, {"norm_first", norm_first}, {"layer_norm_eps", eps},
               {"num_layers", loaded.config.num_layers}, {"final_norm", loaded.config.final_norm}};
    if (loaded.single_layer) {
      module_.template emplace<Layer>(layer, std::move(loaded.weights.layers.front()))
          .keep_weights_on(*device_->backend);  // as Attention's
    } else {
      module_.template emplace<Whole>(loaded.config, std::move(loaded.weights)).keep_weights_on(*device_->backend);
    }
  }

  std::string device() const { return device_label(*device_); }

 protected:
  // `f` on the layer or the stack loaded (the variant starts empty: neither has a default)
  template <class R, class F>
  R on_module(F f) const {
    return std::visit([&](const auto& m) -> R {
      if constexpr (std::is_same_v<std::decay_t<decltype(m)>, std::monostate>) {
        throw ConfigError("not loaded");
      } else {
        return f(m);
      }
    }, module_);
  }

  static std::vector<std::pair<std::string, Tensor>> tensors(
      const std::vector<std::pair<std::string, FloatArray>>& recorded) {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const auto& [name, array] : recorded) out.emplace_back(name, to_tensor(array));
    return out;
  }

  std::shared_ptr<Device> device_;
  nlohmann::json config_;
  std::variant<std::monostate, Layer, Whole> module_;
};

// nn.TransformerEncoderLayer or nn.TransformerEncoder.
class Encoder : public Stack<TransformerEncoderLayer, TransformerEncoder> {
 public:
  Encoder(const std::map<std::string, FloatArray>& state, int64_t nhead, const std::string& activation,
          bool norm_first, double eps, const std::string& kind, const std::string& selector)
      : Stack(io::encoder_from_state_dict(to_state(state, nhead), 0, "state_dict"), "Encoder", activation,
              norm_first, eps, kind, selector) {}

  py::object forward(const FloatArray& src, const std::optional<py::array>& mask,
                     const std::optional<py::array>& src_key_padding_mask, bool is_causal,
                     const std::string& attention, bool trace, std::optional<bool> fold_layout_steps) {
    Tensor x = to_tensor(src);
    EncoderOptions o = options(mask, src_key_padding_mask, is_causal);
    o.attention = parse_attention_path(attention);
    auto run = [&](Backend& backend) {
      return on_module<Tensor>([&](const auto& m) { return m.forward(backend, x, o); });
    };
    if (!trace) return to_array(on_device(*device_, run));
    auto [result, recorded] = traced(*device_, config_, run, fold_layout_steps);
    return py::make_tuple(to_array(std::move(result)), recorded);
  }

  // forward() on src already on this module's device, (B, L, E) or (L, E), its result left there.
  DeviceTensor forward_on_device(const DeviceTensor& src, const std::optional<py::array>& mask,
                                 const std::optional<py::array>& src_key_padding_mask, bool is_causal,
                                 const std::string& attention) {
    const Value& x = on_same_device(src, "src", *device_).value;
    EncoderOptions o = options(mask, src_key_padding_mask, is_causal);
    o.attention = parse_attention_path(attention);
    Value y = on_device(*device_, [&](Backend& backend) {
      return on_module<Value>([&](const auto& m) { return m.forward(backend, x, o); });
    });
    return {device_, std::move(y)};
  }

  CheckReport check(const std::vector<std::pair<std::string, FloatArray>>& recorded, const FloatArray& src,
                    const std::optional<py::array>& mask, const std::optional<py::array>& src_key_padding_mask,
                    bool is_causal, double atol, double rtol) {
    const auto yours = tensors(recorded);
    const Tensor x = to_tensor(src);
    const EncoderOptions o = options(mask, src_key_padding_mask, is_causal);
    return on_device(*device_, [&](Backend& backend) {
      return on_module<CheckReport>(
          [&](const auto& m) { return check_encoder(yours, m, backend, x, o, {atol, rtol}); });
    });
  }

 private:
  static EncoderOptions options(const std::optional<py::array>& mask,
                                const std::optional<py::array>& src_key_padding_mask, bool is_causal) {
    EncoderOptions o;
    o.mask = to_mask(mask);
    o.src_key_padding_mask = to_mask(src_key_padding_mask);
    o.is_causal = is_causal;
    return o;
  }
};

// nn.TransformerDecoderLayer or nn.TransformerDecoder: the target attends to itself, then to the
// memory.
class Decoder : public Stack<TransformerDecoderLayer, TransformerDecoder> {
 public:
  Decoder(const std::map<std::string, FloatArray>& state, int64_t nhead, const std::string& activation,
          bool norm_first, double eps, const std::string& kind, const std::string& selector)
      : Stack(io::decoder_from_state_dict(to_state(state, nhead), 0, "state_dict"), "Decoder", activation,
              norm_first, eps, kind, selector) {}

  // The masks: tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask.
  using Masks = std::array<std::optional<py::array>, 4>;

  py::object forward(const FloatArray& tgt, const FloatArray& memory, const Masks& masks, bool tgt_is_causal,
                     const std::string& attention, bool trace, std::optional<bool> fold_layout_steps) {
    const Tensor t = to_tensor(tgt), m = to_tensor(memory);
    DecoderOptions o = options(masks, tgt_is_causal);
    o.attention = parse_attention_path(attention);
    auto run = [&](Backend& backend) {
      return on_module<Tensor>([&](const auto& module) { return module.forward(backend, t, m, o); });
    };
    if (!trace) return to_array(on_device(*device_, run));
    auto [result, recorded] = traced(*device_, config_, run, fold_layout_steps);
    return py::make_tuple(to_array(std::move(result)), recorded);
  }

  // forward() on tgt and memory already on this module's device, batch-first or unbatched (an
  // encoder's output for memory), its result left there.
  DeviceTensor forward_on_device(const DeviceTensor& tgt, const DeviceTensor& memory, const Masks& masks,
                                 bool tgt_is_causal, const std::string& attention) {
    const Value& t = on_same_device(tgt, "tgt", *device_).value;
    const Value& m = on_same_device(memory, "memory", *device_).value;
    DecoderOptions o = options(masks, tgt_is_causal);
    o.attention = parse_attention_path(attention);
    Value y = on_device(*device_, [&](Backend& backend) {
      return on_module<Value>([&](const auto& module) { return module.forward(backend, t, m, o); });
    });
    return {device_, std::move(y)};
  }

  CheckReport check(const std::vector<std::pair<std::string, FloatArray>>& recorded, const FloatArray& tgt,
                    const FloatArray& memory, const Masks& masks, bool tgt_is_causal, double atol, double rtol) {
    const auto yours = tensors(recorded);
    const Tensor t = to_tensor(tgt), m = to_tensor(memory);
    const DecoderOptions o = options(masks, tgt_is_causal);
    return on_device(*device_, [&](Backend& backend) {
      return on_module<CheckReport>(
          [&](const auto& module) { return check_decoder(yours, module, backend, t, m, o, {atol, rtol}); });
    });
  }

 private:
  static DecoderOptions options(const Masks& masks, bool tgt_is_causal) {
    DecoderOptions o;
    o.tgt_mask = to_mask(masks[0]);
    o.memory_mask = to_mask(masks[1]);
    o.tgt_key_padding_mask = to_mask(masks[2]);
    o.memory_key_padding_mask = to_mask(masks[3]);
    o.tgt_is_causal = tgt_is_causal;
    return o;
  }
};

py::list device_list() {
  py::list out;
  for (const auto& d : devices()) {
    py::dict row;
    row["index"] = d.index;
    row["name"] = d.name;
    row["type"] = d.type;
    row["driver"] = d.driver;
    row["memory_bytes"] = d.memory_bytes;
    row["usable"] = d.usable;
    row["unusable_because"] = d.unusable_because;
    row["chosen"] = d.chosen;
    out.append(row);
  }
  return out;
}

py::dict step_check_dict(const StepCheck& s) {
  py::dict d;
  d["index"] = s.index;
  d["name"] = s.name;
  d["op"] = s.op;
  d["shape"] = py::tuple(py::cast(s.shape));
  d["dims"] = py::tuple(py::cast(s.dims));
  d["yours"] = s.yours ? py::object(py::tuple(py::cast(*s.yours))) : py::none();
  d["verdict"] = s.verdict == StepVerdict::agrees ? "agrees" : s.verdict == StepVerdict::differs ? "differs" : "not recorded";
  d["max_abs_error"] = s.diff ? py::cast(s.diff->max_abs_error) : py::none();
  d["mismatches"] = s.diff ? py::cast(s.diff->mismatches) : py::none();
  d["where"] = s.where;
  d["yours_value"] = s.diff && s.diff->mismatches ? py::cast(s.diff->a_value) : py::none();
  d["vkattn_value"] = s.diff && s.diff->mismatches ? py::cast(s.diff->b_value) : py::none();
  d["diagnosis"] = s.diagnosis;
  d["diagnoses"] = py::list(py::cast(s.diagnoses));
  return d;
}

}  // namespace
}  // namespace vkattn::python

PYBIND11_MODULE(_vkattn, m) {
  using namespace vkattn;
  using namespace vkattn::python;
  m.doc() = "vkattn's engine: multi-head attention as GLSL compute shaders on any Vulkan device";
  m.attr("__version__") = VKATTN_VERSION_STRING;

  // vkattn.Error is the base of all; ShapeError, ConfigError and FileError are also ValueError,
  // DeviceError is also RuntimeError, so `except ValueError` catches bad input as Python expects.
  static py::exception<Error> error(m, "Error", PyExc_Exception);
  static py::exception<ShapeError> shape_error(m, "ShapeError", py::make_tuple(error, py::handle(PyExc_ValueError)));
  static py::exception<ConfigError> config_error(m, "ConfigError", py::make_tuple(error, py::handle(PyExc_ValueError)));
  static py::exception<FileError> file_error(m, "FileError", py::make_tuple(error, py::handle(PyExc_ValueError)));
  static py::exception<DeviceError> device_error(m, "DeviceError", py::make_tuple(error, py::handle(PyExc_RuntimeError)));
  // PyErr_SetString, not the exceptions' call operator: pybind11 2.12 deprecated that for
  // py::set_error, which Debian 12's 2.10 lacks.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const ShapeError& e) {
      PyErr_SetString(shape_error.ptr(), e.what());
    } catch (const ConfigError& e) {
      PyErr_SetString(config_error.ptr(), e.what());
    } catch (const FileError& e) {
      PyErr_SetString(file_error.ptr(), e.what());
    } catch (const DeviceError& e) {
      PyErr_SetString(device_error.ptr(), e.what());
    } catch (const Interrupted& e) {
      PyErr_SetString(PyExc_KeyboardInterrupt, e.what());
    } catch (const Error& e) {
      PyErr_SetString(error.ptr(), e.what());
    }
  });

  m.def("_diagnoses", [] {
    py::dict out;  // id -> (steps, mistake, culprit, fix), in the catalogue's order
    for (const Diagnosis& d : diagnoses()) out[py::str(std::string(d.id))] = py::make_tuple(d.steps, d.mistake, d.culprit, d.fix);
    return out;
  });
  m.def("devices", &device_list, "every Vulkan device: index, name, type, driver, memory, usable, chosen");
  m.def("_release_devices", &release_devices);

  py::class_<Trace, std::shared_ptr<Trace>>(m, "_Trace")
      .def_property_readonly("backend", [](const Trace& t) { return t.steps.backend(); })
      .def_property_readonly("device", [](const Trace& t) { return t.steps.device(); })
      .def_property_readonly("clock", [](const Trace& t) { return t.steps.pass_end().clock; })
      .def_property_readonly("error", [](const Trace& t) { return t.steps.pass_end().error; })
      .def_property_readonly("config", [](const Trace& t) { return t.config.dump(); })
      .def("steps", &step_dicts)
      .def("table", &trace_table, py::arg("values") = false)
      .def("dump", &trace_dump, py::arg("dir"), py::arg("values") = true);
  m.def("_side_by_side", [](const Trace& tested, const Trace& reference, double atol, double rtol, bool values) {
    SideBySide table(tested.steps, reference.steps, atol, rtol);
    std::ostringstream out;
    table.print(out, values);
    return out.str();
  });
  m.def("_report", [](const Trace& pass, const Trace* against, const std::string& pass_label,
                      const std::string& against_label, const std::string& title, double atol, double rtol) {
    ReportSection section{.title = pass.steps.pass(), .pass = &pass.steps, .pass_label = pass_label};
    if (against) section.against = &against->steps, section.against_label = against_label;
    py::gil_scoped_release release;
    return report_html({section}, {.title = title, .atol = atol, .rtol = rtol});
  });
  m.def("load_trace", [](const std::filesystem::path& dir) {
    auto t = std::make_shared<Trace>();
    t->steps = load_trace(dir);
    return t;
  });

  bind_device_tensors(m);

  py::class_<Attention>(m, "_Attention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, bool bias, bool add_bias_kv, bool add_zero_attn,
                       int64_t kdim, int64_t vdim, bool batch_first, const std::string& kind, const std::string& selector) {
             MultiHeadAttentionConfig c{embed_dim, num_heads, bias, add_bias_kv, add_zero_attn, kdim, vdim, batch_first};
             return std::make_unique<Attention>(c, kind, selector);
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("bias"), py::arg("add_bias_kv"), py::arg("add_zero_attn"),
           py::arg("kdim"), py::arg("vdim"), py::arg("batch_first"), py::arg("kind"), py::arg("selector"))
      .def(py::init<const std::map<std::string, FloatArray>&, std::optional<int64_t>, bool, bool, const std::string&,
                    const std::string&>(),
           py::arg("state"), py::arg("num_heads"), py::arg("batch_first"), py::arg("add_zero_attn"), py::arg("kind"),
           py::arg("selector"))
      .def_property_readonly("device", &Attention::device)
      .def_property_readonly("config", [](const Attention& a) {
        const auto& c = a.config();
        py::dict d;
        d["embed_dim"] = c.embed_dim;
        d["num_heads"] = c.num_heads;
        d["bias"] = c.bias;
        d["add_bias_kv"] = c.add_bias_kv;
        d["add_zero_attn"] = c.add_zero_attn;
        d["kdim"] = c.key_dim();
        d["vdim"] = c.value_dim();
        d["batch_first"] = c.batch_first;
        return d;
      })
      .def("load_state_dict", &Attention::load_state_dict)
      .def("state_dict", &Attention::state_dict)
      .def("forward", &Attention::forward, py::arg("query"), py::arg("key"), py::arg("value"),
           py::arg("key_padding_mask"), py::arg("need_weights"), py::arg("attn_mask"), py::arg("average_attn_weights"),
           py::arg("is_causal"), py::arg("attention"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("forward_on_device", &Attention::forward_on_device, py::arg("query"), py::arg("key"), py::arg("value"),
           py::arg("key_padding_mask"), py::arg("need_weights"), py::arg("attn_mask"), py::arg("average_attn_weights"),
           py::arg("is_causal"), py::arg("attention"))
      .def("check", &Attention::check, py::arg("recorded"), py::arg("query"), py::arg("key"), py::arg("value"),
           py::arg("key_padding_mask"), py::arg("attn_mask"), py::arg("is_causal"), py::arg("atol"), py::arg("rtol"));

  py::class_<GroupedQuery>(m, "_GroupedQuery")
      .def(py::init<const std::map<std::string, FloatArray>&, int64_t, int64_t, const std::string&, double, int64_t,
                    bool, int64_t, const std::string&, const std::string&>())
      .def_property_readonly("device", &GroupedQuery::device)
      .def_property_readonly("config", [](const GroupedQuery& g) { return py::module_::import("json").attr("loads")(g.config().dump()); })
      .def("forward", &GroupedQuery::forward, py::arg("x"), py::arg("key_padding_mask"), py::arg("need_weights"),
           py::arg("average_attn_weights"), py::arg("attention"), py::arg("position"), py::arg("trace"),
           py::arg("fold_layout_steps") = py::none())
      .def("forward_on_device", &GroupedQuery::forward_on_device, py::arg("x"), py::arg("key_padding_mask"),
           py::arg("need_weights"), py::arg("average_attn_weights"), py::arg("attention"), py::arg("position"))
      .def("check", &GroupedQuery::check, py::arg("recorded"), py::arg("x"), py::arg("key_padding_mask"),
           py::arg("position"), py::arg("atol"), py::arg("rtol"));
  py::class_<Encoder>(m, "_Encoder")
      .def(py::init<const std::map<std::string, FloatArray>&, int64_t, const std::string&, bool, double,
                    const std::string&, const std::string&>(),
           py::arg("state"), py::arg("nhead"), py::arg("activation"), py::arg("norm_first"), py::arg("eps"),
           py::arg("kind"), py::arg("selector"))
      .def_property_readonly("device", [](const Encoder& e) { return e.device(); })
      .def("forward", &Encoder::forward, py::arg("src"), py::arg("mask"), py::arg("src_key_padding_mask"),
           py::arg("is_causal"), py::arg("attention"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("forward_on_device", &Encoder::forward_on_device, py::arg("src"), py::arg("mask"),
           py::arg("src_key_padding_mask"), py::arg("is_causal"), py::arg("attention"))
      .def("check", &Encoder::check, py::arg("recorded"), py::arg("src"), py::arg("mask"),
           py::arg("src_key_padding_mask"), py::arg("is_causal"), py::arg("atol"), py::arg("rtol"));

  py::class_<Decoder>(m, "_Decoder")
      .def(py::init<const std::map<std::string, FloatArray>&, int64_t, const std::string&, bool, double,
                    const std::string&, const std::string&>(),
           py::arg("state"), py::arg("nhead"), py::arg("activation"), py::arg("norm_first"), py::arg("eps"),
           py::arg("kind"), py::arg("selector"))
      .def_property_readonly("device", [](const Decoder& d) { return d.device(); })
      .def("forward", &Decoder::forward, py::arg("tgt"), py::arg("memory"), py::arg("masks"),
           py::arg("tgt_is_causal"), py::arg("attention"), py::arg("trace"), py::arg("fold_layout_steps") = py::none())
      .def("forward_on_device", &Decoder::forward_on_device, py::arg("tgt"), py::arg("memory"), py::arg("masks"),
           py::arg("tgt_is_causal"), py::arg("attention"))
      .def("check", &Decoder::check, py::arg("recorded"), py::arg("tgt"), py::arg("memory"), py::arg("masks"),
           py::arg("tgt_is_causal"), py::arg("atol"), py::arg("rtol"));

  bind_pretrained(m);

  py::class_<CheckReport>(m, "_CheckReport")
      .def_property_readonly("ok", &CheckReport::ok)
      .def_property_readonly("backend", [](const CheckReport& r) { return r.backend; })
      .def_property_readonly("device", [](const CheckReport& r) { return r.device; })
      .def_property_readonly("first_divergent", [](const CheckReport& r) { return r.first_divergent; })
      .def_property_readonly("unknown", [](const CheckReport& r) { return r.unknown; })
      .def_property_readonly("steps", [](const CheckReport& r) {
        py::list out;
        for (const auto& s : r.steps) out.append(step_check_dict(s));
        return out;
      })
      .def("text", &CheckReport::text);

  m.def("heatmap_svg", [](const FloatArray& plane, const std::string& title, const std::string& rows,
                          const std::string& cols) { return io::heatmap_svg(to_tensor(plane), {title, rows, cols}); },
        py::arg("plane"), py::arg("title"), py::arg("rows") = "query position i", py::arg("cols") = "key position j");
}
