// SPDX-License-Identifier: Apache-2.0
// Argument validation of the tv family: each bad argument raises fieldfuse::Error naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tv_test_util.h"

namespace fftest {
namespace {

using fieldfuse::DeviceType;
using fieldfuse::ErrorKind;

constexpr size_t kWorkspaceBytes = 1 << 20;  // more than any CPU forward here asks for
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// Valid float32 arguments for every entry point of an op; each test breaks exactly one.
struct Args {
  HostTensor<float> in, out, grad_out, grad_in;
  mutable std::vector<unsigned char> workspace = std::vector<unsigned char>(kWorkspaceBytes);
  size_t workspace_bytes = kWorkspaceBytes;
};

Args valid_args(const TvOp& op, const Shape& shape = {4, 5, 6}) {
  Args a;
  a.in = make_tensor<float>(shape, random_values<float>(naive::numel(shape), 7u));
  a.out = make_tensor<float>(op.out_shape());
  a.grad_out = make_tensor<float>(op.out_shape(), std::vector<double>(op.num_outputs, 1.0));
  a.grad_in = make_tensor<float>(shape);
  return a;
}

void call_forward(const TvOp& op, const Args& a) {
  op.forward(a.in.ref, a.out.ref, a.workspace.data(), a.workspace_bytes);
}
void call_backward(const TvOp& op, const Args& a) {
  op.backward(a.in.ref, a.grad_out.ref, a.grad_in.ref);
}

/// tv_weighted_l1 called directly, for weight arrays the op table cannot hold.
void call_weighted_forward(const Args& a, const double* weights, int num_weights) {
  fieldfuse::tv_weighted_l1_forward(a.in.ref, weights, num_weights, a.out.ref, a.workspace.data(),
                                    a.workspace_bytes);
}
void call_weighted_backward(const Args& a, const double* weights, int num_weights) {
  fieldfuse::tv_weighted_l1_backward(a.in.ref, weights, num_weights, a.grad_out.ref, a.grad_in.ref);
}

/// Expects the same error from forward and from backward.
void expect_error_both(const TvOp& op, const Args& a, ErrorKind kind,
                       const std::vector<std::string>& parts) {
  SCOPED_TRACE(op.id);
  {
    SCOPED_TRACE("forward");
    expect_error([&] { call_forward(op, a); }, kind, parts);
  }
  {
    SCOPED_TRACE("backward");
    expect_error([&] { call_backward(op, a); }, kind, parts);
  }
}

class TvValidation : public testing::TestWithParam<std::string> {
 protected:
  const TvOp& op() const { return op_by_id(GetParam()); }
};

TEST_P(TvValidation, ValidArgumentsAreAccepted) {
  const Args a = valid_args(op());
  ASSERT_LE(op().workspace_size(a.in.ref), kWorkspaceBytes);
  EXPECT_NO_THROW(call_forward(op(), a));
  EXPECT_NO_THROW(call_backward(op(), a));
}

TEST_P(TvValidation, WorkspaceSizeIsAtLeastOneByte) {
  EXPECT_GE(op().workspace_size(valid_args(op()).in.ref), 1u);
  if (op().size1_axes_ok) {
    EXPECT_GE(op().workspace_size(valid_args(op(), {0, 5, 6}).in.ref), 1u);
  }
}

TEST_P(TvValidation, TooFewDims) {
  // [2, 5] for the 3-D ops; one dim fewer than the number of weights for weighted L1.
  const Shape shape = op().num_axes == 3 ? Shape{2, 5} : Shape{5};
  const Args a = valid_args(op(), shape);
  const std::string shape_str = op().num_axes == 3 ? "[2, 5]" : "[5]";
  expect_error_both(op(), a, ErrorKind::Value, {op().api, op().in_name, shape_str});
}

TEST_P(TvValidation, IntegerInputIsTypeError) {
  Args a = valid_args(op());
  a.in.ref.dtype = DType::Int32;
  a.grad_in.ref.dtype = DType::Int32;
  expect_error_both(op(), a, ErrorKind::Type, {op().api, op().in_name, "int32"});
}

// 16-bit inputs are CUDA-only; their outputs and upstream gradients are float32.
TEST_P(TvValidation, Float16OnCpuIsNotImplemented) {
  Args a = valid_args(op());
  a.in.ref.dtype = DType::Float16;
  a.grad_in.ref.dtype = DType::Float16;
  expect_error_both(op(), a, ErrorKind::NotImplemented, {op().api, op().in_name, "float16"});
}

TEST_P(TvValidation, NullInputData) {
  Args a = valid_args(op());
  a.in.ref.data = nullptr;
  expect_error_both(op(), a, ErrorKind::Value, {op().api, op().in_name});
}

TEST_P(TvValidation, OutWrongNumel) {
  Args a = valid_args(op());
  a.out = make_tensor<float>({op().num_outputs + 1});
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Value, {op().api, "out"});
}

TEST_P(TvValidation, OutWrongDtype) {
  Args a = valid_args(op());
  a.out.ref.dtype = DType::Float64;
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Type, {op().api, "out", "float64"});
}

