// SPDX-License-Identifier: Apache-2.0
// The K-Planes staging decision (Note [plane staging]): which levels a CUDA call copies
// channels-last and what that adds to the workspace. The decision reads metadata only, so it is
// tested here on CUDA-device problems without a GPU; the copies themselves run in the Python CUDA
// tests (tests/python/test_kplanes_layouts.py).
#include <gtest/gtest.h>

#include <cstdint>

#include "kplanes/kplanes_drivers.h"
#include "kplanes/kplanes_staging.h"

namespace {

using fieldfuse::Device;
using fieldfuse::DeviceType;
using fieldfuse::DType;
using fieldfuse::detail::kplanes::channels_last;
using fieldfuse::detail::kplanes::Level;
using fieldfuse::detail::kplanes::plan_staging;
using fieldfuse::detail::kplanes::PlaneView;
using fieldfuse::detail::kplanes::Problem;
using fieldfuse::detail::kplanes::Staging;

PlaneView nchw(int64_t p, int64_t c, int64_t h, int64_t w) {
  return {p, c, h, w, c * h * w, h * w, w, 1};
}

/// Bytes of a level's channels-last copy: rounded up to 256 like channels_last_bytes.
std::size_t copy_bytes(const PlaneView& v, std::size_t element) {
  return (static_cast<std::size_t>(v.numel()) * element + 255) / 256 * 256;
}

Problem problem(std::initializer_list<PlaneView> views, DType plane_dtype,
                DeviceType device = DeviceType::CUDA) {
  Problem pb;
  pb.op = "kplanes_tilted";
  pb.dtype = DType::Float32;
  pb.plane_dtype = plane_dtype;
  pb.device = Device{device, 0};
  for (const PlaneView& v : views) {
    Level level;
    level.view = v;
    pb.levels.push_back(level);
  }
  return pb;
}

TEST(KPlanesStaging, ChannelsLastLevelsAreReadInPlace) {
  const Problem pb =
      problem({channels_last(nchw(6, 8, 12, 10)), channels_last(nchw(6, 5, 7, 9))}, DType::Float32);
  for (bool deterministic : {false, true}) {
    const Staging s = plan_staging(pb, true, deterministic);
    EXPECT_EQ(s.bytes, 0u);
    EXPECT_FALSE(s.planes[0] || s.planes[1] || s.grads[0] || s.grads[1]);
  }
}

TEST(KPlanesStaging, NchwLevelsAreStagedWithTheirGradients) {
  const PlaneView a = nchw(6, 8, 12, 10), b = nchw(6, 5, 7, 9);
  const Problem pb = problem({a, b}, DType::Float32);
  const std::size_t planes = copy_bytes(a, 4) + copy_bytes(b, 4);
  const Staging forward = plan_staging(pb, false, false);
  EXPECT_TRUE(forward.planes[0] && forward.planes[1]);
  EXPECT_FALSE(forward.grads[0] || forward.grads[1]);
  EXPECT_EQ(forward.bytes, planes + 256);  // 256: the region's own alignment
  const Staging backward = plan_staging(pb, true, false);
  EXPECT_TRUE(backward.grads[0] && backward.grads[1]);
  EXPECT_EQ(backward.bytes, 2 * planes + 256);
}

TEST(KPlanesStaging, SixteenBitDefaultGradientsUseTheDriversAccumulators) {
  const PlaneView a = nchw(6, 8, 12, 10);
  const Problem pb = problem({a}, DType::BFloat16);
  const Staging default_path = plan_staging(pb, true, false);
  EXPECT_TRUE(default_path.planes[0]);
  EXPECT_FALSE(default_path.grads[0]);
  EXPECT_EQ(default_path.bytes, copy_bytes(a, 2) + 256);
  const Staging deterministic = plan_staging(pb, true, true);
  EXPECT_TRUE(deterministic.grads[0]);
  EXPECT_EQ(deterministic.bytes, 2 * copy_bytes(a, 2) + 256);
}

TEST(KPlanesStaging, TheDecisionFollowsTheVectorPathsConditions) {
  // One channel: adjacent in any layout.
  EXPECT_EQ(plan_staging(problem({nchw(3, 1, 9, 9)}, DType::Float32), false, false).bytes, 0u);
  // Channels adjacent, C % 4 != 0: read in place whatever the other strides.
  PlaneView odd = channels_last(nchw(3, 6, 9, 9));
  odd.stride_x = 7, odd.stride_y = 63, odd.stride_k = 567;
  EXPECT_EQ(plan_staging(problem({odd}, DType::Float32), false, false).bytes, 0u);
  // C % 4 == 0 with a stride that is not a multiple of 4: staged, so the kernels get vectors.
  PlaneView padded = channels_last(nchw(3, 8, 9, 9));
  padded.stride_x = 9, padded.stride_y = 81, padded.stride_k = 729;
  EXPECT_TRUE(plan_staging(problem({padded}, DType::Float32), false, false).planes[0]);
  // ... and a sliced view whose strides stay multiples of 4 is not.
  padded.stride_x = 24, padded.stride_y = 216, padded.stride_k = 1944;
  EXPECT_EQ(plan_staging(problem({padded}, DType::Float32), false, false).bytes, 0u);
  // Expanded channels (stride 0) are staged like NCHW.
  PlaneView expanded = nchw(3, 4, 9, 9);
  expanded.stride_c = 0;
  EXPECT_TRUE(plan_staging(problem({expanded}, DType::Float32), false, false).planes[0]);
}

TEST(KPlanesStaging, TheCpuReadsEveryLayoutInPlace) {
  const Problem pb = problem({nchw(6, 8, 12, 10)}, DType::Float32, DeviceType::CPU);
  const Staging s = plan_staging(pb, true, true);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_FALSE(s.planes[0] || s.grads[0]);
}

}  // namespace
