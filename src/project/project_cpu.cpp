// SPDX-License-Identifier: Apache-2.0
// CPU driver of the project family: OpenMP over detector rows (forward) or voxel rows (back
// projection), each element summed by the routines of project_math.h on one thread. Elements own
// disjoint outputs, so nothing is reduced across threads and results do not depend on the thread
// count. Built with -ffp-contract=off (Note [bit-identical weights]).
#include <cstdint>
#include <vector>

#include "core/dispatch.h"
#include "core/parallel.h"
#include "project/project_drivers.h"
#include "project/project_math.h"

namespace fieldfuse::detail::project {
namespace {

/// The geometry of every projection, computed once per call (n small structs).
template <class T>
std::vector<Geometry<T>> geometries(const ProjectArgs& a) {
  std::vector<Geometry<T>> g(static_cast<size_t>(a.count));
  for (int64_t m = 0; m < a.count; ++m) {
    g[static_cast<size_t>(m)] =
        make_geometry<T>(load_pose<T>(a, m), a.volume.sizes, a.height(), a.width());
  }
  return g;
}

int64_t numel(const Strided3& t) { return t.sizes[0] * t.sizes[1] * t.sizes[2]; }

template <class T>
void forward(const ProjectArgs& a) {
  const Strided3& vol = a.volume;
  const Strided3& out = a.projections;
  const int64_t height = a.height(), width = a.width();
  if (numel(out) == 0) return;
  T* const projections = static_cast<T*>(out.data);
  if (numel(vol) == 0) {  // no voxel to integrate: every ray is 0
    parallel_for(0, a.count * height, width, [&](int64_t row) {
      T* p = projections + (row / height) * out.strides[0] + (row % height) * out.strides[1];
      for (int64_t j = 0; j < width; ++j) p[j * out.strides[2]] = T(0);
    });
    return;
  }
  const std::vector<Geometry<T>> geometry = geometries<T>(a);
  const T* const volume = static_cast<const T*>(vol.data);
  const int64_t longest = vol.sizes[0] > vol.sizes[1] ? vol.sizes[0] : vol.sizes[1];
  const int64_t samples = 4 * (longest > vol.sizes[2] ? longest : vol.sizes[2]);
  parallel_for(0, a.count * height, width * samples, [&](int64_t row) {
    const int64_t m = row / height, i = row % height;
    const Geometry<T>& g = geometry[static_cast<size_t>(m)];
    int bi, ci;
    in_slice_axes(g.axis, bi, ci);
    const int64_t sa = vol.strides[g.axis], sb = vol.strides[bi], sc = vol.strides[ci];
    const auto load = [&](int64_t offset) { return volume[offset]; };
    T* p = projections + m * out.strides[0] + i * out.strides[1];
    for (int64_t j = 0; j < width; ++j) {
      p[j * out.strides[2]] = ray_sum<T, int64_t>(g, i, j, slice_range(g, i, j, vol.sizes),
                                                  vol.sizes[bi], vol.sizes[ci], sa, sb, sc, load);
    }
  });
}

template <class T>
void backward(const ProjectArgs& a) {
  const Strided3& vol = a.volume;
  const Strided3& in = a.projections;
  const int64_t depth = vol.sizes[0], rows = vol.sizes[1], columns = vol.sizes[2];
  if (numel(vol) == 0) return;
  T* const volume = static_cast<T*>(vol.data);
  // No pixel to spread (n = 0 or an empty detector): every voxel is 0.
  const bool nothing = numel(in) == 0;
  const std::vector<Geometry<T>> geometry = nothing ? std::vector<Geometry<T>>{} : geometries<T>(a);
  const T* const projections = static_cast<const T*>(in.data);
  const int64_t height = a.height(), width = a.width();
  // About a dozen candidate pixels per voxel and projection.
  const int64_t work = columns * (nothing ? 1 : 12 * a.count);
  parallel_for(0, depth * rows, work, [&](int64_t zy) {
    const int64_t z = zy / rows, y = zy % rows;
    T* v = volume + z * vol.strides[0] + y * vol.strides[1];
    for (int64_t x = 0; x < columns; ++x) {
      T total = T(0);
      for (size_t m = 0; m < geometry.size(); ++m) {
        const Geometry<T>& g = geometry[m];
        int64_t k, ib, ic;
        along_axes<int64_t>(g.axis, z, y, x, k, ib, ic);
        const T* p = projections + static_cast<int64_t>(m) * in.strides[0];
        const auto load = [&](int64_t i, int64_t j) {
          return p[i * in.strides[1] + j * in.strides[2]];
        };
        total += voxel_sum<T, int64_t>(g, k, ib, ic, height, width, load);
      }
      v[x * vol.strides[2]] = total;
    }
  });
}

}  // namespace

void project_forward_cpu(const ProjectArgs& a) {
  dispatch_float_types(a.op, a.dtype, [&](auto tag) { forward<typename decltype(tag)::type>(a); });
}

void backproject_forward_cpu(const ProjectArgs& a) {
  dispatch_float_types(a.op, a.dtype, [&](auto tag) { backward<typename decltype(tag)::type>(a); });
}

}  // namespace fieldfuse::detail::project
