// mlxcel-amdgpu's kernels as MLX custom kernels.
//
// Each getter returns a `mlx::core::fast::CustomKernelFunction&` that mlxcel
// can put verbatim into a `KernelPorts` table (`.rocm`, `.cuda`): it takes the
// same inputs, output shapes and dtypes, template arguments and scalars as the
// kernel mlxcel's launcher already calls (docs/mlxcel-integration.md lists
// them per kernel, with the mlxcel commit they were matched against). The
// outputs are MLX arrays whose primitive launches through the C ABI of
// `include/mlxcel_amdgpu.h`:
//
//   - on the CPU stream, through MLX's CPU command encoder, on the library's
//     CPU backend (select it with `mlxcel_amdgpu_select_backend("cpu")` or
//     MLXCEL_AMDGPU_BACKEND=cpu);
//   - on the GPU stream, on the stream MLX encodes the primitive on: MLX's CUDA
//     command encoder (built with MLXCEL_AMDGPU_SHIM_CUDA), or the HIP stream
//     of mlxcel's MLX fork (MLXCEL_AMDGPU_SHIM_ROCM; not compiled or run yet).
//
// The grid and threadgroup arguments are ignored: the library chooses its own
// launch geometry. Anything else a getter does not expect (an input count, a
// dtype, a shape, a template argument, an init value) throws
// `std::invalid_argument` naming it, before anything is launched.
#pragma once

#include <cstdint>

#include <mlx/array.h>
#include <mlx/fast.h>

