#pragma once
// What vkattn's check knows: the mistakes it recognises from the numbers of one step, each with
// the steps where it shows, the PyTorch line that usually causes it and what to write instead.
// One list, read by the check's words, by Python's vkattn.DIAGNOSES and by docs/check.md (a test
// holds the page to it).
#include <span>
#include <string_view>

namespace vkattn {

struct Diagnosis {
  std::string_view id;       // "scale_width": how reports, tests and the docs name it
  std::string_view steps;    // where it shows: "attention_scores, softmax"
  std::string_view mistake;  // what went wrong, as a question's subject: "scores divided by √E …"
  std::string_view culprit;  // the PyTorch line that usually causes it
  std::string_view fix;      // what to write instead
};

// Every diagnosis, in the order a recipe meets them (projections first, the output last).
std::span<const Diagnosis> diagnoses();

// The one named `id`; std::out_of_range for a name not in the list.
const Diagnosis& diagnosis_named(std::string_view id);

}  // namespace vkattn
