// SPDX-License-Identifier: Apache-2.0
// The host side of the warp-fused MLP kernels: their plan, launch and the choice between them and
// the tile kernels.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/cuda_launch.cuh"
#include "mlp/mlp_cuda_register_backward.cuh"
#include "mlp/mlp_cuda_register_double.cuh"
#include "mlp/mlp_cuda_register_entries.h"
#include "mlp/mlp_cuda_register_forward.cuh"
#include "mlp/mlp_cuda_tile.cuh"
#include "mlp/mlp_cuda_warp_fused.cuh"
#include "mlp/mlp_cuda_warp_fused_double.cuh"
#include "mlp/mlp_drivers.h"

namespace fieldfuse::detail::mlp::fused {

// ---------------------------------------------------------------------------------------------
// Host side: the plan (whether the fused path covers the problem, warps per block, where the
// weights and the dW accumulator live, grid, workspace layout) from metadata and device
// attributes only, so the workspace query and the call agree.
// ---------------------------------------------------------------------------------------------

enum class Pass { Forward, Backward, DoubleBackward };

struct Plan {
  bool ok = false;
  Args args{};
  std::size_t smem = 0;
  int grid = 0;
  std::size_t partials_offset = 0, total = 0;
};

/// The plan's kernel arguments with the call's x (and the backward entries' grad_out) filled in.
inline Args args_for(const Plan& plan, const MatrixView& x, const MatrixView* grad_out = nullptr) {
  Args a = plan.args;
  a.x = static_cast<const float*>(x.data);
  a.x_sr = x.stride_row;
  a.x_sc = x.stride_col;
  if (grad_out != nullptr) {
    a.grad_out = static_cast<const float*>(grad_out->data);
    a.go_sr = grad_out->stride_row;
    a.go_sc = grad_out->stride_col;
  }
  return a;
}

/// Allows `kernel` `smem` bytes of dynamic shared memory on the current device and returns how
/// many of its blocks of `threads` fit on an SM (0: none). `what` names the kernel in errors.
template <class Kernel>
int blocks_per_sm(const Problem& p, Kernel kernel, int threads, std::size_t smem,
                  const char* what) {
  const auto check = [&](cudaError_t status, const char* call) {
    if (status != cudaSuccess)
      cuda::check(status, p.op, (std::string(call) + "(" + what + ")").c_str());
  };
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem)),
        "cudaFuncSetAttribute");
  int per_sm = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
        "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return per_sm;
}

/// The bytes of the register kernels' staged biases ([num_layers, MW] float32, stage_biases).
template <int MW>
std::size_t staged_bias_bytes(const Problem& p) {
  return static_cast<std::size_t>(p.num_layers) * MW * sizeof(float);
}

/// The register forward's plan (Note [mlp register forward]): the weights resident in shared
/// memory, blocks of ForwardShape<MW>::kWarps warps, a warp tile of 16 rows.
template <class S, int MW>
void register_forward_plan(const Problem& p, std::size_t weight_bytes, int optin, int sms,
                           Plan& result) {
  Plan plan = result;  // committed only when it works out
  Args& a = plan.args;
  a.register_width = MW;
  a.resident = 1;
  a.warps = ForwardShape<MW>::kWarps;
  // The kernel reads the float32 weights (Note [mlp staged conversion]): no workspace.
  plan.partials_offset = 0;
  plan.total = 1;
  a.tiles = (p.batch + 15) / 16;
  a.bias_sm = static_cast<int>(align128(weight_bytes));
  plan.smem = a.bias_sm + staged_bias_bytes<MW>(p);
  // Staged input rows when they fit (Note [mlp staged input rows]).
  const std::size_t stage_at = align128(plan.smem);
  const std::size_t stage_bytes =
      static_cast<std::size_t>(a.warps) * 2 * 16 * staged_pitch(a.layers[0].in_pad) * sizeof(float);
  a.x_stage = 0;
  if (stage_at + stage_bytes <= static_cast<std::size_t>(optin)) {
    a.x_stage = static_cast<int>(stage_at);
    plan.smem = stage_at + stage_bytes;
  }
  cuda::DeviceGuard guard(p.device.index, p.op);
  const int per_sm = blocks_per_sm(p, register_forward_entry<S, MW>(), 32 * a.warps, plan.smem,
                                   "register forward kernel");
  if (per_sm < 1) return;
  plan.grid = static_cast<int>(
      std::min<int64_t>((a.tiles + a.warps - 1) / a.warps, static_cast<int64_t>(sms) * per_sm));
  plan.ok = true;
  result = plan;
}

