// Backend's pass and what crosses between host and backend: uploads (kept weights too) and
// downloads, the pass's lifecycle and its tracers, scopes, and the preflight that sizes a pass
// before it runs. The step methods are in backend_steps.cpp.
#include "vkattn/backends/backend.h"

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "engine/backends/backend_checks.h"
#include "engine/backends/sizing_backend.h"
#include "engine/vulkan/faults.h"
#include "reference/reference.h"
#include "vkattn/errors.h"

namespace vkattn {

using backend_checks::describe;
using backend_checks::require;

Value Backend::upload(const std::string& name, const Tensor& tensor) { return upload_as(name, tensor, Narrow::none); }

Value Backend::upload_as(const std::string& name, const Tensor& tensor, Narrow as) {
  require(element_count(tensor.shape) == tensor.size(), name, [&] {
    return "tensor data holds " + std::to_string(tensor.size()) + " values but its shape " +
           shape_string(tensor.shape) + " needs " + std::to_string(element_count(tensor.shape));
  });
  require(tensor.size() > 0, name,
          [&] { return "tensor " + shape_string(tensor.shape) + " is empty; every dim must be >= 1"; });
  const std::string scoped_name = scoped(name);
  std::shared_ptr<Storage> storage;
  at_step(scoped_name, [&] { storage = store(scoped_name, tensor, as); });
  uploaded_bytes_ += uint64_t(stored_words(tensor.size(), as)) * sizeof(float);
  report_input(scoped_name, tensor);
  return Value{scoped_name, tensor.shape, tensor.dtype, std::move(storage), as};
}

Value Backend::upload_cache(const std::string& name, const Tensor& contents, Narrow format) {
  if (format == Narrow::none) return upload_as(name, contents, format);
  Tensor rounded = contents;
  for (float& v : rounded.data) v = reference::round_to(v, static_cast<int>(format));
  return upload_as(name, rounded, format);
}

uint64_t Backend::stored_bytes(const Value& value) {
  return uint64_t(stored_words(element_count(value.shape), value.narrow)) * sizeof(float);
}

void Backend::report_input(const std::string& scoped_name, const Tensor& tensor) {
  for (Tracer* tracer : tracers_)
    if (tracer->wants_inputs()) tracer->on_input(scoped_name, tensor);
}

uint64_t new_weights_owner() {
  static std::atomic<uint64_t> last{0};
  return ++last;
}

Value Backend::upload_weight(const std::string& name, const Tensor& tensor) {
  return keep_weight(name, tensor, Narrow::none);
}

Value Backend::upload_matrix(const std::string& name, const Tensor& tensor) {
  return keep_weight(name, tensor, keeps_16bit() ? tensor.narrow : Narrow::none);
}

Value Backend::keep_weight(const std::string& name, const Tensor& tensor, Narrow as) {
  if (!kept_) return upload_as(name, tensor, as);
  auto kept = kept_->values.find(scoped(name));
  if (kept != kept_->values.end() && kept->second.shape == tensor.shape && kept->second.dtype == tensor.dtype &&
      kept->second.narrow == as) {
    report_input(kept->second.name, tensor);  // kept from an earlier pass: this one takes it too
    return kept->second;
  }
  Value value = upload_as(name, tensor, as);
  kept_->values.insert_or_assign(value.name, value);
  return value;
}

uint64_t KeptWeights::bytes() const {
  uint64_t total = 0;
  for (const auto& [name, value] : values) total += Backend::stored_bytes(value);
  return total;
}

KeepWeights::KeepWeights(Backend& backend, KeptWeights* kept, uint64_t owner)
    : backend_(backend),
      kept_(kept),
      previous_(backend.keep_weights_in(kept)),
      exceptions_(std::uncaught_exceptions()) {
  if (kept && kept->owner != owner) *kept = KeptWeights{owner, {}};
}

KeepWeights::~KeepWeights() {
  backend_.keep_weights_in(previous_);
  if (kept_ && std::uncaught_exceptions() > exceptions_) kept_->values.clear();
}

Tensor Backend::download(const Value& value) {
  std::vector<float> data;
  at_step("reading back " + value.name, [&] { data = load(*value.storage, element_count(value.shape)); });
  downloaded_bytes_ += uint64_t(data.size()) * sizeof(float);
  return Tensor(value.shape, std::move(data), value.dtype);
}

void Backend::report_progress(const std::string& step, double done) {
  if (!progress_) return;
  progress_({step, done, std::chrono::duration<double>(Clock::now() - pass_start_).count()});
}

void Backend::at_step(const std::string& where, const std::function<void()>& work) {
  try {
    vulkan::faults::Where marker(where);
    work();
  } catch (const DeviceError& e) {
    if (std::string_view(e.what()).starts_with(where + ": ")) throw;
    throw DeviceError(where + ": " + e.what());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw device_error(where, e);
  }
}

Value view(const Value& value, Shape shape) {
  require(element_count(shape) == element_count(value.shape), value.name, [&] {
    return "cannot view " + describe(value) + " as " + shape_string(shape) + ": the element counts differ";
  });
  Value out = value;
  out.shape = std::move(shape);
  return out;
}

Value Backend::make_output(const std::string& step, Shape shape) {
  int64_t count = element_count(shape);
  std::shared_ptr<Storage> storage;
  at_step(step, [&] { storage = allocate(step, count); });
  return Value{step, std::move(shape), DType::float32, std::move(storage)};
}

void Backend::report(const std::string& step, const char* op, std::vector<TensorInfo> inputs, const Value& output,
                     std::vector<std::string> dims, const Folding& folding) {
  StepEvent event;
  event.index = next_index_++;
  event.name = step;
  event.op = op;
  event.inputs = std::move(inputs);
  if (dims.size() != output.shape.size()) dims.clear();  // a step used outside the recipe's layouts
  event.output = {output.name, output.shape, output.dtype, std::move(dims), folding.stored_as};
  event.folded = folding.note;
  std::optional<Tensor> values;
  if (wants_values()) {
    values = download(folding.reorder ? view(output, folding.stored_as) : output);
    if (folding.reorder) values = folding.reorder(std::move(*values));
    event.values = &*values;
  }
  for (Tracer* tracer : tracers_) tracer->on_step(event);
}

bool Backend::wants_values() const {
  return std::any_of(tracers_.begin(), tracers_.end(), [](Tracer* t) { return t->wants_values(); });
}

void Backend::fold_layout_steps(bool fold) {
  if (fold) throw ConfigError("the " + name() + " backend cannot fold layout steps into their neighbours");
}

void Backend::fold_time() {
  const double now = host_times_.empty() ? 0.0 : host_times_.back().start_us + host_times_.back().duration_us;
  host_times_.push_back({now, 0.0});
  folded_.resize(host_times_.size(), false);
  folded_.back() = true;
}

namespace {

std::string mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace

void check_tensor_fits(const MemoryLimits& limits, const std::string& name, int64_t count) {
  const uint64_t bytes = static_cast<uint64_t>(count) * sizeof(float);
  if (bytes <= limits.max_tensor_bytes) return;
  throw DeviceError(name + " needs " + mib(bytes) + " (" + std::to_string(bytes) + " bytes) in one buffer, " +
                    mib(bytes - limits.max_tensor_bytes) + " over " + limits.max_tensor_limit + " (" +
                    mib(limits.max_tensor_bytes) + ") of '" + limits.device + "'");
}

void Backend::preflight(const std::string& pass, const std::function<void(Backend&)>& recipe) {
  const auto limits = memory_limits();
  if (!limits) return;
  // folding as the pass will: a tracer that wants values keeps the activations apart
  SizingBackend sizing(limits->reuse_from_bytes, limits->gemm_scratch_floats, keeps_16bit(),
                       folds_into_store() && !wants_values());
  sizing.scope_ = scope_;
  recipe(sizing);
  const SizingBackend::SizedTensor* largest = nullptr;
  for (const auto& t : sizing.tensors()) {
    check_tensor_fits(*limits, t.name, t.count);
    if (!largest || t.count > largest->count) largest = &t;
  }
  const uint64_t total = sizing.pass_bytes();
  if (total > limits->max_total_bytes) {
    throw DeviceError(scoped(pass) + " needs " + mib(total) + " of device memory at once, " +
                      mib(total - limits->max_total_bytes) + " over " + limits->max_total_limit + " (" +
                      mib(limits->max_total_bytes) + ") of '" + limits->device + "'; its largest tensor is " +
                      largest->name + " (" + mib(static_cast<uint64_t>(largest->count) * sizeof(float)) + ")");
  }
}

void Backend::push_scope(const std::string& scope) {
  scope_lengths_.push_back(scope_.size());
  scope_ += scope + ".";
}

void Backend::pop_scope() noexcept {
  if (scope_lengths_.empty()) return;
  scope_.resize(scope_lengths_.back());
  scope_lengths_.pop_back();
}

void Backend::add_tracer(Tracer& tracer) { tracers_.push_back(&tracer); }

void Backend::remove_tracer(Tracer& tracer) { std::erase(tracers_, &tracer); }

void Backend::begin_pass(const std::string& pass) {
  std::thread::id none{};
  const std::thread::id me = std::this_thread::get_id();
  if (!pass_thread_.compare_exchange_strong(none, me) && none != me) {
    throw DeviceError("pass " + pass + ": this " + name() + " backend is running a pass on another thread; a backend "
                      "serves one thread at a time: give each thread its own (they may share a device and a module)");
  }
  if (pass_depth_++ > 0) return;  // nested: part of the pass already open
  next_index_ = 0;
  host_times_.clear();
  folded_.clear();
  pass_start_ = Clock::now();
  on_begin_pass(!tracers_.empty());
  for (Tracer* tracer : tracers_) tracer->on_pass(pass, name(), device_name());
}

void Backend::end_pass(const std::optional<std::string>& error) noexcept {
  if (pass_depth_ == 0 || --pass_depth_ > 0) return;  // unbalanced, or a nested pass: the outer one reports
  pass_thread_ = std::thread::id{};
  if (!tracers_.empty()) report_pass_end(error);
  if (error) on_failed_pass();  // after the tracers: the GPU's step times need what was recorded
}

void Backend::report_pass_end(const std::optional<std::string>& error) noexcept {
  PassEnd end{host_times_, "host", error};
  try {
    // the device times the steps that ran; a folded layout step takes none, where it stands
    auto device = device_step_times();
    folded_.resize(host_times_.size(), false);
    const auto ran = static_cast<size_t>(std::count(folded_.begin(), folded_.end(), false));
    if (device && device->size() == ran) {
      end.step_times.clear();
      auto next = device->begin();
      for (bool folded : folded_) {
        const double now = end.step_times.empty() ? 0.0 : end.step_times.back().start_us + end.step_times.back().duration_us;
        end.step_times.push_back(folded ? StepTime{now, 0.0} : *next++);
      }
      end.clock = "gpu";
    }
  } catch (const std::exception&) {
    // A device that cannot even be timed (lost, say) must not hide the error being reported.
  }
  for (Tracer* tracer : tracers_) {
    try {
      tracer->on_pass_end(end);
    } catch (const std::exception&) {
      // One sink failing (a full disk) must not stop the others.
    }
  }
}

}  // namespace vkattn
