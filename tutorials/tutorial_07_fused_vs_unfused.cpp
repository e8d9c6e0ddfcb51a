// Lesson 07: the same attention step by step and fused: their agreement, their time, their memory.
//
// "How to implement self-attention in PyTorch" ends by timing its hand-written MultiHeadAttention
// against the built-in one and credits fused kernels for the difference. Here the two paths are
// vkattn's own: unfused, four steps (attention_scores, attention_mask, softmax, attention_values)
// that each write a (B, H, L, S) tensor; fused, one flash_attention step that walks the keys of
// each query row with an online softmax and never stores a score. They agree to rounding. The
// fused path needs memory that grows with L, the unfused with L²; which is faster depends on the
// kernels and the device, and the numbers below are measured, not assumed. Last, the layout
// steps around the heads (split_heads, merge_heads): copies in the recipe, and no copies at all
// where the GPU folds them into the projections' stores and loads, as engines do.
//
// Run: build/bin/tutorial_07_fused_vs_unfused [--images DIR] [--device D]
#include <chrono>
#include <iomanip>
#include <sstream>
#include <tuple>

#include "tutorials/lesson.h"
#include "vkattn/backends/vulkan_backend.h"
#include "vkattn/modules/multi_head_attention.h"
#include "vkattn/tracing/compare.h"

