#include <algorithm>

#include "vkattn/errors.h"
#include "vkattn/text/tokenizer.h"

namespace vkattn::text {

std::vector<EncodedPair> windows(const EncodedPair& pair, int64_t max_length, int64_t stride) {
  const auto T = static_cast<int64_t>(pair.ids.size());
  if (static_cast<int64_t>(pair.sequence_ids.size()) != T) {
    throw ConfigError("windows: the pair has no sequence ids, so its second text's tokens are not known");
  }
  // the second text's tokens are one run: [first, first + count)
  const auto first = static_cast<int64_t>(std::find(pair.sequence_ids.begin(), pair.sequence_ids.end(), 1) -
                                          pair.sequence_ids.begin());
  const auto count = static_cast<int64_t>(std::count(pair.sequence_ids.begin(), pair.sequence_ids.end(), 1));
  if (T <= max_length) return {pair};
  const int64_t others = T - count, room = max_length - others;
  if (room < 1) {
    throw ConfigError("the first text and the template take " + std::to_string(others) +
                      " tokens, which leaves no room for the second text in windows of " + std::to_string(max_length) +
                      " (max_length, the pipeline's max_seq_len): give a shorter first text (a question) or longer "
                      "windows");
  }
  if (stride < 0 || stride >= room) {
    throw ConfigError("stride=" + std::to_string(stride) + " (doc_stride) must be at least 0 and below the " +
                      std::to_string(room) + " tokens of the second text in each window (windows of " +
                      std::to_string(max_length) + " tokens, less the " + std::to_string(others) +
                      " of the first text and the template)");
  }
  std::vector<EncodedPair> out;
  for (int64_t start = 0;; start += room - stride) {
    const int64_t stop = std::min(start + room, count);
    EncodedPair w;
    // keep token t: every token outside the second text, and its tokens [first + start, first + stop)
    for (int64_t t = 0; t < T; ++t) {
      if (t >= first && t < first + count && (t < first + start || t >= first + stop)) continue;
      const auto i = static_cast<size_t>(t);
      w.ids.push_back(pair.ids[i]);
      if (!pair.type_ids.empty()) w.type_ids.push_back(pair.type_ids[i]);
      w.sequence_ids.push_back(pair.sequence_ids[i]);
      if (!pair.offsets.empty()) w.offsets.push_back(pair.offsets[i]);
    }
    out.push_back(std::move(w));
    if (stop == count) return out;
  }
}

}  // namespace vkattn::text
