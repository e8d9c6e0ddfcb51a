// Backend's step methods of decoding with a key/value cache (KVCache): appending rows to the
// cache, flash_decoding's key split and its parts combined.
#include "vkattn/backends/backend.h"

#include <algorithm>
#include <cmath>

#include "engine/backends/backend_checks.h"
#include "reference/reference.h"
#include "vkattn/errors.h"

namespace vkattn {

using namespace backend_checks;

Value Backend::kv_cache_append(const std::string& step_name, const Value& cache, const Value& rows, int64_t position) {
  const std::string step = scoped(step_name);
  require_rank(step, cache, 4, "(B, H, capacity, d)", true);
  require_rank(step, rows, 4, "(B, H, T, d)");
  require(rows.dim(0) == cache.dim(0) && rows.dim(1) == cache.dim(1) && rows.dim(3) == cache.dim(3), step,
          [&] { return "rows " + describe(rows) + " and cache " + describe(cache) + " must agree on B, H and d"; });
  const int64_t B = cache.dim(0), H = cache.dim(1), C = cache.dim(2), d = cache.dim(3), T = rows.dim(2);
  require(position >= 0 && position + T <= C, step, [&] {
    return "the cache holds at most " + std::to_string(C) + " positions (its capacity) but " + std::to_string(T) +
           " new rows at position " + std::to_string(position) + " would end at " + std::to_string(position + T);
  });
  Value out{step, cache.shape, DType::float32, cache.storage, cache.narrow};  // written in place
  timed(step, [&] { run_kv_cache_append(step, *out.storage, *rows.storage, B * H, C, T, d, position, cache.narrow); });
  if (tracing()) report(step, "kv_cache_append", infos({&rows}), out, {"b", "h", "s", "c"});
  return out;
}

int64_t Backend::decoding_parts(int64_t rows, int64_t length, int64_t /*d*/, int64_t /*queries*/,
                                int64_t /*key_rows*/) {
  constexpr int64_t kMinKeys = 32;  // fewer keys a part would cost more in attention_combine than they save
  const int64_t wanted = std::max<int64_t>(1, decoding_lanes() / std::max<int64_t>(rows, 1));
  return std::max<int64_t>(1, std::min(wanted, (length + kMinKeys - 1) / kMinKeys));
}

Backend::DecodingSizes Backend::check_flash_decoding(const std::string& step, const Value& q, const Value& k,
                                                     const Value& v, int64_t length, const Value* key_padding_mask,
                                                     bool causal, int64_t window, int64_t parts) {
  require_rank(step, q, 4, "(B, H, L, d)");
  require_rank(step, k, 4, "(B, H_kv, capacity, d)", true);
  require_rank(step, v, 4, "(B, H_kv, capacity, d)", true);
  require(q.dim(3) == k.dim(3) && v.shape == k.shape, step, [&] {
    return "query " + describe(q) + ", key cache " + describe(k) + " and value cache " + describe(v) +
           " must agree on d, and the caches on every dim";
  });
  require(k.narrow == v.narrow, step, [&] {
    return "key cache " + describe(k) + " is " + narrow_name(k.narrow) + " but value cache " + describe(v) + " is " +
           narrow_name(v.narrow) + ": the caches must hold one format";
  });
  const int64_t group = kv_group(step, q, k, "key cache");
  require_window(step, causal, window);
  const int64_t B = q.dim(0), H = q.dim(1), L = q.dim(2), d = q.dim(3), C = k.dim(2), S = length;
  require(S >= 1 && S <= C, step, [&] {
    return "length " + std::to_string(S) + " must be between 1 and the caches' capacity " + std::to_string(C);
  });
  require(!causal || L <= S, step, [&] {
    return "query " + describe(q) + " holds " + std::to_string(L) + " new positions, more than the " +
           std::to_string(S) + " in the cache";
  });
  if (key_padding_mask) {
    require_float(step, *key_padding_mask);
    require(key_padding_mask->shape == Shape{B, S}, step, [&] {
      return "key_padding_mask " + describe(*key_padding_mask) + " must be (B, S) = " + shape_string({B, S});
    });
  }
  if (parts == 0) parts = decoding_parts(B * H * L, S, d, L, B * H / group);
  require(parts >= 1 && parts <= S, step, [&] {
    return "parts=" + std::to_string(parts) + " must be between 1 and the " + std::to_string(S) + " keys";
  });
  return {B, H, L, d, C, S, group, parts, decoding_part_lanes(B * H * L, S, d, L, B * H / group)};
}

void Backend::flash_decoding_into(const std::string& step, const DecodingSizes& s, const Value& q, const Value& k,
                                  const Value& v, const Value* key_padding_mask, bool causal, int64_t window,
                                  const Value& partials, Storage* combined) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));
  timed(step, [&] {
    run_flash_decoding(step, *q.storage, *k.storage, *v.storage,
                       key_padding_mask ? key_padding_mask->storage.get() : nullptr, causal, window, *partials.storage,
                       s.B, s.H, s.L, s.C, s.S, s.d, s.parts, s.part_lanes, scale, s.group, k.narrow, combined);
  });
  if (tracing())
    report(step, "flash_decoding", infos({&q, &k, &v, key_padding_mask}), partials, {"b", "h", "i", "part", "c"});
}

