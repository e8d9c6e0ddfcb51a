#include "tools/labels.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "vkattn/io/probabilities.h"

namespace vkattn::cli {
namespace {

constexpr size_t kMostLabels = 5;  // a sequence's likeliest labels printed (the header says of how many)

// Label i's name: config.json's id2label, else Hugging Face's default LABEL_i.
std::string label_name(const nlohmann::json& config, int64_t i) {
  const std::string key = std::to_string(i);
  const nlohmann::json& names = config.contains("id2label") ? config["id2label"] : nlohmann::json();
  if (names.is_object() && names.contains(key) && names[key].is_string()) return names[key].get<std::string>();
  return "LABEL_" + key;
}

// v with `digits` decimals ("0.912")
std::string fixed(double v, int digits) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(digits) << v;
  return text.str();
}

// A token's text quoted, control characters escaped, a part of a character's bytes as U+FFFD
std::string quoted(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void print_labels(std::ostream& out, const io::Pretrained& model, std::span<const int64_t> ids, const Tensor& logits) {
  const auto n = static_cast<size_t>(logits.shape.back());
  const nlohmann::json& config = model.config;
  std::vector<std::string> names;
  size_t width = 0;
  for (size_t i = 0; i < n; ++i) {
    names.push_back(label_name(config, static_cast<int64_t>(i)));
    width = std::max(width, names.back().size());
  }
  if (logits.rank() == 3) {  // (1, T, num_labels): each token's likeliest label
    std::vector<std::string> tokens;
    size_t token_width = 0;
    for (int64_t id : ids) {
      tokens.push_back(quoted(model.tokenizer->decode(std::span(&id, 1))));
      token_width = std::max(token_width, tokens.back().size());
    }
    out << "each token's likeliest label (softmax of its " << n << " logits):\n";
    for (size_t t = 0; t < ids.size(); ++t) {
      const std::vector<double> p = io::softmax(std::span(logits.data).subspan(t * n, n));
      const size_t best = static_cast<size_t>(std::max_element(p.begin(), p.end()) - p.begin());
      out << "  " << std::left << std::setw(static_cast<int>(token_width)) << tokens[t] << "  "
          << std::setw(static_cast<int>(width)) << names[best] << std::right << "  " << fixed(p[best], 3) << "\n";
    }
    return;
  }
  const std::string problem = config.value("problem_type", std::string());
  if (n == 1 || problem == "regression") {
    out << "the regression's value" << (n == 1 ? "" : "s") << ":";
    for (size_t i = 0; i < n; ++i) out << (n == 1 ? " " : "\n  " + names[i] + " ") << fixed(logits.data[i], 4);
    out << "\n";
    return;
  }
  const bool multi = problem == "multi_label_classification";
  std::vector<double> p = multi ? std::vector<double>(n) : io::softmax(std::span(logits.data).first(n));
  if (multi) {
    for (size_t i = 0; i < n; ++i) p[i] = 1.0 / (1.0 + std::exp(-double(logits.data[i])));
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
  const size_t shown = std::min(n, kMostLabels);
  out << (multi ? "each label's probability (sigmoid of its logit)"
                : "the labels' probabilities (softmax of the logits)")
      << (shown < n ? ", the " + std::to_string(shown) + " likeliest of " + std::to_string(n) : "") << ":\n";
  for (size_t k = 0; k < shown; ++k) {
    const size_t i = order[k];
    out << "  " << std::left << std::setw(static_cast<int>(width)) << names[i] << std::right << "  " << fixed(p[i], 3)
        << "   (logit " << fixed(logits.data[i], 4) << ")\n";
  }
}

void print_answers(std::ostream& out, const std::vector<text::EncodedPair>& windows, const std::string& context,
                   const Tensor& logits, const io::AnswerOptions& options) {
  const std::vector<io::Answer> answers = io::answers(windows, context, logits, options);
  const size_t n = answers.size();
  out << (n == 1 ? "the likeliest answer" : "the " + std::to_string(n) + " likeliest answers")
      << " in --text-pair (score: P(start) · P(end), softmaxes over the context):\n";
  if (windows.size() > 1) {
    out << "  (the context read in " << windows.size() << " windows that overlap, --max-seq-len and --doc-stride;\n"
        << "   a text found in two is one answer, its scores summed)\n";
  }
  std::vector<std::string> texts;
  size_t width = 0;
  for (const io::Answer& a : answers) {
    texts.push_back(quoted(a.text));
    width = std::max(width, texts.back().size());
  }
  for (size_t k = 0; k < answers.size(); ++k) {
    const io::Answer& a = answers[k];
    out << "  " << std::left << std::setw(static_cast<int>(width)) << texts[k] << std::right << "  "
        << fixed(a.score, 3) << "   (bytes " << a.begin << "-" << a.end << " of the context, tokens " << a.first_token
        << "-" << a.last_token;
    if (windows.size() > 1) out << " of window " << a.window + 1 << " of " << windows.size();
    out << ")\n";
  }
}

void print_fills(std::ostream& out, const io::Pretrained& model, std::span<const int64_t> positions,
                 const Tensor& logits, int64_t top_k) {
  const std::vector<std::vector<io::Fill>> fills = io::mask_fills(model, positions, logits, top_k);
  const std::string mask = io::mask_token(model);
  for (size_t m = 0; m < fills.size(); ++m) {
    out << "the " << fills[m].size() << " likeliest tokens at " << mask
        << (fills.size() > 1 ? " " + std::to_string(m + 1) + " of " + std::to_string(fills.size()) : "") << ", token "
        << positions[m] + 1 << " of " << logits.shape[1] << " (softmax of its " << logits.shape.back() << " logits):\n";
    std::vector<std::string> tokens;
    size_t width = 0;
    for (const io::Fill& fill : fills[m]) {
      tokens.push_back(quoted(fill.token));
      width = std::max(width, tokens.back().size());
    }
    for (size_t k = 0; k < tokens.size(); ++k) {
      out << "  " << std::left << std::setw(static_cast<int>(width)) << tokens[k] << std::right << "  "
          << fixed(fills[m][k].probability, 3) << "\n";
    }
  }
}

}  // namespace vkattn::cli
