// flash_decoding's parts of one query row merged into one element of its output (attention_combine,
// and flash_decoding's COMBINE build, which merges its own workgroup's rows):
//   M = the largest m of a part that saw a key (l > 0)
//   out = Σ_p output_p · exp(m_p - M) / Σ_p l_p · exp(m_p - M); zero where no part saw a key
// The including shader declares `partials` (R, P, d + 2): [output (d), m, l] per part.

// Element c of row r's output, from its P parts of d + 2 values
float combined_part(uint r, uint parts, uint head_dim, uint c) {
  uint stride = head_dim + 2u;
  uint row = r * parts * stride;
  float m = -1e30;
  for (uint part = 0u; part < parts; ++part) {
    if (partials[row + part * stride + head_dim + 1u] > 0.0) m = max(m, partials[row + part * stride + head_dim]);
  }
  float l = 0.0, acc = 0.0;
  for (uint part = 0u; part < parts; ++part) {
    float w = exp(partials[row + part * stride + head_dim] - m);
    l += partials[row + part * stride + head_dim + 1u] * w;
    acc += partials[row + part * stride + c] * w;
  }
  return l > 0.0 ? acc / l : 0.0;
}
