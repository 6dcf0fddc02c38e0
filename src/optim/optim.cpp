// SPDX-License-Identifier: Apache-2.0
// The optim front: validates every argument of adam_step, sizes its workspace and picks the CPU
// or CUDA driver. All checks live here, so C++ and Python callers see the same messages.
#include "fieldfuse/optim.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "core/check.h"
#include "optim/optim_drivers.h"

namespace fieldfuse {
namespace {

using detail::fail;
using detail::is_absent;
using detail::number_text;
using detail::optim::AdamCall;

constexpr const char* kOp = "adam_step";

/// The four tensors of one AdamParam, in the order messages and overlap checks name them.
constexpr const char* kFieldNames[4] = {"param", "grad", "exp_avg", "exp_avg_sq"};

const TensorRef& field(const AdamParam& p, int f) {
  return f == 0 ? p.param : f == 1 ? p.grad : f == 2 ? p.exp_avg : p.exp_avg_sq;
}

/// "params[2].grad", in a buffer on the stack: the checks name every tensor of every call, and
/// a training step should not pay heap allocations for names only an error prints.
struct FieldName {
  char text[48];
  const char* c_str() const { return text; }
};

FieldName field_name(int index, int f) {
  FieldName name;
  std::snprintf(name.text, sizeof(name.text), "params[%d].%s", index, kFieldNames[f]);
  return name;
}

void check_unit_interval(const char* arg, double value) {
  if (!(value >= 0.0 && value < 1.0)) {
    fail(ErrorKind::Value, kOp,
         std::string("expected ") + arg + " to be in [0, 1), but got " + number_text(value));
  }
}

void check_options(const AdamOptions& o) {
  check_unit_interval("beta1", o.beta1);
  check_unit_interval("beta2", o.beta2);
  detail::check_non_negative(kOp, "eps", o.eps);
  detail::check_non_negative(kOp, "weight_decay", o.weight_decay);
  detail::check_non_negative(kOp, "max_grad_norm", o.max_grad_norm);
  if (o.total_steps < 0) {
    fail(ErrorKind::Value, kOp,
         "expected total_steps to be >= 0 (0: no cosine decay), but got " +
             std::to_string(o.total_steps));
  }
}

/// A one-element tensor on a device this build runs on.
void check_scalar_tensor(const char* arg, const TensorRef& t) {
  detail::check_storage(kOp, arg, t);
  detail::check_device_supported(kOp, arg, t);
  detail::check_numel(kOp, arg, t, 1);
}

void check_step(const TensorRef& step) {
  check_scalar_tensor("step", step);
  detail::check_dtype(kOp, "step", step, DType::Int64, "the step counter");
}

void check_grad_norm_out(const TensorRef& out, const TensorRef& step) {
  check_scalar_tensor("grad_norm_out", out);
  if (out.dtype != DType::Float32 && out.dtype != DType::Float64) {
    fail(ErrorKind::Type, kOp,
         std::string("expected grad_norm_out to have dtype float32 or float64, but got ") +
             dtype_name(out.dtype));
  }
  detail::check_same_device(kOp, "grad_norm_out", out, "step", step);
}

/// params[0].param's dtype is the call's dtype: float32 or float64.
void check_call_dtype(const TensorRef& t) {
  if (t.dtype == DType::Float16 || t.dtype == DType::BFloat16) {
    fail(ErrorKind::NotImplemented, kOp,
         std::string("not implemented for params[0].param of dtype ") + dtype_name(t.dtype) +
             "; adam_step updates float32 or float64 tensors");
  }
  if (t.dtype != DType::Float32 && t.dtype != DType::Float64) {
    fail(ErrorKind::Type, kOp,
         std::string("expected params[0].param to have dtype float32 or float64, but got ") +
             dtype_name(t.dtype));
  }
}

void check_param(const AdamParam* params, int index, const TensorRef& step) {
  const AdamParam& p = params[index];
  for (int f = 0; f < 4; ++f) {
    const TensorRef& t = field(p, f);
    const FieldName name = field_name(index, f);
    detail::check_storage(kOp, name.c_str(), t);
    detail::check_device_supported(kOp, name.c_str(), t);
    if (index == 0 && f == 0) check_call_dtype(t);
    detail::check_same_device(kOp, name.c_str(), t, "step", step);
    detail::check_dtype(kOp, name.c_str(), t, params[0].param.dtype,
                        "the dtype of params[0].param");
    if (f > 0) {
      const FieldName ref = field_name(index, 0);
      detail::check_same_shape(kOp, name.c_str(), t, ref.c_str(), p.param);
    }
    // The drivers walk flat element ranges (Note [adam chunks]).
    detail::check_contiguous(kOp, name.c_str(), t);
  }
  if (!std::isfinite(p.lr) || p.lr < 0.0) {
    fail(ErrorKind::Value, kOp,
         "expected params[" + std::to_string(index) + "].lr to be finite and >= 0, but got " +
             number_text(p.lr));
  }
}

/// The byte range of one tensor of the call, and whether the call writes it.
struct Span {
  std::uintptr_t first, last;
  int index;  ///< params index, or -1 for step, -2 for grad_norm_out
  int field;
  bool written;
};

std::string span_name(const Span& s) {
  if (s.index == -1) return "step";
  if (s.index == -2) return "grad_norm_out";
  return field_name(s.index, s.field).c_str();
}

void add_span(std::vector<Span>& spans, const TensorRef& t, int index, int f, bool written) {
  if (t.numel() == 0) return;
  const auto first = reinterpret_cast<std::uintptr_t>(t.data);
  // Contiguous (checked before), so the tensor spans numel elements from its data pointer.
  spans.push_back({first, first + static_cast<std::uintptr_t>(t.numel()) * dtype_size(t.dtype),
                   index, f, written});
}

/// No written tensor may share memory with any other tensor of the call (a parameter updated
/// while another tensor's update reads it would depend on the order of the chunks). Gradients
/// may share memory with each other. Sorting the spans makes this O(n log n) for n tensors.
void check_no_overlap(const AdamParam* params, int count, const TensorRef& step,
                      const TensorRef& grad_norm_out) {
  std::vector<Span> spans;
  spans.reserve(4 * static_cast<std::size_t>(count) + 2);
  for (int i = 0; i < count; ++i) {
    for (int f = 0; f < 4; ++f) add_span(spans, field(params[i], f), i, f, f != 1);
  }
  add_span(spans, step, -1, 0, true);
  if (!is_absent(grad_norm_out)) add_span(spans, grad_norm_out, -2, 0, true);
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.first < b.first; });
  // Every earlier span starts at or before s, so it overlaps s exactly when it ends after s.first.
  const Span* reach_all = nullptr;      // the earlier span reaching furthest
  const Span* reach_written = nullptr;  // the earlier written span reaching furthest
  for (const Span& s : spans) {
    const Span* other = nullptr;
    if (reach_written != nullptr && reach_written->last > s.first) other = reach_written;
    if (other == nullptr && s.written && reach_all != nullptr && reach_all->last > s.first) {
      other = reach_all;
    }
    if (other != nullptr) {
      const Span& w = other->written ? *other : s;
      const Span& r = other->written ? s : *other;
      fail(ErrorKind::Value, kOp,
           "expected " + span_name(w) + " not to share memory with " + span_name(r) + " (" +
               span_name(w) + " is written by the call), but the two overlap");
    }
    if (reach_all == nullptr || s.last > reach_all->last) reach_all = &s;
    if (s.written && (reach_written == nullptr || s.last > reach_written->last)) {
      reach_written = &s;
    }
  }
}