Value Backend::flash_decoding(const std::string& step_name, const Value& q, const Value& k, const Value& v,
                              int64_t length, const Value* key_padding_mask, bool causal, int64_t window,
                              int64_t parts) {
  const std::string step = scoped(step_name);
  const DecodingSizes s = check_flash_decoding(step, q, k, v, length, key_padding_mask, causal, window, parts);
  Value partials = make_output(step, {s.B, s.H, s.L, s.parts, s.d + 2});
  flash_decoding_into(step, s, q, k, v, key_padding_mask, causal, window, partials, nullptr);
  return partials;
}

Value Backend::flash_decoding_combine(const std::string& decoding_step, const std::string& combine_step, const Value& q,
                                      const Value& k, const Value& v, int64_t length, const Value* key_padding_mask,
                                      bool causal, int64_t window, int64_t parts) {
  const std::string step = scoped(decoding_step);
  const DecodingSizes s = check_flash_decoding(step, q, k, v, length, key_padding_mask, causal, window, parts);
  Value partials = make_output(step, {s.B, s.H, s.L, s.parts, s.d + 2});
  if (!combines_parts(s.parts, s.part_lanes) || wants_values()) {
    flash_decoding_into(step, s, q, k, v, key_padding_mask, causal, window, partials, nullptr);
    return attention_combine(combine_step, partials);
  }
  const std::string combine = scoped(combine_step);
  Value out = make_output(combine, {s.B, s.H, s.L, s.d});  // written by flash_decoding's dispatch
  flash_decoding_into(step, s, q, k, v, key_padding_mask, causal, window, partials, out.storage.get());
  fold_time();
  if (tracing()) {
    report(
        combine, "attention_combine", infos({&partials}), out, {"b", "h", "i", "c"},
        {"folded into " + decoding_step + ", whose workgroups merged their rows' parts once all were written", {}, {}});
  }
  return out;
}

Value Backend::attention_combine(const std::string& step_name, const Value& partials) {
  const std::string step = scoped(step_name);
  require_rank(step, partials, 5, "(B, H, L, parts, d + 2)");
  require(partials.dim(4) >= 3, step,
          [&] { return "partials " + describe(partials) + " must hold d + 2 >= 3 values per part"; });
  const int64_t B = partials.dim(0), H = partials.dim(1), L = partials.dim(2), P = partials.dim(3),
                d = partials.dim(4) - 2;
  Value out = make_output(step, {B, H, L, d});
  timed(step, [&] { run_attention_combine(step, *partials.storage, *out.storage, B * H * L, P, d); });
  if (tracing()) report(step, "attention_combine", infos({&partials}), out, {"b", "h", "i", "c"});
  return out;
}

}  // namespace vkattn
