// SPDX-License-Identifier: Apache-2.0
// The analytic tomography phantom (tomo_phantom.h): its parts, their voxelisation and exact
// projection, and the validating fronts.
#include <string>
#include <vector>

#include "core/check.h"
#include "core/parallel.h"
#include "fieldfuse/tomo_phantom.h"
#include "tomo/phantom_parts.h"

namespace fieldfuse {
namespace detail::tomo {
namespace {

// Particles a few voxels across at 64^3 (voxel 2/64 ≈ 0.031): the fine detail the missing wedge
// smears along z.
constexpr double kParticleRadius = 0.06;
constexpr double kParticleDensity = 2.0;
// 16^3 points per voxel already resolve a partial volume to 1/4096; more only costs time.
constexpr int kMaxSupersample = 16;

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

template <class T>
void voxelise_parts(const std::vector<PhantomPart>& parts, T* volume, int64_t depth, int64_t height,
                    int64_t width, int supersample) {
  const double weight = 1.0 / (static_cast<double>(supersample) * supersample * supersample);
  const auto plane_work = static_cast<int64_t>(height * width * supersample * supersample *
                                               supersample * static_cast<int64_t>(parts.size()));
  parallel_for(0, depth, plane_work, [&](int64_t d) {
    for (int64_t h = 0; h < height; ++h) {
      for (int64_t w = 0; w < width; ++w) {
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
        volume[(d * height + h) * width + w] = static_cast<T>(sum * weight);
      }
    }
  });
}

template <class T>
void project_parts(const std::vector<PhantomPart>& parts, const double* rotations, T* projections,
                   int64_t count, int64_t detector_height, int64_t detector_width,
                   int supersample) {
  const double weight = 1.0 / (static_cast<double>(supersample) * supersample);
  const auto row_work = static_cast<int64_t>(detector_width * supersample * supersample *
                                             static_cast<int64_t>(parts.size()));
  parallel_for(0, count * detector_height, row_work, [&](int64_t row) {
    const int64_t m = row / detector_height;
    const int64_t i = row % detector_height;
    const double* r = rotations + 9 * m;
    // The ray direction R·e_z: the third column.
    const double direction[3] = {r[2], r[5], r[8]};
    for (int64_t j = 0; j < detector_width; ++j) {
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
      projections[row * detector_width + j] = static_cast<T>(sum * weight);
    }
  });
}

template void voxelise_parts<float>(const std::vector<PhantomPart>&, float*, int64_t, int64_t,
                                    int64_t, int);
template void voxelise_parts<double>(const std::vector<PhantomPart>&, double*, int64_t, int64_t,
                                     int64_t, int);
template void project_parts<float>(const std::vector<PhantomPart>&, const double*, float*, int64_t,
                                   int64_t, int64_t, int);
template void project_parts<double>(const std::vector<PhantomPart>&, const double*, double*,
                                    int64_t, int64_t, int64_t, int);

namespace {

void check_supersample(const char* op, int supersample) {
  if (supersample < 1 || supersample > kMaxSupersample) {
    fail(ErrorKind::Value, op,
         "expected supersample to be in [1, " + std::to_string(kMaxSupersample) + "], but got " +
             std::to_string(supersample));
  }
}

void check_on_cpu(const char* op, const char* arg, const TensorRef& t) {
  if (t.device.is_cuda()) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " on the CPU (the phantom is computed on the host), " +
             "but got it on " + t.device.str());
  }
}

// A host, contiguous, 3-D float32 or float64 array the function writes.
void check_host_output(const char* op, const char* arg, const TensorRef& t, const char* layout) {
  check_storage(op, arg, t);
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, op,
         std::string("expected ") + arg + " to have dtype float32 or float64, but got " +
             dtype_name(t.dtype));
  }
  check_on_cpu(op, arg, t);
  if (t.ndim != 3) {
    fail(ErrorKind::Value, op,
         std::string("expected ") + arg + " to have shape " + layout + " (3 dims), but got shape " +
             t.shape_str());
  }
  check_contiguous(op, arg, t);
}

}  // namespace
}  // namespace detail::tomo

void tomo_phantom_volume(const TensorRef& volume, int supersample) {
  using namespace detail::tomo;
  const char* op = "tomo_phantom_volume";
  check_host_output(op, "volume", volume, "[D, H, W]");
  check_supersample(op, supersample);
  const std::vector<PhantomPart> parts = embedded_phantom();
  if (volume.dtype == DType::Float32) {
    voxelise_parts(parts, static_cast<float*>(volume.data), volume.sizes[0], volume.sizes[1],
                   volume.sizes[2], supersample);
  } else {
    voxelise_parts(parts, static_cast<double*>(volume.data), volume.sizes[0], volume.sizes[1],
                   volume.sizes[2], supersample);
  }
}

void tomo_phantom_projections(const TensorRef& rotations, const TensorRef& projections,
                              int supersample) {
  using namespace detail;
  using namespace detail::tomo;
  const char* op = "tomo_phantom_projections";
  check_host_output(op, "projections", projections, "[n, Hd, Wd]");
  const int64_t n = projections.sizes[0];
  check_storage(op, "rotations", rotations);
  if (rotations.ndim != 3 || rotations.sizes[0] != n || rotations.sizes[1] != 3 ||
      rotations.sizes[2] != 3) {
    fail(ErrorKind::Value, op,
         "expected rotations to have shape [" + std::to_string(n) +
             ", 3, 3] (one per projection), but got shape " + rotations.shape_str());
  }
  check_dtype(op, "rotations", rotations, DType::Float64,
              "the poses' dtype (they are read in double precision)");
  check_on_cpu(op, "rotations", rotations);
  check_supersample(op, supersample);
  // Any strides: gathered into n row-major matrices.
  std::vector<double> poses(static_cast<std::size_t>(9 * n));
  const auto* base = static_cast<const double*>(rotations.data);
  for (int64_t m = 0; m < n; ++m) {
    for (int64_t r = 0; r < 3; ++r) {
      for (int64_t c = 0; c < 3; ++c) {
        poses[static_cast<std::size_t>(9 * m + 3 * r + c)] =
            base[m * rotations.strides[0] + r * rotations.strides[1] + c * rotations.strides[2]];
      }
    }
  }
  const std::vector<PhantomPart> parts = embedded_phantom();
  if (projections.dtype == DType::Float32) {
    project_parts(parts, poses.data(), static_cast<float*>(projections.data), n,
                  projections.sizes[1], projections.sizes[2], supersample);
  } else {
    project_parts(parts, poses.data(), static_cast<double*>(projections.data), n,
                  projections.sizes[1], projections.sizes[2], supersample);
  }
}

}  // namespace fieldfuse