/// The common part of the register backward plans, once their shared-memory layout is set: the
/// block's row buffers (layer k's at element a_sm, rows·(in_pad + kSkew) each), the partials'
/// layout, the grid, the workspace. Commits `plan` into `result` when a block fits on an SM.
template <class Kernel>
void finish_register_plan(const Problem& p, Kernel kernel, const char* what, int64_t dw_len,
                          int64_t db_len, int sms, std::size_t bytes, Plan& plan, Plan& result) {
  Args& a = plan.args;
  const int rows = 16 * a.warps;
  a.resident = 1;
  a.dw_in_smem = 0;
  plan.partials_offset = 0;  // no converted weights (Note [mlp staged conversion])
  a.dbs = 0;
  int64_t elem = 0;
  for (int k = 0; k < a.num_layers; ++k) {
    a.layers[k].a_sm = static_cast<int>(elem);
    elem += rows * (a.layers[k].in_pad + kSkew);
  }
  // The dW tiles go round robin over the whole reverse sweep: layer k's first to the warp after
  // the one that took the last tile of the layer above. δ_k alternates between the two buffers
  // over the layers with a dW product (the register backward; the double backward has its own).
  int first = 0, buffer = 0;
  for (int k = a.num_layers - 1; k >= 0; --k) {
    Layer& l = a.layers[k];
    if (!l.want_dw) continue;
    l.dw_first = first;
    l.delta_buffer = buffer;
    first = (first + l.out_pad / 16 * (l.in_pad / 16)) % a.warps;
    buffer ^= 1;
  }
  a.tiles = (p.batch + rows - 1) / rows;
  a.dw_len = dw_len;
  a.db_len = db_len;
  a.slot_len = (dw_len + db_len + 63) / 64 * 64;
  for (int k = 0; k < a.num_layers; ++k) a.layers[k].db_slot = dw_len + a.layers[k].db_sm;
  plan.smem = bytes;
  cuda::DeviceGuard guard(p.device.index, p.op);
  const int per_sm = blocks_per_sm(p, kernel, 32 * a.warps, bytes, what);
  if (per_sm < 1) return;
  plan.grid = static_cast<int>(std::min<int64_t>(a.tiles, static_cast<int64_t>(sms) * per_sm));
  plan.total =
      plan.partials_offset + static_cast<std::size_t>(plan.grid) * a.slot_len * sizeof(float);
  plan.ok = true;
  result = plan;
}

/// The register backward's plan (Note [mlp register backward]): the most warps (rows per block)
/// whose weights, staged biases, activations, δ buffers and db partials fit in shared memory; the
/// dW accumulator in the block's slot of the workspace. `act_row_elems` is Σ_k (in_pad_k + kSkew).
template <class S, int MW>
void register_backward_plan(const Problem& p, std::size_t weight_bytes, int64_t act_row_elems,
                            int64_t dw_len, int64_t db_len, int optin, int sms, Plan& result) {
  Plan plan = result;  // committed only when it works out
  Args& a = plan.args;
  const std::size_t db_bytes = align128(db_len * sizeof(float));
  const std::size_t bias_bytes = align128(staged_bias_bytes<MW>(p));
  for (int warps = kRegisterWarps; warps >= 4; warps -= 4) {
    const int rows = 16 * warps;
    const std::size_t acts = align128(rows * act_row_elems * sizeof(S));
    const std::size_t delta = align128(static_cast<std::size_t>(rows) * (MW + kSkew) * sizeof(S));
    const std::size_t bytes = weight_bytes + bias_bytes + acts + 2 * delta + warps * db_bytes;
    if (bytes > static_cast<std::size_t>(optin)) continue;
    a.register_width = MW;
    a.warps = warps;
    a.ld_g = MW + kSkew;
    std::size_t at = weight_bytes;
    a.bias_sm = static_cast<int>(at);
    a.acts = static_cast<int>(at += bias_bytes);
    a.g0 = static_cast<int>(at += acts);
    a.g1 = static_cast<int>(at += delta);
    a.warp_base = static_cast<int>(at += delta);
    a.warp_bytes = static_cast<int>(db_bytes);
    finish_register_plan(p, register_backward_entry<S, MW>(), "register backward kernel", dw_len,
                         db_len, sms, bytes, plan, result);
    return;
  }
}

