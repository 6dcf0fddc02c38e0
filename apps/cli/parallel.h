// SPDX-License-Identifier: Apache-2.0
// Host loops of the app spread over OpenMP threads when the build has OpenMP, serial otherwise.
#pragma once

#include <cstdint>
#include <vector>

namespace fieldfuse::cli {

/// Calls `body(i)` for every i in [0, count). Iterations must be independent.
template <class Body>
void parallel_for(std::int64_t count, const Body& body) {
#if defined(_OPENMP)
#pragma omp parallel for schedule(static)
#endif
  for (std::int64_t i = 0; i < count; ++i) body(i);
}

/// Sums `term(i)` over [0, count) with a fixed association order (fixed-size chunks, added in chunk
/// order), so the result does not depend on the number of threads. The sum's type is `term`'s
/// return type, which needs a zero default value and `+`.
template <class Term>
auto ordered_sum(std::int64_t count, const Term& term) -> decltype(term(std::int64_t{0})) {
  using Sum = decltype(term(std::int64_t{0}));
  constexpr std::int64_t kChunk = 1 << 14;  // small enough to balance 2 threads on small volumes
  const std::int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<Sum> partial(static_cast<std::size_t>(chunks), Sum{});
  parallel_for(chunks, [&](std::int64_t chunk) {
    const std::int64_t end = chunk * kChunk + kChunk < count ? chunk * kChunk + kChunk : count;
    Sum sum{};
    for (std::int64_t i = chunk * kChunk; i < end; ++i) sum = sum + term(i);
    partial[static_cast<std::size_t>(chunk)] = sum;
  });
  Sum total{};
  for (const Sum& value : partial) total = total + value;
  return total;
}

}  // namespace fieldfuse::cli
