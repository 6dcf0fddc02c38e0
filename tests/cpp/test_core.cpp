// SPDX-License-Identifier: Apache-2.0
// Tests of the core vocabulary: dtypes, devices, TensorRef views and build facts.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fieldfuse/core.h"

namespace {

using fieldfuse::Device;
using fieldfuse::DeviceType;
using fieldfuse::DType;
using fieldfuse::TensorRef;

struct DTypeFact {
  DType dtype;
  std::size_t size;
  const char* name;
};

TEST(Core, DTypeSizesAndNames) {
  const std::vector<DTypeFact> facts = {
      {DType::Float16, 2, "float16"}, {DType::BFloat16, 2, "bfloat16"},
      {DType::Float32, 4, "float32"}, {DType::Float64, 8, "float64"},
      {DType::Int32, 4, "int32"},     {DType::Int64, 8, "int64"},
      {DType::UInt8, 1, "uint8"},     {DType::Bool, 1, "bool"},
  };
  for (const DTypeFact& f : facts) {
    EXPECT_EQ(fieldfuse::dtype_size(f.dtype), f.size) << f.name;
    EXPECT_STREQ(fieldfuse::dtype_name(f.dtype), f.name);
  }
}

TEST(Core, DeviceStrAndEquality) {
  const Device cpu{};
  const Device cuda0{DeviceType::CUDA, 0};
  const Device cuda3{DeviceType::CUDA, 3};
  EXPECT_EQ(cpu.str(), "cpu");
  EXPECT_EQ(cuda0.str(), "cuda:0");
  EXPECT_EQ(cuda3.str(), "cuda:3");
  EXPECT_FALSE(cpu.is_cuda());
  EXPECT_TRUE(cuda3.is_cuda());
  EXPECT_TRUE(cuda0 != cuda3);
  EXPECT_TRUE(cpu != cuda0);
  EXPECT_TRUE(cuda3 == (Device{DeviceType::CUDA, 3}));
}

TEST(Core, ContiguousViewHasRowMajorStrides) {
  float buf[24];
  const Device dev{DeviceType::CUDA, 1};
  const TensorRef t = TensorRef::contiguous(buf, DType::Float32, dev, {2, 3, 4});
  EXPECT_EQ(t.data, static_cast<void*>(buf));
  EXPECT_EQ(t.dtype, DType::Float32);
  EXPECT_EQ(t.device, dev);
  ASSERT_EQ(t.ndim, 3);
  EXPECT_EQ(std::vector<int64_t>(t.sizes, t.sizes + 3), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(t.strides, t.strides + 3), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.stride(-3), 12);
  EXPECT_EQ(t.size(1), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.shape_str(), "[2, 3, 4]");
}

TEST(Core, ZeroDimAndEmptyViews) {
  double x = 0.0;
  const TensorRef scalar = TensorRef::contiguous(&x, DType::Float64, {}, {});
  EXPECT_EQ(scalar.ndim, 0);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_TRUE(scalar.is_contiguous());
  EXPECT_EQ(scalar.shape_str(), "[]");

  const TensorRef empty = TensorRef::contiguous(nullptr, DType::Float32, {}, {3, 0, 5});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_EQ(empty.shape_str(), "[3, 0, 5]");
  EXPECT_EQ(TensorRef::contiguous(&x, DType::Float64, {}, {7}).shape_str(), "[7]");
}

TEST(Core, StridedViewsAreNotContiguous) {
  float buf[64];
  TensorRef t = TensorRef::contiguous(buf, DType::Float32, {}, {4, 4});
  std::swap(t.strides[0], t.strides[1]);  // a transpose of a square matrix
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.numel(), 16);

  TensorRef padded = TensorRef::contiguous(buf, DType::Float32, {}, {4, 3});
  padded.strides[0] = 4;  // rows of 3 inside rows of 4
  EXPECT_FALSE(padded.is_contiguous());

  TensorRef every_other = TensorRef::contiguous(buf, DType::Float32, {}, {8});
  every_other.strides[0] = 2;
  EXPECT_FALSE(every_other.is_contiguous());
}

TEST(Core, BuildInfoIsConsistent) {
  const fieldfuse::BuildInfo info = fieldfuse::build_info();
  EXPECT_FALSE(info.version.empty());
  EXPECT_GE(info.openmp_max_threads, 1);
  if (!info.openmp) {
    EXPECT_EQ(info.openmp_max_threads, 1);
  }
  EXPECT_EQ(info.cuda, !info.cuda_architectures.empty());
  const int devices = fieldfuse::cuda_device_count();
  EXPECT_GE(devices, 0);
  if (!info.cuda) {
    EXPECT_EQ(devices, 0);
  }
}

}  // namespace

namespace {
// There is one CPU; only CUDA devices are told apart by index.
TEST(Core, CpuDevicesCompareEqualWhateverTheirIndex) {
  using fieldfuse::Device;
  using fieldfuse::DeviceType;
  EXPECT_EQ((Device{DeviceType::CPU, 7}), (Device{DeviceType::CPU, 0}));
  EXPECT_NE((Device{DeviceType::CUDA, 1}), (Device{DeviceType::CUDA, 0}));
  EXPECT_NE((Device{DeviceType::CUDA, 0}), (Device{DeviceType::CPU, 0}));
}
}  // namespace