/// The register double backward's plan (Note [mlp register double backward]): the most warps
/// whose weights (and V copies, `stage_v`), a_k and t_k buffers, top-layer δ and q buffers and db
/// partials fit in shared memory. `act_row_elems` is Σ_k (in_pad_k + kSkew).
template <class S, int MW>
void register_double_backward_plan(const Problem& p, std::size_t weight_bytes, bool stage_v,
                                   int64_t act_row_elems, int64_t dw_len, int64_t db_len, int optin,
                                   int sms, Plan& result) {
  Plan plan = result;  // committed only when it works out
  Args& a = plan.args;
  const std::size_t db_bytes = align128(db_len * sizeof(float));
  const std::size_t bias_bytes = align128(staged_bias_bytes<MW>(p));
  const int top_ld = a.layers[a.num_layers - 1].out_pad + kSkew;
  for (int warps = kRegisterDoubleWarps; warps >= 2; warps -= 2) {
    const int rows = 16 * warps;
    const std::size_t v_bytes = stage_v ? weight_bytes : 0;
    const std::size_t acts = align128(rows * act_row_elems * sizeof(S));
    const std::size_t top = align128(static_cast<std::size_t>(rows) * top_ld * sizeof(S));
    const std::size_t bytes =
        weight_bytes + v_bytes + bias_bytes + 2 * acts + 2 * top + warps * db_bytes;
    if (bytes > static_cast<std::size_t>(optin)) continue;
    a.register_width = MW;
    a.warps = warps;
    a.v_sm = stage_v ? static_cast<int>(weight_bytes) : 0;
    std::size_t at = weight_bytes + v_bytes;
    a.bias_sm = static_cast<int>(at);
    a.acts = static_cast<int>(at += bias_bytes);
    a.tans = static_cast<int>(at += acts);
    a.g0 = static_cast<int>(at += acts);
    a.g1 = static_cast<int>(at += top);
    a.warp_base = static_cast<int>(at += top);
    a.ld_g = top_ld;
    a.warp_bytes = static_cast<int>(db_bytes);
    finish_register_plan(p, register_double_backward_entry<S, MW>(),
                         "register double backward kernel", dw_len, db_len, sms, bytes, plan,
                         result);
    return;
  }
}

/// Whether the register backwards take a hidden softplus's σ′ (σ″u) from its 16-bit outputs
/// (tangents), Note [mlp slope from the output]: in bfloat16, where that left the error of the
/// Eikonal step unchanged; not in float16, where it did not.
template <class S>
bool slope_from_output_is_accurate(const Problem& p) {
  return p.activation == Activation::Softplus && std::is_same_v<S, __nv_bfloat16>;
}

inline bool sigma_prime_is_01(Activation kind) {
  return kind == Activation::ReLU || kind == Activation::None;
}