TEST_P(TvValidation, OutOnOtherDevice) {
  Args a = valid_args(op());
  a.out.ref.device = {DeviceType::CUDA, 0};
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Value,
               {op().api, "out", op().in_name, "cuda"});
}

TEST_P(TvValidation, NullOutData) {
  Args a = valid_args(op());
  a.out.ref.data = nullptr;
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Value, {op().api, "out"});
}

TEST_P(TvValidation, WorkspaceTooSmall) {
  Args a = valid_args(op());
  a.workspace_bytes = op().workspace_size(a.in.ref) - 1;
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Value, {op().api, "workspace"});
}

TEST_P(TvValidation, GradOutWrongNumel) {
  Args a = valid_args(op());
  a.grad_out = make_tensor<float>({op().num_outputs + 1}, std::vector<double>(4, 1.0));
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value, {op().api, "grad_out"});
}

TEST_P(TvValidation, GradOutWrongDtype) {
  Args a = valid_args(op());
  a.grad_out.ref.dtype = DType::Float64;
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Type, {op().api, "grad_out"});
}

TEST_P(TvValidation, NullGradOutData) {
  Args a = valid_args(op());
  a.grad_out.ref.data = nullptr;
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value, {op().api, "grad_out"});
}

// Same numel, different shape: still rejected.
TEST_P(TvValidation, GradInShapeDiffersFromInput) {
  for (const Shape& shape : std::vector<Shape>{{4, 5, 7}, {5, 4, 6}, {1, 4, 5, 6}}) {
    Args a = valid_args(op());
    a.grad_in = make_tensor<float>(shape);
    expect_error([&] { call_backward(op(), a); }, ErrorKind::Value, {op().api, op().grad_name()});
  }
}

TEST_P(TvValidation, GradInOnOtherDevice) {
  Args a = valid_args(op());
  a.grad_in.ref.device = {DeviceType::CUDA, 0};
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value,
               {op().api, op().grad_name(), "cuda"});
}

TEST_P(TvValidation, NullGradInData) {
  Args a = valid_args(op());
  a.grad_in.ref.data = nullptr;
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value, {op().api, op().grad_name()});
}

// Outputs are written while inputs are read, so a shared byte range would corrupt the result.
TEST_P(TvValidation, GradInOverlappingInputIsRejected) {
  Args a = valid_args(op());
  a.grad_in.ref = a.in.ref;
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value,
               {op().api, op().grad_name(), "overlap"});
}

TEST_P(TvValidation, ExpandedGradInIsRejected) {
  Args a = valid_args(op());
  a.grad_in.ref.strides[0] = 0;  // every depth plane would alias the first
  expect_error([&] { call_backward(op(), a); }, ErrorKind::Value,
               {op().api, op().grad_name(), "stride 0"});
}

TEST_P(TvValidation, OutInsideInputIsRejected) {
  Args a = valid_args(op());
  a.out.ref.data = a.in.ref.data;
  expect_error([&] { call_forward(op(), a); }, ErrorKind::Value, {op().api, "out", "overlap"});
}

