// SPDX-License-Identifier: Apache-2.0
// The embedded tomography phantom: ellipsoids (a soft body, inclusions) and small dense particles,
// voxelised exactly for the truth and projected analytically (chord lengths) for the data.
#include "tomo_phantom.h"

#include "core/parallel.h"

namespace fieldfuse::cli {
namespace {

// Particles a few voxels across at 64^3 (voxel 2/64 ≈ 0.031): the fine detail the missing wedge
// smears along z.
constexpr double kParticleRadius = 0.06;
constexpr double kParticleDensity = 2.0;

// Offset of sub-sample s of `count` inside a cell of unit width centred on 0.
double sub_offset(int s, int count) { return (s + 0.5) / count - 0.5; }

}  // namespace

std::vector<PhantomPart> embedded_phantom() {
  std::vector<PhantomPart> parts = {
      // semi-axes (x, y, z)      centre (x, y, z)        about z   density
      {{{0.80, 0.70, 0.30}, {0.00, 0.00, 0.00}, 0.0}, 0.50},       // the body
      {{{0.22, 0.14, 0.12}, {-0.35, 0.25, 0.05}, 30.0}, 0.40},     // a dense inclusion
      {{{0.18, 0.25, 0.10}, {0.30, -0.20, -0.05}, -20.0}, -0.25},  // a light vacuole
      {{{0.12, 0.08, 0.15}, {0.10, 0.35, 0.00}, 60.0}, 0.30},      // a small inclusion
  };
  const double particles[][3] = {{-0.50, -0.40, 0.10},  {0.55, 0.35, -0.12}, {0.00, 0.00, 0.00},
                                 {-0.20, -0.10, -0.16}, {0.40, -0.45, 0.12}, {-0.55, 0.40, -0.05}};
  for (const auto& centre : particles) {
    parts.push_back({{{kParticleRadius, kParticleRadius, kParticleRadius},
                      {centre[0], centre[1], centre[2]},
                      0.0},
                     kParticleDensity});
  }
  return parts;
}

Volume voxelise_phantom(const std::vector<PhantomPart>& parts, std::int64_t depth,
                        std::int64_t height, std::int64_t width, int supersample) {
  Volume volume(depth, height, width);
  const double weight = 1.0 / (static_cast<double>(supersample) * supersample * supersample);
  const auto plane_work = static_cast<std::int64_t>(height * width * supersample * supersample *
                                                    supersample * parts.size());
  fieldfuse::detail::parallel_for(0, depth, plane_work, [&](std::int64_t d) {
    for (std::int64_t h = 0; h < height; ++h) {
      for (std::int64_t w = 0; w < width; ++w) {
        double sum = 0.0;
        for (int sz = 0; sz < supersample; ++sz) {
          const double z = cell_centre(d + sub_offset(sz, supersample), depth);
          for (int sy = 0; sy < supersample; ++sy) {
            const double y = cell_centre(h + sub_offset(sy, supersample), height);
            for (int sx = 0; sx < supersample; ++sx) {
              const double x = cell_centre(w + sub_offset(sx, supersample), width);
              for (const PhantomPart& part : parts) {
                if (ellipsoid_contains(part.shape, x, y, z)) sum += part.density;
              }
            }
          }
        }
        volume.voxels[static_cast<std::size_t>((d * height + h) * width + w)] =
            static_cast<float>(sum * weight);
      }
    }
  });
  return volume;
}

Volume project_phantom(const std::vector<PhantomPart>& parts, const std::vector<double>& rotations,
                       std::int64_t detector_height, std::int64_t detector_width, int supersample) {
  const auto count = static_cast<std::int64_t>(rotations.size() / 9);
  Volume stack(count, detector_height, detector_width);
  const double weight = 1.0 / (static_cast<double>(supersample) * supersample);
  const auto row_work =
      static_cast<std::int64_t>(detector_width * supersample * supersample * parts.size());
  fieldfuse::detail::parallel_for(0, count * detector_height, row_work, [&](std::int64_t row) {
    const std::int64_t m = row / detector_height;
    const std::int64_t i = row % detector_height;
    const double* r = rotations.data() + 9 * m;
    // The ray direction R·e_z: the third column.
    const double direction[3] = {r[2], r[5], r[8]};
    for (std::int64_t j = 0; j < detector_width; ++j) {
      double sum = 0.0;
      for (int sv = 0; sv < supersample; ++sv) {
        const double v = cell_centre(i + sub_offset(sv, supersample), detector_height);
        for (int su = 0; su < supersample; ++su) {
          const double u = cell_centre(j + sub_offset(su, supersample), detector_width);
          // The ray's point at t = 0: R·(u, v, 0).
          const double origin[3] = {r[0] * u + r[1] * v, r[3] * u + r[4] * v, r[6] * u + r[7] * v};
          for (const PhantomPart& part : parts) {
            sum += part.density * ellipsoid_chord(part.shape, origin, direction);
          }
        }
      }
      stack.voxels[static_cast<std::size_t>(row * detector_width + j)] =
          static_cast<float>(sum * weight);
    }
  });
  return stack;
}

}  // namespace fieldfuse::cli