template <class S>
Plan make_plan(const Problem& p, Pass pass) {
  Plan plan;
  if (p.num_layers < 1 || p.num_layers > kMaxLayers) return plan;
  const int device = p.device.index;
  int major = 0, sms = 1, optin = 48 * 1024;
  cuda::check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), p.op,
              "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
  if (major < 8) return plan;  // bfloat16 WMMA (and this kernel's compiled body) needs sm_80
  cuda::check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), p.op,
              "cudaDeviceGetAttribute(MultiProcessorCount)");
  cuda::check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), p.op,
              "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  const bool backward = pass != Pass::Forward;  // parameter partials
  const bool twice = pass == Pass::DoubleBackward;
  Args& a = plan.args;
  a.num_layers = p.num_layers;
  a.batch = p.batch;
  a.hidden = p.activation;
  a.output = p.output_activation;
  a.params = p.params;
  int64_t maxw = 0, elems = 0, sm_elems = 0, act_elems = 0, d1_len = 0, db_len = 0, dw_len = 0,
          delta_elems = 0;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    Layer& l = a.layers[k];
    const int64_t in_pad = pad16(v.in), out_pad = pad16(v.out);
    if (in_pad > kMaxWidth || out_pad > kMaxWidth) return plan;
    l.in = static_cast<int>(v.in);
    l.out = static_cast<int>(v.out);
    l.in_pad = static_cast<int>(in_pad);
    l.out_pad = static_cast<int>(out_pad);
    l.bias = static_cast<const float*>(v.bias);
    l.bias_stride = v.bias_stride;
    l.want_dw = v.grad_weight != nullptr;
    l.want_db = v.grad_bias != nullptr;
    l.has_v = v.grad_grad_weight != nullptr;
    l.c = static_cast<const float*>(v.grad_grad_bias);
    l.c_stride = v.grad_grad_bias_stride;
    l.dl_sm = static_cast<int>(delta_elems);
    delta_elems += 16 * (out_pad + kSkew);
    l.w_ws = elems;
    elems += out_pad * in_pad;
    l.w_sm = static_cast<int>(sm_elems);
    sm_elems += out_pad * (in_pad + kSkew);
    l.a_sm = static_cast<int>(act_elems);
    act_elems += 16 * (in_pad + kSkew);
    l.d1_sm = static_cast<int>(d1_len);
    d1_len += 16 * out_pad;
    l.db_sm = static_cast<int>(db_len);
    db_len += out_pad;
    l.dw_acc = dw_len;
    dw_len += out_pad * (in_pad + kDwSkew);
    maxw = std::max({maxw, in_pad, out_pad});
  }
  // The double backward's converted V copies follow the weights, in the same layout (always
  // reserved: the workspace query does not know which V are given).
  for (int k = 0; k < p.num_layers; ++k) a.layers[k].v_ws = elems + a.layers[k].w_ws;
  a.ld_g = static_cast<int>(maxw + kSkew);
  a.d1_16 = !twice && sigma_prime_is_01(p.activation) && sigma_prime_is_01(p.output_activation);
  a.slope_from_output = slope_from_output_is_accurate<S>(p);
  std::size_t off = 0;
  auto take = [&](std::size_t bytes) {
    const std::size_t at = off;
    off += align128(bytes);
    return static_cast<int>(at);
  };
  a.g0 = take(16 * a.ld_g * sizeof(S));
  a.g1 = take(16 * a.ld_g * sizeof(S));
  a.scratch = take(16 * kScratchLd * sizeof(float));
  if (backward) {
    a.acts = take(act_elems * sizeof(S));
    a.d1s = take(d1_len * (a.d1_16 ? sizeof(__half) : sizeof(float)));
    a.dbs = take(db_len * sizeof(float));
  }
  if (twice) {
    a.tans = take(act_elems * sizeof(S));
    a.curvs = take(d1_len * sizeof(float));
    a.deltas = take(delta_elems * sizeof(S));
  }
  const std::size_t warp_bytes = off;
  const std::size_t weight_bytes = align128(sm_elems * sizeof(S));
  const std::size_t dw_bytes = align128(dw_len * sizeof(float));
  plan.partials_offset = (static_cast<std::size_t>(elems) * sizeof(S) + 255) / 256 * 256;
  plan.total = std::max<std::size_t>(plan.partials_offset, 1);
  if constexpr (!std::is_same_v<S, float>) {
    // The 16-bit forward keeps its activations in registers where the widths allow.
    // (Its biases follow the weights, [num_layers, MW] float32.)
    const std::size_t bias_bytes = staged_bias_bytes<kRegisterMaxWidth>(p);
    if (pass == Pass::Forward && maxw <= kRegisterMaxWidth &&
        align128(weight_bytes) + bias_bytes <= static_cast<std::size_t>(optin)) {
      if (maxw <= 64) {
        register_forward_plan<S, 64>(p, weight_bytes, optin, sms, plan);
      } else {
        register_forward_plan<S, kRegisterMaxWidth>(p, weight_bytes, optin, sms, plan);
      }
      if (plan.ok) return plan;
    }
    // So does the first-order backward's reverse sweep, up to width 64.
    if (pass == Pass::Backward && maxw <= 64) {
      register_backward_plan<S, 64>(p, weight_bytes, act_elems / 16, dw_len, db_len, optin, sms,
                                    plan);
      if (plan.ok) return plan;
    }
    // And the double backward's two sweeps. The workspace holds the partials of whichever
    // layout (with or without resident V copies) needs more blocks.
    if (pass == Pass::DoubleBackward && maxw <= 64) {
      // (The chosen layout last: each plan sets the kernel's shared-memory limit to its own.)
      bool any_v = false;
      for (int k = 0; k < p.num_layers; ++k) any_v = any_v || a.layers[k].has_v;
      const Plan fallback = plan;
      Plan other = plan;
      register_double_backward_plan<S, 64>(p, weight_bytes, !any_v, act_elems / 16, dw_len, db_len,
                                           optin, sms, other);
      register_double_backward_plan<S, 64>(p, weight_bytes, any_v, act_elems / 16, dw_len, db_len,
                                           optin, sms, plan);
      if (plan.ok && other.ok) {
        plan.total = std::max(plan.total, other.total);
        return plan;
      }
      plan = fallback;  // `a` still refers to plan.args
    }
  }
  // Preference: more warps per block (more rows per dW product and per weight stage), then
  // resident weights, then a shared-memory dW accumulator.
  bool found = false;
  for (int warps = kMaxWarps; warps >= 1 && !found; warps /= 2) {
    for (int resident = 1; resident >= 0 && !found; --resident) {
      for (int dw_smem = backward ? 1 : 0; dw_smem >= 0 && !found; --dw_smem) {
        const std::size_t bytes =
            (resident ? weight_bytes : 0) + (dw_smem ? dw_bytes : 0) + warps * warp_bytes;
        if (bytes > static_cast<std::size_t>(optin)) continue;
        found = true;
        a.warps = warps;
        a.resident = resident;
        a.dw_in_smem = dw_smem;
        plan.smem = bytes;
      }
    }
  }
  if (!found) return plan;
  a.dw_base = static_cast<int>(a.resident ? weight_bytes : 0);
  a.warp_base = a.dw_base + static_cast<int>(a.dw_in_smem ? dw_bytes : 0);
  a.warp_bytes = static_cast<int>(warp_bytes);
  a.tiles = (p.batch + 16 * a.warps - 1) / (16 * a.warps);
  if (backward) {
    a.dw_len = dw_len;
    a.db_len = db_len;
    a.slot_len = static_cast<int64_t>((dw_len + db_len + 63) / 64 * 64);
    for (int k = 0; k < p.num_layers; ++k) a.layers[k].db_slot = dw_len + a.layers[k].db_sm;
  }
  const auto kernel =
      twice ? double_backward_kernel<S> : (backward ? backward_kernel<S> : forward_kernel<S>);
  cuda::DeviceGuard guard(device, p.op);
  const int per_sm = blocks_per_sm(p, kernel, 32 * a.warps, plan.smem, "fused mlp kernel");
  if (per_sm < 1) return plan;
  plan.grid = static_cast<int>(std::min<int64_t>(a.tiles, static_cast<int64_t>(sms) * per_sm));
  const int64_t copies = twice ? 2 : 1;  // W, and V in the double backward
  plan.partials_offset = (static_cast<std::size_t>(copies * elems) * sizeof(S) + 255) / 256 * 256;
  plan.total = plan.partials_offset +
               (backward ? static_cast<std::size_t>(plan.grid) * a.slot_len * sizeof(float) : 0);
  plan.total = std::max<std::size_t>(plan.total, 1);
  plan.ok = true;
  return plan;
}