namespace mlxcel_amdgpu::shim {

using mlx::core::Dtype;
using mlx::core::fast::CustomKernelFunction;

// xIELU (Apertus). Inputs {x [n] T, alpha_p [1] f32, alpha_n [1] f32,
// beta [1] f32, eps [1] f32}; output {[n] T}; template args {"T"} and,
// optionally, {"n"} (= n).
CustomKernelFunction& xielu_kernel();

// Residual add3 + LayerNorm (Cohere2). Inputs {a, b, x [..., D] T, w [D] T,
// bias [D] T or [1] T with B_STRIDE 0, eps [1] f32}; outputs {x.shape, x.shape}
// of T; template args {"T", "D", "W_STRIDE" (= 1), "B_STRIDE" (0 or 1)}.
CustomKernelFunction& add3_layer_norm_kernel();

// Mamba1 selective scan, float32 state. Inputs {X, DT [B, L, Dm] T,
// Bm, Cm [B, L, N] T, A [Dm, N] f32, Dp [Dm] T, state_in [B, Dm, N] f32};
// outputs {[B, L, Dm] T, [B, Dm, N] f32}; template args {"T", "N", "Dm"}.
CustomKernelFunction& mamba1_scan_kernel();

// Nemotron-H squared-ReLU MoE, fc1 step. Inputs {x (Din elements) T, indices (K elements) u32,
// fc1_w [E, Dff, Din*bits/32] u32, fc1_s, fc1_b [E, Dff, Din/gs] T};
// output {[K, Dff] f32}; template args {"T", "K", "Din", "Dff", "bits",
// "group_size"}.
CustomKernelFunction& moe_fc1_relu2_kernel();

// The gate/up step of the SwiGLU and GeGLU experts (mlxcel's
// `moe_gateup_ports`, through `run_fused_moe_two_kernel`). Inputs {x (Din
// elements) T, indices (K elements) u32, gate_w, up_w [E, Dff, Din*bits/32]
// u32, gate_s, gate_b, up_s, up_b [E, Dff, Din/gs] T}; output {[K, Dff] f32};
// template args {"T", "K", "Din", "Dff", "bits" (4 or 8), "group_size",
// "act" (0 SwiGLU, 1 GeGLU)}.
CustomKernelFunction& moe_gateup_kernel();

// The down step, shared by both MoE paths (mlxcel's `moe_down_ports`).
// Inputs {indices (K elements) u32, down_w [E, Din, Dff*bits/32] u32, down_s,
// down_b [E, Din, Dff/gs] T, act_g [K, Dff] f32, scores (K elements) f32};
// output {[K, Din] f32}; template args as for fc1 (no "act"), "bits" 4, 6
// (MLX's four values in three bytes) or 8.
CustomKernelFunction& moe_down_kernel();

// The whole routed forward of one token (fc1 + relu^2, down, combine) in one
// primitive. Inputs {x [Din] T, indices [K] u32, fc1_w, fc1_s, fc1_b, down_w,
// down_s, down_b, scores [K] f32}; output {[Din] T}; template args as above.
CustomKernelFunction& moe_routed_forward_kernel();

// The router of the routed experts (softmax top-k, Qwen3 MoE's), for one to
// eight tokens. Inputs {x [M, Din] T, W_r [E, Din] T}; outputs {ids [M, K]
// u32, scores [M, K] f32}: per token the K most probable experts (larger
// first, the lower id on equal probabilities) and their softmax
// probabilities over the f32 logits x . W_r^T, divided by their sum when
// norm_topk_prob is 1; template args {"T", "K", "norm_topk_prob" (0 or 1)}.
CustomKernelFunction& moe_router_kernel();

// The whole routed-expert block of a gated MoE layer (Qwen3 MoE) for one to
// eight tokens in one primitive: moe_router's selection, then the gate/up,
// down and combine steps of each token's K experts. Inputs {x [M, Din] T,
// W_r [E, Din] T, gate_w, up_w [E, Dff, Din*bits/32] u32, gate_s, gate_b,
// up_s, up_b [E, Dff, Din/gs] T, down_w [E, Din, Dff*bits/32] u32, down_s,
// down_b [E, Din, Dff/gs] T} (in the order gate_w, gate_s, gate_b, up_w, ...);
// output {[M, Din] T}; template args {"T", "K", "bits" (4 or 8),
// "group_size", "act" (0 SwiGLU, 1 GeGLU), "norm_topk_prob" (0 or 1)}.
CustomKernelFunction& moe_block_kernel();

// moe_block_kernel() with the router quantized as MLX quantizes a linear
// layer (mlx-lm quantizes Qwen3 MoE's mlp.gate at 8 bits, group 64): inputs
// {x [M, Din] T, router_w [E, Din*router_bits/32] u32, router_s, router_b
// [E, Din/router_group_size] T, then the nine expert inputs of
// moe_block_kernel()}; output {[M, Din] T}; template args those of
// moe_block_kernel() and {"router_bits" (4 or 8), "router_group_size" (32,
// 64 or 128)}.
CustomKernelFunction& moe_block_quantized_router_kernel();

// moe_block_kernel() with a shared expert (Qwen3-Next): out = routed(x) +
// sigmoid(x . W_sg) * down_s(silu(gate_s(x)) * up_s(x)), in the same
// launches. Inputs {x, W_r, W_sg [1, Din] T (shared_expert_gate), the nine
// expert inputs of moe_block_kernel(), then shared_gate_w, shared_gate_s,
// shared_gate_b, shared_up_w, shared_up_s, shared_up_b [Dff, ...] and
// shared_down_w, shared_down_s, shared_down_b [Din, ...]: one expert of the
// stacks' shape and format}; output and template args those of
// moe_block_kernel().
CustomKernelFunction& moe_block_shared_expert_kernel();

// moe_block_shared_expert_kernel() with the router and the shared expert's
// gate row quantized alike (mlx-lm quantizes Qwen3-Next's mlp.gate and
// shared_expert_gate at 8 bits, group 64): inputs {x, router_w, router_s,
// router_b (as for moe_block_quantized_router_kernel()), expert_gate_w [1,
// Din*router_bits/32] u32, expert_gate_s, expert_gate_b [1,
// Din/router_group_size] T, then the eighteen expert inputs of
// moe_block_shared_expert_kernel()}; template args those of
// moe_block_quantized_router_kernel().
CustomKernelFunction& moe_block_shared_expert_quantized_router_kernel();

// Availability, answered by the C ABI's predicates (so a gate and the shim
// cannot disagree): the kernel for `dtype` can run on the library's device.
bool xielu_available(Dtype dtype);
bool add3_layer_norm_available(Dtype dtype);
bool add3_layer_norm_supports(Dtype dtype, int64_t rows, int64_t d);
bool mamba1_scan_available(Dtype dtype);
bool mamba1_scan_supports(Dtype dtype, int64_t batch, int64_t len, int64_t dm, int64_t n);
bool moe_available(Dtype dtype);
bool moe_supports(Dtype dtype, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int bits,
                  int group_size);
// The gated experts' pair: moe_gateup and moe_down (4, 6 and 8 bits).
bool moe_gated_available(Dtype dtype);
bool moe_gated_supports(Dtype dtype, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int gate_up_bits,
                        int down_bits, int group_size);
// The router: m tokens (1..8), n_experts (1..1024), k (1..16, at most n_experts), din (at least 1).
bool moe_router_available(Dtype dtype);
bool moe_router_supports(Dtype dtype, int64_t m, int64_t n_experts, int64_t k, int64_t din);
// The block: the router's limits, m * k at most 512, and the gated experts' format (bits 4 or 8).
bool moe_block_available(Dtype dtype);
bool moe_block_supports(Dtype dtype, int64_t m, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int bits,
                        int group_size);
// The block with a quantized router: the block's limits, and the router's format (4 or 8 bits, groups of 32, 64 or
// 128 dividing din).
bool moe_block_quantized_router_available(Dtype dtype);
bool moe_block_quantized_router_supports(Dtype dtype, int64_t m, int64_t n_experts, int64_t k, int64_t din,
                                         int64_t dff, int bits, int group_size, int router_bits,
                                         int router_group_size);
// The block with a shared expert: the block's limits with k + 1 slots a token, and, with router_bits not 0, the
// quantized router's format (router_bits 0 and router_group_size 0: a dense router and gate row).
bool moe_block_shared_expert_available(Dtype dtype, int router_bits);
bool moe_block_shared_expert_supports(Dtype dtype, int64_t m, int64_t n_experts, int64_t k, int64_t din,
                                      int64_t dff, int bits, int group_size, int router_bits, int router_group_size);

// The same for every activation dtype (float32, float16 and bfloat16), for a
// gate that is asked before the dtype is known.
bool xielu_available();
bool add3_layer_norm_available();
bool mamba1_scan_available();
bool moe_available();
bool moe_gated_available();
bool moe_router_available();
bool moe_block_available();
bool moe_block_quantized_router_available();
// Both routers: dense, and quantized at 8 bits.
bool moe_block_shared_expert_available();

}  // namespace mlxcel_amdgpu::shim
