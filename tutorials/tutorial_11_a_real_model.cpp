// Lesson 11: a real model, step by step.
//
// models/tiny_gpt2 is a GPT-2 — saved exactly as the Hugging Face hub saves GPT-2: config.json,
// model.safetensors, vocab.json, merges.txt — that io::load_pretrained reads as vkattn's steps.
// This lesson runs it on one sentence: the sentence's tokens, every step of both layers on the
// GPU beside the CPU reference, each head's attention pattern, the residual stream every layer
// adds to, and the distribution of the next token. The hub's own gpt2 folder goes through the
// same code (12 layers instead of 2, 768 features instead of 64).
//
// Run: build/bin/tutorial_11_a_real_model [--images DIR] [--device D]
#include <algorithm>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "engine/io/file.h"
#include "tutorials/lesson.h"
#include "vkattn/io/pretrained.h"

using namespace vkattn;

namespace {

const char* const kModel = VKATTN_TUTORIAL_DATA;  // models/tiny_gpt2

// The lesson's words for GPT-2's steps, as Hugging Face's GPT2LMHeadModel computes them.
const tutorial::Notes kSteps = {
    {"token_embedding", "wte(ids): each token id's row of the (vocab, E) table, (1, T, 64)"},
    {"position_embedding", "+ wpe(positions): a learnt row per position, added (not rotated as RoPE)"},
    {"norm1", "ln_1(x): GPT-2 normalises before attention (pre-norm)"},
    {"q_proj", "the first third of c_attn(x): GPT-2 stores q, k, v as one Conv1D (E, 3·E)"},
    {"k_proj", "c_attn's second third"},
    {"v_proj", "c_attn's last third"},
    {"split_heads_q", "q.view(1, T, 4, 16).transpose(1, 2): 4 heads of 16"},
    {"split_heads_k", "the same for k"},
    {"split_heads_v", "the same for v"},
    {"attention_scores", "q @ k.transpose(-2, -1) / √16: (1, 4, T, T), every query against every key"},
    {"attention_mask", "causal: -inf where the key comes after the query"},
    {"softmax", "the attention pattern: each row sums to 1 over the keys up to the query"},
    {"attention_values", "pattern @ v: each position a mix of the values before it"},
    {"merge_heads", ".transpose(1, 2).reshape(1, T, 64): the heads side by side again"},
    {"out_proj", "c_proj: back to (1, T, 64), the attention's output"},
    {"residual_add1", "x + attention: the residual stream"},
    {"norm2", "ln_2 before the MLP"},
    {"linear1", "c_fc: (1, T, 64) -> (1, T, 256)"},
    {"gelu_tanh", "gelu_new, GPT-2's tanh approximation of the gelu"},
    {"linear2", "the MLP's c_proj: back to (1, T, 64)"},
    {"residual_add2", "x + MLP: the stream after the layer"},
    {"norm", "ln_f: the last norm"},
    {"lm_head", "x @ wte.T: the head is the embedding table (tied), (1, T, vocab) logits"}};

// The text of one token, quoted, with a newline shown as \n
std::string piece(const text::Tokenizer& tokenizer, int64_t id) {
  std::string text = tokenizer.decode(std::span(&id, 1)), out = "'";
  for (char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out + "'";
}

Tensor values_of(const StepRecorder& recorder, const std::string& step) {
  for (const auto& s : recorder.steps()) {
    if (s.event.name == step && s.values) return *s.values;
  }
  throw std::runtime_error("the trace has no values for step " + step);
}

}  // namespace

int main(int argc, char** argv) {
  return tutorial::run(argc, argv, "Lesson 11: a real model, step by step — GPT-2 on one sentence",
                       [](tutorial::Lesson& lesson) {
    const io::Pretrained p = io::load_pretrained(kModel);
    const nlohmann::json expected = nlohmann::json::parse(io::read_text(std::string(kModel) + "/expected.json"));
    const std::string prompt = expected["prompt"];
    const text::Tokenizer& tokenizer = *p.tokenizer;

    // ---- 1: the sentence as tokens -----------------------------------------------------------
    const std::vector<int64_t> ids = tokenizer.encode(prompt);
    const auto T = static_cast<int64_t>(ids.size());
    std::ostringstream tokens;
    tokens << "models/tiny_gpt2 is " << p.architecture << " as the hub stores it: " << p.model->describe()
           << ".\nIts tokenizer (GPT-2's byte-level BPE, with " << tokenizer.vocab_size() - 257
           << " merges learnt on Alice) cuts '" << prompt << "' into " << T << " tokens:\n";
    for (int64_t t = 0; t < T; ++t) tokens << "  position " << t << ": id " << std::setw(3) << ids[t] << " " << piece(tokenizer, ids[t]) << "\n";
    tokens << "A word's leading space belongs to it (' was'); a rarer word is cut into pieces.";
    lesson.say(tokens.str());

    // ---- 2: every step of both layers, GPU beside CPU -----------------------------------------
    lesson.say("The whole forward, with attention unfused so that its scores and pattern are steps "
               "of their own. The same steps run twice, once per layer (layers.0, layers.1):");
    const Tensor input({1, T}, std::vector<float>(ids.begin(), ids.end()), DType::int64);
    auto forward = [&](Backend& b) { return p.model->forward(b, input, {}, AttentionPath::unfused); };
    auto [logits, logits_cpu] = lesson.part("GPT-2 on the sentence", forward, kSteps);

    // ---- 3: the attention pattern of each head -----------------------------------------------
    StepRecorder recorded(true);
    lesson.gpu().add_tracer(recorded);
    forward(lesson.gpu());
    lesson.gpu().remove_tracer(recorded);
    for (int layer = 0; layer < 2; ++layer) {
      const Tensor pattern = values_of(recorded, "layers." + std::to_string(layer) + ".self_attn.softmax");
      const int64_t H = pattern.dim(1);
      Tensor heads({H, T, T}, pattern.data);
      lesson.images("pattern_layer" + std::to_string(layer), heads, {"h"},
                    {.title = "layer " + std::to_string(layer) + "'s attention pattern"});
    }
    const Tensor first = values_of(recorded, "layers.0.self_attn.softmax");
    lesson.say("The pattern of layer 0's head 0: row i is how much position i reads each earlier "
               "position (the causal mask leaves the upper triangle 0). With --images DIR, every "
               "head of both layers as a heatmap.");
    lesson.grid("layers.0.self_attn.softmax, head 0 (rows: query position, columns: key position)", first, {0, 0}, 2);

    // ---- 4: the residual stream ------------------------------------------------------------
    const std::vector<std::pair<std::string, std::string>> stages = {
        {"position_embedding", "embeddings"}, {"layers.0.residual_add1", "+ layer 0's attention"},
        {"layers.0.residual_add2", "+ layer 0's MLP"}, {"layers.1.residual_add1", "+ layer 1's attention"},
        {"layers.1.residual_add2", "+ layer 1's MLP"}};
    const int64_t E = values_of(recorded, stages.front().first).dim(2);
    std::ostringstream stream;
    stream << "The residual stream: one (1, " << T << ", " << E << ") tensor that every attention and MLP reads "
           << "(through a norm) and adds to. Its length ‖x‖ at each position after each addition:\n"
           << std::left << std::setw(24) << "  after" << std::right;
    for (int64_t t = 0; t < T; ++t) stream << std::setw(7) << t;
    stream << "\n" << std::fixed << std::setprecision(2);
    for (const auto& [step, label] : stages) {
      const Tensor x = values_of(recorded, step);
      stream << "  " << std::left << std::setw(22) << label << std::right;
      for (int64_t t = 0; t < T; ++t) {
        double sum = 0;
        for (int64_t e = 0; e < E; ++e) sum += double(x.data[t * E + e]) * x.data[t * E + e];
        stream << std::setw(7) << std::sqrt(sum);
      }
      stream << "\n";
    }
    stream << "Each layer adds to what is there; nothing replaces it. The last norm and the head read "
              "the stream at the last position to predict the next token.";
    lesson.say(stream.str());

    // ---- 5: the next token -----------------------------------------------------------------
    const int64_t V = logits.dim(2);
    std::vector<double> probability(V);
    const float* last = logits.data.data() + (T - 1) * V;
    const float top = *std::max_element(last, last + V);
    double total = 0;
    for (int64_t v = 0; v < V; ++v) total += probability[v] = std::exp(double(last[v]) - top);
    for (double& q : probability) q /= total;
    std::vector<int64_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](int64_t a, int64_t b) { return probability[a] > probability[b]; });
    std::ostringstream next;
    next << "The next token: softmax of the last position's " << V << " logits. The five likeliest:\n"
         << std::fixed << std::setprecision(3);
    for (int k = 0; k < 5; ++k) {
      next << "  p = " << probability[order[k]] << "  id " << std::setw(3) << order[k] << " "
           << piece(tokenizer, order[k]) << "\n";
    }
    const int64_t torch_choice = expected["tokens"][0];
    if (order[0] != torch_choice) throw std::runtime_error("the likeliest token is not torch's greedy choice");
    next << "torch, running the same weights (models/tiny_gpt2/train.py), also picks "
         << piece(tokenizer, torch_choice) << ": vkattn generate --model models/tiny_gpt2 continues so, "
         << "a token at a time.";
    lesson.say(next.str());
  });
}
