// SPDX-License-Identifier: Apache-2.0
// A host sum whose association order is fixed by the element count alone, over the core's
// parallel_for, so host reductions (metrics, the app's solver) repeat bit for bit on any number of
// threads.
#pragma once

#include <cstdint>
#include <vector>

#include "core/parallel.h"

namespace fieldfuse::detail {

/// Sums `term(i)` over [0, count) in fixed-size chunks added in chunk order. The sum's type is
/// `term`'s return type, which needs a zero default value and `+`; `term` must not throw.
template <class Term>
auto ordered_sum(std::int64_t count, const Term& term) -> decltype(term(std::int64_t{0})) {
  using Sum = decltype(term(std::int64_t{0}));
  constexpr std::int64_t kChunk = 1 << 14;  // small enough to balance 2 threads on small volumes
  const std::int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<Sum> partial(static_cast<std::size_t>(chunks), Sum{});
  parallel_for(0, chunks, kChunk, [&](std::int64_t chunk) {
    const std::int64_t end = chunk * kChunk + kChunk < count ? chunk * kChunk + kChunk : count;
    Sum sum{};
    for (std::int64_t i = chunk * kChunk; i < end; ++i) sum = sum + term(i);
    partial[static_cast<std::size_t>(chunk)] = sum;
  });
  Sum total{};
  for (const Sum& value : partial) total = total + value;
  return total;
}

}  // namespace fieldfuse::detail
