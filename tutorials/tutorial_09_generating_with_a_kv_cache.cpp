// Lesson 09: generating with a KV cache.
//
// A language model writes one token at a time: it reads the text so far, its last position's
// logits pick the next token, and the text grows by one. Computed plainly, every new token runs
// the model over the whole text again, and every earlier position gives the same keys and values
// it gave last time. A KV cache keeps them: each layer holds the keys and values of every
// position so far, (B, H, capacity, d) on the device, and a new token computes only its own row —
// its projections, two appends to the cache (kv_cache_append), and attention of its one query
// over the S positions held (flash_decoding, attention_combine). Its time barely grows with the
// text; the plain way's grows with it. The model is models/tiny_char: a character-level
// decoder-only model (2 layers, d_model 64, 4 heads) trained in a minute on Alice in Wonderland
// by models/tiny_char/train.py, which `vkattn generate` runs too.
//
// Run: build/bin/tutorial_09_generating_with_a_kv_cache [--images DIR] [--device D]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tutorials/lesson.h"
#include "vkattn/io/state_dict.h"
#include "vkattn/modules/causal_lm.h"

using namespace vkattn;

namespace {

using Clock = std::chrono::steady_clock;

// The model's vocabulary (ASCII characters, token id = index) from its __metadata__
std::string vocabulary(const io::CausalLMState& state) {
  const std::string& vocab = state.metadata.at("vocab");
  if (std::any_of(vocab.begin(), vocab.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) {
    throw std::runtime_error("lesson 09 reads a model whose vocabulary is ASCII");
  }
  return vocab;
}

Tensor ids(const std::vector<int64_t>& tokens, size_t from = 0) {
  std::vector<float> values(tokens.begin() + static_cast<std::ptrdiff_t>(from), tokens.end());
  const auto n = static_cast<int64_t>(values.size());
  return Tensor({1, n}, std::move(values), DType::int64);
}

// The likeliest next token after logits (1, T, V): the first of equals, as torch.argmax
int64_t greedy(const Tensor& logits) {
  const int64_t T = logits.dim(1), V = logits.dim(2);
  const auto last = logits.data.begin() + (T - 1) * V;
  return std::max_element(last, last + V) - last;
}

double median_ms(int reps, const std::function<void()>& run) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = Clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 09: generating with a KV cache", [](tutorial::Lesson& lesson) {
    io::CausalLMState state = io::load_causal_lm(VKATTN_TUTORIAL_DATA "/model.safetensors");
    const std::string vocab = vocabulary(state);
    const CausalLM model(state.config, std::move(state.weights));
    const auto& c = model.config();
    const int64_t H = c.layer.nhead, d = c.layer.d_model / c.layer.nhead, layers = c.num_layers;
    const std::string prompt = "Alice was";
    std::vector<int64_t> tokens;
    for (char ch : prompt) tokens.push_back(static_cast<int64_t>(vocab.find(ch)));
    const auto P = static_cast<int64_t>(tokens.size());

    // ---- 1: the cache, filled by the prompt -------------------------------------------------------
    const int64_t capacity = 64;
    KVCache gpu_cache = model.make_cache(lesson.gpu(), 1, capacity), cpu_cache = model.make_cache(lesson.cpu(), 1, capacity);
    std::ostringstream made;
    made << "The prompt \"" << prompt << "\" is " << P << " tokens. Each of the " << layers
         << " layers gets a key cache and a value cache of (B, H, capacity, d) = (1, " << H << ", " << capacity
         << ", " << d << "), made once, zeros: 2 × " << layers << " layers × 1 × " << H << " × " << capacity << " × "
         << d << " × 4 bytes = " << gpu_cache.bytes() << " bytes, whatever the length. The prompt runs as one pass "
         << "of " << P << " rows (the prefill) and leaves its keys and values in rows 0 … " << P - 1 << ".";
    lesson.say(made.str());
    const Tensor first_logits = model.decode(lesson.gpu(), ids(tokens), gpu_cache);
    model.decode(lesson.cpu(), ids(tokens), cpu_cache);
    const int64_t next = greedy(first_logits);
    tokens.push_back(next);
    std::ostringstream filled;
    filled << "cache length " << gpu_cache.length() << " of " << capacity << "; the likeliest next character is '"
           << vocab[static_cast<size_t>(next)] << "' (token " << next << ")";
    lesson.say(filled.str());

    // ---- 2: one decode step, L = 1 against S ------------------------------------------------------
    lesson.say("Now one step: the new token alone, T = 1. Its query is one row; the keys and values it attends "
               "to are the cache's first S = " + std::to_string(P + 1) + " rows: its own, appended first, and the "
               "prompt's. Each run of the step below crops the cache back to the prompt first.");
    auto [step_gpu, step_cpu] = lesson.part("one decode step", [&](Backend& b) {
      KVCache& cache = &b == &lesson.gpu() ? gpu_cache : cpu_cache;
      cache.crop(P);
      return model.decode(b, ids(tokens, static_cast<size_t>(P)), cache);  // (1, 1, V)
    }, {{"token_embedding", "self.token_embedding(ids): one row of the (V, E) table, (1, 1, E)"},
        {"position_embedding", "+ self.position_embedding(positions): the row of position S - 1, not of 0"},
        {"norm1", "pre-norm: x + self_attn(norm1(x)); the row is normalised over E"},
        {"q_proj", "q, k, v = W_q x, W_k x, W_v x for the new row only: (1, 1, E) each"},
        {"k_proj", "the new token's key: the only key this layer computes in this step"},
        {"v_proj", "and its value"},
        {"split_heads_q", ".view(B, T, H, d).transpose(1, 2): (1, H, 1, d)"},
        {"split_heads_k", "the same for k"}, {"split_heads_v", "and for v"},
        {"kv_cache_append_k", "k_cache[:, :, S-1] = k: written in place into the (B, H, capacity, d) cache; "
                              "the output shown is the whole cache"},
        {"kv_cache_append_v", "v_cache[:, :, S-1] = v: the same for the values"},
        {"flash_decoding", "the one query against keys 0 … S-1 of the cache, split into parts that run in "
                           "parallel; each part keeps its max m and sum l: (B, H, L, parts, d + 2)"},
        {"attention_combine", "softmax over all S keys from the parts: Σ out·e^(m-M) / Σ l·e^(m-M): (1, H, 1, d)"},
        {"merge_heads", ".transpose(1, 2).reshape(B, T, E): (1, 1, E)"},
        {"out_proj", "W_o: (1, 1, E)"},
        {"residual_add1", "x + attention"}, {"norm2", "norm2 before the feed-forward (pre-norm)"},
        {"linear1", "linear1: E -> 4E, one row"}, {"gelu", "exact GELU"}, {"linear2", "linear2: 4E -> E"},
        {"residual_add2", "x + ffn"}, {"norm", "the final LayerNorm"},
        {"lm_head", "logits over the vocabulary for the new position: (1, 1, V)"}});
    lesson.say("The same step without a cache would run every row above for all S positions again: the "
               "projections, the feed-forward and (S, S) attention, to keep only the last row.");

    // ---- 3: the same tokens with and without the cache --------------------------------------------
    const int64_t n = 40;
    std::vector<int64_t> cached(tokens.begin(), tokens.begin() + P), plain = cached;
    gpu_cache.clear();
    Tensor logits = model.decode(lesson.gpu(), ids(cached), gpu_cache);
    for (int64_t i = 0; i < n; ++i) {
      cached.push_back(greedy(logits));
      logits = model.decode(lesson.gpu(), ids(cached, cached.size() - 1), gpu_cache);
      plain.push_back(greedy(model.forward(lesson.gpu(), ids(plain), {}, AttentionPath::automatic, 1)));
    }
    std::ifstream in(VKATTN_TUTORIAL_DATA "/expected.json");
    const auto torch_tokens = nlohmann::json::parse(in).at("tokens").get<std::vector<int64_t>>();
    auto text = [&](const std::vector<int64_t>& t) {
      std::string s;
      for (size_t i = static_cast<size_t>(P); i < t.size(); ++i) s += vocab[static_cast<size_t>(t[i])];
      for (size_t at; (at = s.find('\n')) != std::string::npos;) s.replace(at, 1, "\\n");
      return s;
    };
    const bool same = cached == plain;
    const bool as_torch = std::equal(cached.begin() + P, cached.end(), torch_tokens.begin());
    std::ostringstream both;
    both << "Greedy, " << n << " characters after \"" << prompt << "\", on the GPU:\n"
         << "  with the cache:    \"" << text(cached) << "\"\n"
         << "  without (forward): \"" << text(plain) << "\"\n"
         << (same ? "the same " : "NOT the same ") << n << " tokens both ways; "
         << (as_torch ? "and the same as torch's" : "and NOT torch's") << " (models/tiny_char/expected.json).";
    lesson.say(both.str());
    if (!same || !as_torch) throw std::runtime_error("generation with and without the cache disagree");

    // ---- 3b: the cache in 16-bit numbers ----------------------------------------------------------
    // the same characters again, each step decoded into the float32 cache and into a float16 one
    KVCache half = model.make_cache(lesson.gpu(), 1, capacity, Narrow::float16);
    std::vector<int64_t> again(tokens.begin(), tokens.begin() + P);
    gpu_cache.clear();
    float moved = 0;  // the largest |logit with the float16 cache - with the float32 one|
    bool as_before = true;
    for (int64_t i = 0; i <= n; ++i) {
      const size_t from = i == 0 ? 0 : again.size() - 1;
      const Tensor exact = model.decode(lesson.gpu(), ids(again, from), gpu_cache);
      const Tensor rounded = model.decode(lesson.gpu(), ids(again, from), half);
      for (size_t j = 0; j < exact.data.size(); ++j) moved = std::max(moved, std::abs(exact.data[j] - rounded.data[j]));
      if (i == n) break;
      again.push_back(greedy(rounded));
      as_before = as_before && again.back() == cached[again.size() - 1];
    }
    std::ostringstream sixteen;
    sixteen << "A cache may keep 16-bit numbers, as make_cache(..., Narrow::float16) and vkattn generate "
            << "--cache-dtype F16 ask: kv_cache_append rounds each key and value to the nearest float16 as it writes "
               "it, and "
            << "flash_decoding widens them back as it reads them, " << half.bytes() << " bytes instead of "
            << gpu_cache.bytes() << ". Over the same " << n << " characters the logits moved by at most "
            << std::scientific << std::setprecision(1) << moved << std::defaultfloat << " from the float32 "
            << "cache's, and the greedy characters are " << (as_before ? "the same." : "NOT the same.");
    lesson.say(sixteen.str());
    if (!as_before || moved == 0) throw std::runtime_error("the float16 cache changed the characters, or nothing");

    // ---- 4: time per token against the context length ---------------------------------------------
    // tiny_char is too small to show it (its 128 positions cost little either way): a model of
    // random weights of a more usual width does; the time does not depend on the weights' values.
    // On the fixed rules' plans: tuning (on by default) would first measure the plans of each
    // length's products, which doubled a first run of the lesson (100 s against 53 s on lavapipe,
    // Mesa 22, a 2-core EPYC, Mesa's shader cache empty) and made the table no faster.
    // (said before the wait: from an empty shader cache the table took 66 of the lesson's 90 s on
    // lavapipe, Mesa 22, a 2-core EPYC, nearly all of it compiling; the whole lesson 14 s once
    // Mesa's cache held them; 100 of 125 s on a 2-core Xeon, Mesa 22, 24 s warm)
    lesson.say(
        "Next, the time of one token against the context length, on a model of a more usual width. "
        "The first time, this takes a while: most of it is the device compiling the wider model's "
        "kernels as they are first dispatched (a minute or two on lavapipe; Mesa keeps them in its disk "
        "cache for later runs).");
    const std::unique_ptr<Backend> gpu = lesson.gpu_with({.tune = false});
    CausalLMConfig wide_config{.vocab_size = 54, .max_positions = 1024,
                               .layer = {.d_model = 256, .nhead = 4, .dim_feedforward = 1024,
                                         .activation = Activation::gelu, .norm_first = true},
                               .num_layers = 4};
    const CausalLM wide(wide_config, CausalLMWeights::random(wide_config, 1));
    std::ostringstream table;
    table << "One new token after S - 1 others, on the GPU (" << gpu->device_name() << "), a model of "
          << "4 layers, d_model 256, 4 heads, random weights, the fixed rules' plans (not tuned: "
          << "docs/tuning.md); the median of 3 runs:\n"
          << std::setw(7) << "S" << std::setw(16) << "cache (ms)" << std::setw(20) << "no cache (ms)" << std::setw(12)
          << "ratio\n"
          << std::fixed;
    io::PlotSeries with{"with the KV cache", {}, {}}, without{"recomputing every position", {}, {}};
    for (int64_t S : {64, 256, 512, 1024}) {
      std::vector<int64_t> context;
      for (int64_t i = 0; i < S; ++i) context.push_back(i * 7 % 54);  // any ids: the time does not read them
      KVCache cache = wide.make_cache(*gpu, 1, S);
      wide.decode(*gpu, ids(std::vector<int64_t>(context.begin(), context.end() - 1)), cache);
      const double cache_ms = median_ms(3, [&] {
        cache.crop(S - 1);
        wide.decode(*gpu, ids(context, static_cast<size_t>(S - 1)), cache);
      });
      const double plain_ms = median_ms(3, [&] { wide.forward(*gpu, ids(context), {}, AttentionPath::automatic, 1); });
      with.x.push_back(static_cast<double>(S));
      with.y.push_back(cache_ms);
      without.x.push_back(static_cast<double>(S));
      without.y.push_back(plain_ms);
      table << std::setw(7) << S << std::setprecision(2) << std::setw(16) << cache_ms << std::setw(20) << plain_ms
            << std::setprecision(1) << std::setw(10) << plain_ms / cache_ms << "×\n";
    }
    lesson.say(table.str());
    lesson.plot("time_per_token", {with, without},
                {.title = "one new token (4 layers, d_model 256) on " + gpu->device_name(),
                 .x = "context length S", .y = "time (ms)"});
    lesson.say("With the cache a token costs about the same at any length: one row's projections and "
               "feed-forward, and attention of one query over S keys. Without it the whole context runs "
               "again, so its time grows with S, and faster still as attention's (S, S) share grows. "
               "bench_decoding measures a model of d_model 512 up to S = 4096.");
  });
}