/// Launches a register kernel (mlp_cuda_register_entries.h) on the plan's grid with `a`. A failed
/// launch sets the runtime's last error, which the caller's cuda::check_launch reports.
inline void launch_entry(const void* kernel, const Plan& plan, const Args& a, cudaStream_t stream) {
  void* params[] = {const_cast<Args*>(&a)};
  cudaLaunchKernel(kernel, dim3(plan.grid), dim3(32 * a.warps), params, plan.smem, stream);
}

/// The register kernels' float32 weight and V sources (Note [mlp staged conversion]).
inline void set_weight_sources(const Problem& p, Args& a) {
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    Layer& l = a.layers[k];
    l.w_src = static_cast<const float*>(v.weight);
    l.w_so = v.weight_stride_out;
    l.w_si = v.weight_stride_in;
    l.v_src = static_cast<const float*>(v.grad_grad_weight);
    l.v_so = v.grad_grad_weight_stride_out;
    l.v_si = v.grad_grad_weight_stride_in;
  }
}

/// Converts every weight (and V) of the call into the workspace, in one launch.
template <class S>
void convert_weights(const Problem& p, const Args& a, S* dst, cudaStream_t stream) {
  ConvertParts c;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    const Layer& l = a.layers[k];
    const int64_t count = static_cast<int64_t>(l.out_pad) * l.in_pad;
    c.add({static_cast<const float*>(v.weight), v.weight_stride_out, v.weight_stride_in, l.out,
           l.in, l.in_pad, l.w_ws, count});
    if (!l.has_v) continue;
    c.add({static_cast<const float*>(v.grad_grad_weight), v.grad_grad_weight_stride_out,
           v.grad_grad_weight_stride_in, l.out, l.in, l.in_pad, l.v_ws, count});
  }
  const int blocks = static_cast<int>(std::min<int64_t>(cuda::ceil_div(c.total, 256), 1024));
  convert_weights_kernel<S><<<blocks, 256, 0, stream>>>(c, dst);
  cuda::check_launch(p.op, "convert_weights_kernel", stream);
}

