// SPDX-License-Identifier: Apache-2.0
// CPU driver of the solvers' element-wise steps: OpenMP loops over the formulas in vector_ops.h.
#include "core/ordered_sum.h"
#include "core/parallel.h"
#include "vector_ops.h"

namespace fieldfuse::cli::cpu {

template <class Args>
PairSum run(std::int64_t count, const Args& args) {
  if constexpr (Args::kReturnsSums) {
    return fieldfuse::detail::ordered_sum(count, [&](std::int64_t i) { return apply_at(args, i); });
  } else {
    fieldfuse::detail::parallel_for(0, count, 1, [&](std::int64_t i) { apply_at(args, i); });
    return {};
  }
}

template PairSum run(std::int64_t, const GradientStepArgs&);
template PairSum run(std::int64_t, const ExtrapolateArgs&);
template PairSum run(std::int64_t, const FrankWolfeSumsArgs&);
template PairSum run(std::int64_t, const FrankWolfeMoveArgs&);
template PairSum run(std::int64_t, const SquaredDistanceArgs&);
template PairSum run(std::int64_t, const ReplicateArgs&);
template PairSum run(std::int64_t, const FoldReplicasArgs&);

}  // namespace fieldfuse::cli::cpu