TEST_P(TvValidation, MisalignedWorkspaceIsRejected) {
  Args a = valid_args(op());
  expect_error(
      [&] { op().forward(a.in.ref, a.out.ref, a.workspace.data() + 4, a.workspace_bytes - 4); },
      ErrorKind::Value, {op().api, "workspace", "aligned"});
}

std::vector<std::string> op_ids() {
  std::vector<std::string> ids;
  for (const TvOp& op : all_ops()) ids.push_back(op.id);
  return ids;
}

INSTANTIATE_TEST_SUITE_P(Tv, TvValidation, testing::ValuesIn(op_ids()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// ---- op-specific arguments
// ------------------------------------------------------------------------

TEST(TvIsoValidation, EpsMustBeFiniteAndNonNegative) {
  for (double eps : {-1e-3, kNaN, kInf}) {
    SCOPED_TRACE("eps " + std::to_string(eps));
    expect_error_both(make_iso_op(eps, "iso"), valid_args(make_iso_op(eps, "iso")),
                      ErrorKind::Value, {"tv_iso_3d", "eps"});
  }
  const TvOp zero_eps = make_iso_op(0.0, "iso");
  EXPECT_NO_THROW(call_forward(zero_eps, valid_args(zero_eps)));
}

TEST(TvWeightedValidation, NumWeightsMustBeTwoOrThree) {
  const std::vector<double> w = {0.1, 0.1, 0.1, 0.1};
  const Args a = valid_args(make_weighted_op({0.1, 0.1, 0.1}, "wl1"), {3, 4, 5, 6});
  for (int k : {0, 1, 4}) {
    const std::vector<std::string> parts = {"tv_weighted_l1", "weights",
                                            "got " + std::to_string(k)};
    expect_error([&] { call_weighted_forward(a, w.data(), k); }, ErrorKind::Value, parts);
    expect_error([&] { call_weighted_backward(a, w.data(), k); }, ErrorKind::Value, parts);
  }
}

TEST(TvWeightedValidation, WeightsMustBeFiniteAndNonNegative) {
  for (double bad : {-0.1, kNaN, kInf}) {
    SCOPED_TRACE("weight " + std::to_string(bad));
    const TvOp op = make_weighted_op({0.2, bad, 0.2}, "wl1");
    expect_error_both(op, valid_args(op), ErrorKind::Value, {"tv_weighted_l1", "weights"});
  }
}

TEST(TvWeightedValidation, NullWeights) {
  const Args a = valid_args(make_weighted_op({0.1, 0.1, 0.1}, "wl1"));
  const std::vector<std::string> parts = {"tv_weighted_l1", "weights"};
  expect_error([&] { call_weighted_forward(a, nullptr, 3); }, ErrorKind::Value, parts);
  expect_error([&] { call_weighted_backward(a, nullptr, 3); }, ErrorKind::Value, parts);
}

// A size-1 axis with a nonzero weight has no differences to average (the PyTorch loop would return
// NaN): the message names the axis and its weight. A zero weight on it is fine.
TEST(TvWeightedValidation, SizeOneAxisWithNonzeroWeight) {
  const TvOp op3 = make_weighted_op({0.0, 0.5, 0.25}, "wl1");
  expect_error_both(op3, valid_args(op3, {8, 1, 20}), ErrorKind::Value,
                    {"tv_weighted_l1", "axis 1", "weights[1]", "0.5"});
  const TvOp op2 = make_weighted_op({0.75, 0.25}, "wl1");
  expect_error_both(op2, valid_args(op2, {1, 20}), ErrorKind::Value,
                    {"tv_weighted_l1", "axis 0", "weights[0]", "0.75"});
  const TvOp zero_on_size1 = make_weighted_op({0.0, 0.5}, "wl1");
  EXPECT_NO_THROW(call_forward(zero_on_size1, valid_args(zero_on_size1, {1, 20})));
}

TEST(TvWeightedValidation, EmptyArrayWithNonzeroWeight) {
  const TvOp op = make_weighted_op({0.0, 0.3, 0.3}, "wl1");
  expect_error_both(op, valid_args(op, {0, 24, 20}), ErrorKind::Value, {"tv_weighted_l1", "array"});
}

}  // namespace
}  // namespace fftest