using namespace vkattn;

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 07: fused (flash_attention) against unfused attention: agreement, time, memory", [](tutorial::Lesson& lesson) {
    const int64_t E = 64, H = 4;
    const MultiHeadAttentionConfig config{.embed_dim = E, .num_heads = H, .batch_first = true};
    const MultiHeadAttention mha(config, MultiHeadAttentionWeights::random(config, 1));
    ForwardOptions unfused, fused;
    unfused.need_weights = fused.need_weights = false;  // the fused path never holds the weights
    unfused.is_causal = fused.is_causal = true;
    unfused.attention = AttentionPath::unfused;  // without weights the module would pick: fused, or
                                                 // what tuning measured faster (docs/tuning.md)
    fused.attention = AttentionPath::fused;

    // ---- 1: the same forward, both ways, on both backends ----
    Tensor x = random_tensor({2, 17, E}, 2);
    Tensor padding({2, 17});
    for (int64_t j = 13; j < 17; ++j) padding.at({1, j}) = 1.0f;  // sequence 1 is 13 tokens long
    padding.dtype = DType::boolean;
    unfused.key_padding_mask = fused.key_padding_mask = padding;
    lesson.say(
        "Causal self-attention with key padding on x (2, 17, 64), 4 heads: first the unfused steps (0-11), "
        "then the fused path (12-20), where flash_attention takes Q, K, V and the masks and returns (B, H, L, d).");
    auto [both, both_cpu] = lesson.part("unfused, then fused", [&](Backend& b) {
      return std::pair{mha.forward(b, x, unfused).output, mha.forward(b, x, fused).output};
    }, {{"q_proj", "q = self.W_q(x): (B, L, E), as in lesson 04"},
        {"split_heads_q", "q.view(B, L, H, d).transpose(1, 2): 4 heads of d = 16 (the GPU folds it into "
                          "q_proj: part 3)"},
        {"k_proj", "k = self.W_k(x)"}, {"split_heads_k", "the same split for k"},
        {"v_proj", "v = self.W_v(x)"}, {"split_heads_v", "and for v"},
        {"attention_scores", "q @ k.transpose(-2, -1) / math.sqrt(16): a (B, H, L, L) tensor, written out"},
        {"attention_mask", "masked_fill with the causal mask and key_padding_mask: a second (B, H, L, L)"},
        {"softmax", "F.softmax(dim=-1): a third (B, H, L, L)"},
        {"attention_values", "attn @ v: the (L, L) weights read back, (B, H, L, d) out"},
        {"merge_heads", ".transpose(1, 2).reshape(B, L, E) (folded on the GPU too)"},
        {"out_proj", "self.W_o(...); the fused forward starts after it"},
        {"flash_attention", "F.scaled_dot_product_attention(q, k, v, is_causal=True) with the padding: "
                            "each query row walks the keys in blocks, keeping only its running max, sum and "
                            "output (online softmax). No (L, L) tensor; (B, H, L, d) out"}});
    std::ostringstream agree;
    agree << "fused against unfused, on the GPU: max |difference| " << compare_values(both.second, both.first, 0, 0).max_abs_error
          << " over " << both.first.size() << " outputs (the sums run in another order: rounding, nothing more)";
    lesson.say(agree.str());
    unfused.key_padding_mask.reset();  // (two statements: GCC 14 warns of the chained copy)
    fused.key_padding_mask.reset();

    // ---- 2: time and memory against L ----
    auto* gpu = dynamic_cast<VulkanBackend*>(&lesson.gpu());
    if (!gpu) throw std::runtime_error("lesson 07 measures a Vulkan device");
    auto measure = [&](const Tensor& input, const ForwardOptions& o) {
      // once untimed: the first forward of a shape may measure its plans (tuning, on by default),
      // whose time and buffers are not the forward's
      mha.forward(*gpu, input, o);
      gpu->empty_cache();  // the buffers kept from the last forward would count in this one's peak
      gpu->reset_peak();
      auto start = std::chrono::steady_clock::now();
      mha.forward(*gpu, input, o);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      return std::pair{ms, static_cast<double>(gpu->peak_allocated_bytes()) / 1048576.0};
    };
    std::ostringstream table;
    table << "One forward each on the GPU (" << gpu->device_name() << "), B = 1, E = 64, H = 4, causal, no tracer:\n"
          << std::fixed << std::setprecision(2) << std::setw(7) << "L" << std::setw(14) << "(L, L) scores" << std::setw(14)
          << "unfused ms" << std::setw(12) << "fused ms" << std::setw(15) << "unfused MiB" << std::setw(12) << "fused MiB\n";
    // pipelines are made on first use, one per specialization (tile widths follow L up to 128):
    // not in the table
    measure(random_tensor({1, 128, E}, 3), unfused);
    measure(random_tensor({1, 128, E}, 3), fused);
    io::PlotSeries unfused_ms{"unfused", {}, {}}, fused_ms{"fused", {}, {}}, unfused_mib = unfused_ms,
                                                                   fused_mib = fused_ms;
    for (int64_t L : {128, 256, 512, 1024}) {
      Tensor input = random_tensor({1, L, E}, 4);
      auto [u_ms, u_mib] = measure(input, unfused);
      auto [f_ms, f_mib] = measure(input, fused);
      for (auto [series, value] : {std::pair{&unfused_ms, u_ms}, {&fused_ms, f_ms}, {&unfused_mib, u_mib}, {&fused_mib, f_mib}}) {
        series->x.push_back(static_cast<double>(L));
        series->y.push_back(value);
      }
      table << std::setw(7) << L << std::setw(11) << static_cast<double>(H * L * L * 4) / 1048576.0 << " MiB" << std::setw(14)
            << u_ms << std::setw(12) << f_ms << std::setw(15) << u_mib << std::setw(11) << f_mib << "\n";
    }
    lesson.say(table.str());
    lesson.plot("time_against_L", {unfused_ms, fused_ms},
                {.title = "one causal forward on " + gpu->device_name(), .x = "sequence length L", .y = "time (ms)"});
    lesson.plot("memory_against_L", {unfused_mib, fused_mib},
                {.title = "peak device memory of one causal forward", .x = "sequence length L", .y = "memory (MiB)"});
    lesson.say(
        "The unfused path writes (B, H, L, L) three times over (scores, masked scores, weights), so its memory "
        "grows with L²; the fused path holds Q, K, V and the output, so its memory grows with L. Both times "
        "include making the buffers, which a second forward of the same shape reuses; bench/compare.py "
        "measures repeated forwards of both paths against PyTorch.");

    // ---- 3: heads split for free ----
    lesson.say(
        "Part 3: the layout steps. In PyTorch, q.view(B, L, H, d).transpose(1, 2) copies nothing: it is a view "
        "with other strides, and the copy comes later, in whichever kernel needs the heads contiguous "
        "(.contiguous(), a reshape). vkattn's recipe keeps split_heads and merge_heads as steps, so that a "
        "trace shows each tensor; on the GPU they copy nothing either: q_proj stores its product straight in "
        "(B, H, L, d), its GEMM writing element (b, t, h·d + c) at ((b·H + h)·L + t)·d + c where it would "
        "write (b·L + t)·E + h·d + c, and out_proj reads the heads where attention_values left them. The "
        "tables above list these steps with a time of 0 and the words 'folded into q_proj's store'. The "
        "same unfused forward, with the folding switched off and on:");
    const Tensor long_x = random_tensor({1, 512, E}, 5);
    auto layout_pass = [&](bool fold) {
      gpu->fold_layout_steps(fold);
      mha.forward(*gpu, long_x, unfused);  // buffers and pipelines for this shape
      StepRecorder steps(false);
      gpu->empty_cache();
      gpu->reset_peak();
      Tensor out;
      {
        AttachedTracer attached(*gpu, steps);
        out = mha.forward(*gpu, long_x, unfused).output;
      }
      double layout_us = 0, all_us = 0;
      const auto& times = steps.pass_end().step_times;
      for (size_t i = 0; i < times.size(); ++i) {
        const std::string& op = steps.steps()[i].event.op;
        if (op == "split_heads" || op == "merge_heads") layout_us += times[i].duration_us;
        all_us += times[i].duration_us;
      }
      return std::tuple{out, layout_us / 1000.0, all_us / 1000.0, static_cast<double>(gpu->peak_allocated_bytes()) / 1048576.0};
    };
    const auto [copied, copy_ms, copied_ms, copied_mib] = layout_pass(false);
    const auto [folded, fold_ms, folded_ms, folded_mib] = layout_pass(true);
    std::ostringstream layout;
    layout << std::fixed << std::setprecision(2) << "x (1, 512, 64), causal, unfused, one traced forward:\n"
           << "  layout steps as copies: the four take " << copy_ms << " ms of " << copied_ms << " ms of steps, peak "
           << copied_mib << " MiB\n"
           << "  folded:                 the four take " << fold_ms << " ms of " << folded_ms << " ms of steps, peak "
           << folded_mib << " MiB\n";
    layout.unsetf(std::ios::floatfield);
    layout << "  max |folded - copied| = " << compare_values(folded, copied, 0, 0).max_abs_error
           << ": the same sums in the same order, only the addresses differ";
    lesson.say(layout.str());
    lesson.say(
        "Folding saves the copies' time and the (B, L, E) tensors they copied from, which is why engines "
        "write a GEMM's result in the layout its reader wants. The price is a step that is no longer a tensor "
        "of its own: a trace with values still shows q_proj's (B, L, E) product, read back from the heads "
        "and put in its order (stored_as in the trace says how it lies).");
  });
}