/// Converts the weights into the workspace (the warp-fused kernels; the register kernels stage
/// them from the float32 parameters), runs the fused kernel and (backward) sums the per-block
/// partials into the parameter gradients. `a` is the plan's Args with the call's pointers filled
/// in.
template <class S>
void run(const Problem& p, const Plan& plan, Args a, void* workspace, Stream s, Pass pass) {
  cuda::ProfileRange range(p.op);
  cuda::DeviceGuard guard(p.device.index, p.op);
  const auto stream = static_cast<cudaStream_t>(s.handle);
  char* ws = static_cast<char*>(workspace);
  a.weights = ws;
  a.partials = reinterpret_cast<float*>(ws + plan.partials_offset);
  const bool backward = pass != Pass::Forward;
  if (a.tiles > 0) {
    if (a.register_width != 0) {
      set_weight_sources(p, a);
    } else {
      convert_weights(p, a, static_cast<S*>(workspace), stream);
    }
    if (pass == Pass::DoubleBackward && a.register_width != 0) {
      if constexpr (!std::is_same_v<S, float>) {
        launch_entry(register_double_backward_entry<S, 64>(), plan, a, stream);
        cuda::check_launch(p.op, "register_double_backward_kernel", stream);
      }
    } else if (pass == Pass::DoubleBackward) {
      double_backward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused double_backward_kernel", stream);
    } else if (backward && a.register_width != 0) {
      if constexpr (!std::is_same_v<S, float>) {
        launch_entry(register_backward_entry<S, 64>(), plan, a, stream);
        cuda::check_launch(p.op, "register_backward_kernel", stream);
      }
    } else if (backward) {
      backward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused backward_kernel", stream);
    } else if (a.register_width != 0) {
      if constexpr (!std::is_same_v<S, float>) {
        launch_entry(a.register_width == 64 ? register_forward_entry<S, 64>()
                                            : register_forward_entry<S, kRegisterMaxWidth>(),
                     plan, a, stream);
        cuda::check_launch(p.op, "register_forward_kernel", stream);
      }
    } else {
      forward_kernel<S><<<plan.grid, 32 * a.warps, plan.smem, stream>>>(a);
      cuda::check_launch(p.op, "fused forward_kernel", stream);
    }
  }
  if (!backward) return;
  ReduceParts r;
  for (int k = 0; k < p.num_layers; ++k) {
    const LayerView& v = p.layers[k];
    const Layer& l = a.layers[k];
    const ReducePart parts[2] = {
        {static_cast<float*>(v.grad_weight), l.dw_acc, l.in, l.in_pad + kDwSkew,
         static_cast<int64_t>(l.out) * l.in},
        {static_cast<float*>(v.grad_bias), l.db_slot, l.out, l.out, l.out}};
    for (const ReducePart& part : parts) {
      if (part.out != nullptr && part.count != 0) r.add(part);
    }
  }
  if (r.total == 0) return;
  const int blocks = a.tiles > 0 ? plan.grid : 0;
  const int rb = static_cast<int>(std::min<int64_t>(cuda::ceil_div(r.total, 256), 1024));
  reduce_parts_kernel<<<rb, 256, 0, stream>>>(r, a.partials, a.slot_len, blocks);
  cuda::check_launch(p.op, "reduce_parts_kernel", stream);
}