int64_t total_chunks(const AdamParam* params, int count) {
  int64_t chunks = 0;
  for (int i = 0; i < count; ++i) chunks += detail::optim::chunk_count(params[i].param.numel());
  return chunks;
}

void check_count(const AdamParam* params, int count) {
  if (count < 0) {
    fail(ErrorKind::Value, kOp, "expected count >= 0, but got " + std::to_string(count));
  }
  if (count > 0 && params == nullptr) {
    fail(ErrorKind::Value, kOp,
         "expected params to point at " + std::to_string(count) +
             " AdamParam entries, but got a null pointer");
  }
}

}  // namespace

std::size_t adam_workspace_size(const AdamParam* params, int count) {
  check_count(params, count);
  return sizeof(double) *
         static_cast<std::size_t>(detail::optim::kScalarSlots + total_chunks(params, count));
}

void adam_step(const AdamParam* params, int count, const AdamOptions& options,
               const TensorRef& step, const TensorRef& grad_norm_out, void* workspace,
               std::size_t workspace_bytes, Stream stream) {
  check_count(params, count);
  check_options(options);
  check_step(step);
  for (int i = 0; i < count; ++i) check_param(params, i, step);
  const bool has_norm_out = !is_absent(grad_norm_out);
  if (has_norm_out) check_grad_norm_out(grad_norm_out, step);
  check_no_overlap(params, count, step, grad_norm_out);
  const int64_t chunks = total_chunks(params, count);
  detail::check_workspace(
      kOp, workspace, workspace_bytes,
      sizeof(double) * static_cast<std::size_t>(detail::optim::kScalarSlots + chunks));

  AdamCall call;
  call.op = kOp;
  call.dtype = count > 0 ? params[0].param.dtype : DType::Float32;
  call.device = step.device;
  call.params = params;
  call.count = count;
  call.options = options;
  call.chunks = chunks;
  call.needs_norm = options.max_grad_norm > 0.0 || has_norm_out;
  call.step = static_cast<int64_t*>(step.data);
  if (has_norm_out) {
    call.grad_norm_out = grad_norm_out.data;
    call.grad_norm_dtype = grad_norm_out.dtype;
  }
  call.workspace = static_cast<double*>(workspace);
  call.stream = stream;
#if FIELDFUSE_WITH_CUDA
  if (call.device.is_cuda()) return detail::optim::adam_step_cuda(call);
#endif
  detail::optim::adam_step_cpu(call);
}

}  // namespace fieldfuse
