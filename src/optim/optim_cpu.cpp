// SPDX-License-Identifier: Apache-2.0
// CPU driver of adam_step: OpenMP over the chunks of every tensor (Note [adam chunks]), one
// pass for the gradient norm's per-chunk partials and one for the update.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "optim/optim_drivers.h"
#include "optim/optim_math.h"

namespace fieldfuse::detail::optim {
namespace {

/// Where chunk c of the call lies: the tensor and its element range.
struct ChunkRange {
  int tensor;
  int64_t begin, end;
};

/// ends[i]: one past the last chunk of tensor i (chunks numbered as in Note [adam chunks]).
std::vector<int64_t> chunk_ends(const AdamCall& call) {
  std::vector<int64_t> ends(static_cast<std::size_t>(call.count));
  int64_t total = 0;
  for (int i = 0; i < call.count; ++i) {
    total += chunk_count(call.params[i].param.numel());
    ends[static_cast<std::size_t>(i)] = total;
  }
  return ends;
}

ChunkRange locate(const std::vector<int64_t>& ends, const AdamCall& call, int64_t c) {
  // The first tensor whose chunks end after c (empty tensors end where the previous one does).
  const auto it = std::upper_bound(ends.begin(), ends.end(), c);
  const int tensor = static_cast<int>(it - ends.begin());
  const int64_t first_chunk = it == ends.begin() ? 0 : *(it - 1);
  const int64_t begin = (c - first_chunk) * kChunkElements;
  const int64_t end = std::min(begin + kChunkElements, call.params[tensor].param.numel());
  return {tensor, begin, end};
}

template <class T>
void run(const AdamCall& call) {
  const AdamOptions& o = call.options;
  const std::vector<int64_t> ends = chunk_ends(call);
  double* partials = call.workspace + kScalarSlots;

  double norm = 0.0;
  if (call.needs_norm) {
    parallel_for(0, call.chunks, kChunkElements, [&](int64_t c) {
      const ChunkRange r = locate(ends, call, c);
      const T* grad = static_cast<const T*>(call.params[r.tensor].grad.data);
      double sum = 0.0;
      for (int64_t i = r.begin; i < r.end; ++i) {
        const double g = static_cast<double>(grad[i]);
        sum += g * g;
      }
      partials[c] = sum;
    });
    double total = 0.0;
    for (int64_t c = 0; c < call.chunks; ++c) total += partials[c];
    norm = std::sqrt(total);
    if (call.grad_norm_out != nullptr) {
      if (call.grad_norm_dtype == DType::Float64) {
        *static_cast<double*>(call.grad_norm_out) = norm;
      } else {
        *static_cast<float*>(call.grad_norm_out) = static_cast<float>(norm);
      }
    }
  }

  const int64_t t = *call.step;
  const StepScalars s = step_scalars(t, norm, o.beta1, o.beta2, o.max_grad_norm, o.total_steps);
  parallel_for(0, call.chunks, kChunkElements, [&](int64_t c) {
    const ChunkRange r = locate(ends, call, c);
    const AdamParam& p = call.params[r.tensor];
    const AdamCoefficients<T> k =
        adam_coefficients<T>(s, p.lr, o.beta1, o.beta2, o.eps, o.weight_decay);
    const T* grad = static_cast<const T*>(p.grad.data);
    T* param = static_cast<T*>(p.param.data);
    T* exp_avg = static_cast<T*>(p.exp_avg.data);
    T* exp_avg_sq = static_cast<T*>(p.exp_avg_sq.data);
    for (int64_t i = r.begin; i < r.end; ++i) {
      adam_update(k, grad[i], param[i], exp_avg[i], exp_avg_sq[i]);
    }
  });
  *call.step = t + 1;
}

}  // namespace

void adam_step_cpu(const AdamCall& call) {
  dispatch_float_types(call.op, call.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    run<T>(call);
  });
}

}  // namespace fieldfuse::detail::optim