/// Runs the forward, backward or double backward entry on the fused plan `plan` (which must be
/// ok): fills the call's pointers in and calls run().
template <class S>
void launch_fused(const Plan& plan, const ForwardArgs& args) {
  Args a = args_for(plan, args.x);
  a.out = static_cast<float*>(args.out);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::Forward);
}

template <class S>
void launch_fused(const Plan& plan, const BackwardArgs& args) {
  Args a = args_for(plan, args.x, &args.grad_out);
  a.grad_x = static_cast<float*>(args.grad_x);
  a.out = static_cast<float*>(args.out);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::Backward);
}

template <class S>
void launch_fused(const Plan& plan, const DoubleBackwardArgs& args) {
  Args a = args_for(plan, args.x, &args.grad_out);
  a.grad_grad_x = static_cast<const float*>(args.grad_grad_x.data);
  a.ggx_sr = args.grad_grad_x.stride_row;
  a.ggx_sc = args.grad_grad_x.stride_col;
  a.grad_y = static_cast<const float*>(args.grad_y.data);
  a.gy_sr = args.grad_y.stride_row;
  a.gy_sc = args.grad_y.stride_col;
  a.grad_grad_out = static_cast<float*>(args.grad_grad_out);
  a.grad_x = static_cast<float*>(args.grad_x);
  run<S>(args.problem, plan, a, args.workspace, args.stream, Pass::DoubleBackward);
}

/// The fused pass of a tile entry.
inline Pass pass_of(tile::Entry entry) {
  switch (entry) {
    case tile::Entry::Forward:
      return Pass::Forward;
    case tile::Entry::Backward:
      return Pass::Backward;
    default:
      return Pass::DoubleBackward;
  }
}

/// Whether an engine's problems may take the fused path: 16-bit or float32 operands (float64
/// keeps the tile kernels).
template <class Engine>
constexpr bool kFusable = !std::is_same_v<typename Engine::Operand, double>;

/// Workspace bytes of one entry: the fused plan's when it covers the problem, else the tile
/// kernels'.
template <class Engine>
std::size_t workspace_bytes(const Problem& p, tile::Entry entry) {
  if constexpr (kFusable<Engine>) {
    const Plan plan = make_plan<typename Engine::Operand>(p, pass_of(entry));
    if (plan.ok) return plan.total;
  }
  return tile::workspace_bytes<Engine>(p, entry);
}

/// Any entry of mlp_drivers.h (it follows from the argument struct): the fused kernels when their
/// plan covers the problem, else the tile kernels.
template <class Engine, class EntryArgs>
void launch(const EntryArgs& args) {
  if constexpr (kFusable<Engine>) {
    constexpr Pass pass = std::is_same_v<EntryArgs, ForwardArgs>    ? Pass::Forward
                          : std::is_same_v<EntryArgs, BackwardArgs> ? Pass::Backward
                                                                    : Pass::DoubleBackward;
    const Plan plan = make_plan<typename Engine::Operand>(args.problem, pass);
    if (plan.ok) return launch_fused<typename Engine::Operand>(plan, args);
  }
  tile::launch<Engine>(args);
}

}  // namespace fieldfuse::detail::mlp::fused
