// SPDX-License-Identifier: Apache-2.0
// CPU driver of the layout copies: one parallel_for over the (plane, row) pairs of the dense side.
#include <type_traits>

#include "core/layout_copy_drivers.h"
#include "core/parallel.h"

namespace fieldfuse::detail::layout {
namespace {

template <bool kToChannelsLast, class S, class D, class Convert>
void copy_rows(const LayoutCopy& copy, Convert convert) {
  const PlaneLayout& v = copy.strided;
  const int64_t rows = v.planes * v.height, cells = v.cells(), channels = v.channels;
  auto* strided = static_cast<std::conditional_t<kToChannelsLast, const S, D>*>(copy.strided_data);
  auto* dense = static_cast<std::conditional_t<kToChannelsLast, D, const S>*>(copy.dense_data);
  // A dense row (W·C elements, a few KB) stays in L1, so walking channels outside and x inside
  // reads an NCHW source (or writes an NCHW destination) along its contiguous rows; the strided
  // accesses fall on the cached dense row.
  parallel_for(0, rows, v.width * channels, [&](int64_t r) {
    const int64_t p = r / v.height, y = r - p * v.height;
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t x = 0; x < v.width; ++x) {
        const int64_t d = channels_last_index(p, c, y * v.width + x, cells, channels);
        const int64_t o = v.offset(p, c, y, x);
        if constexpr (kToChannelsLast) {
          dense[d] = convert(strided[o]);
        } else {
          strided[o] = convert(dense[d]);
        }
      }
    }
  });
}

}  // namespace

void copy_cpu(const LayoutCopy& copy) {
  visit_copy_types(copy, [&](auto src_tag, auto dst_tag, auto convert) {
    using S = typename decltype(src_tag)::type;
    using D = typename decltype(dst_tag)::type;
    if (copy.to_channels_last) {
      copy_rows<true, S, D>(copy, convert);
    } else {
      copy_rows<false, S, D>(copy, convert);
    }
  });
}

}  // namespace fieldfuse::detail::layout
