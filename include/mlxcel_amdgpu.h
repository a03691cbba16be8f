#ifndef MLXCEL_AMDGPU_H
#define MLXCEL_AMDGPU_H

/* Generated from host/ffi.rs and host/kernels/moe/shape.rs by cbindgen; do not edit. Regenerate with: MLXCEL_AMDGPU_BLESS=1 cargo test --test c_header */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

// The version of this C ABI, bumped on every incompatible change of this
// header. Compare it with [`mlxcel_amdgpu_abi_version`] at start-up.
#define MLXCEL_AMDGPU_ABI_VERSION 4

// `xielu`: the most elements `n` of one launch (2^60; the kernel indexes in
// 64 bits, and byte offsets must stay within a signed 64-bit range).
#define MLXCEL_AMDGPU_XIELU_MAX_N 1152921504606846976

// `add3_layer_norm`: the longest row `d` (longer rows need the unfused pair).
#define MLXCEL_AMDGPU_ADD3_MAX_D 6656

// `add3_layer_norm`: the most rows of one launch.
#define MLXCEL_AMDGPU_ADD3_MAX_ROWS 16777215

// `mamba1_scan`: the largest state size `n` (one column per lane of a wave).
#define MLXCEL_AMDGPU_MAMBA1_MAX_N 32

// `mamba1_scan`: the largest `batch`.
#define MLXCEL_AMDGPU_MAMBA1_MAX_BATCH 65535

// MoE: the most expert slots `k` of one token.
#define MLXCEL_AMDGPU_MOE_MAX_K 65535

// MoE: the largest `din` and `dff` (a staged row fits in workgroup memory).
#define MLXCEL_AMDGPU_MOE_MAX_COLS 12288

// MoE: the supported `bits`, as a mask of `1 << bits` (4 and 8).
#define MLXCEL_AMDGPU_MOE_BITS_MASK ((1 << 4) | (1 << 8))

// MoE: the supported `group_size` values, as the sum of the powers of two
// they are (32, 64 and 128); `din` and `dff` are multiples of the group size.
#define MLXCEL_AMDGPU_MOE_GROUP_SIZES_MASK ((32 | 64) | 128)

// MoE router: the most tokens `m` of one launch.
#define MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS 8

// MoE router: the most experts `n_experts`.
#define MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS 1024

// MoE router: the most experts `k` chosen per token (at most `n_experts`).
#define MLXCEL_AMDGPU_MOE_ROUTER_MAX_K 16

// MoE batch launches (`mlxcel_amdgpu_moe_*_batch`): the most tokens `m`.
#define MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS 8

// MoE batch launches: the most slots `m * k`.
#define MLXCEL_AMDGPU_MOE_MAX_BATCH_SLOTS 512

// Every pointer must be aligned to its element: 4 bytes for f32 and u32
// buffers (MoE weights, ids, scores, scratch, state), 2 bytes for f16 and
// bf16 buffers. This is that rule's largest alignment.
#define MLXCEL_AMDGPU_MAX_POINTER_ALIGNMENT 4

// Status of a C ABI call.
typedef enum MlxcelAmdgpuStatus {
  // Success.
  MLXCEL_AMDGPU_OK = 0,
  // An argument was wrong (the message names it); nothing was launched.
  MLXCEL_AMDGPU_INVALID_ARGUMENT = 1,
  // The kernel cannot run on this device; nothing was launched.
  MLXCEL_AMDGPU_UNAVAILABLE = 2,
  // The HIP or CUDA runtime reported an error.
  MLXCEL_AMDGPU_BACKEND_ERROR = 3,
  // A defect inside this library (a caught panic, an emulator report).
  MLXCEL_AMDGPU_INTERNAL = 4,
} MlxcelAmdgpuStatus;

// Element type of activations.
typedef enum MlxcelAmdgpuDtype {
  MLXCEL_AMDGPU_F32 = 0,
  MLXCEL_AMDGPU_F16 = 1,
  MLXCEL_AMDGPU_BF16 = 2,
} MlxcelAmdgpuDtype;

// The launches described between `mlxcel_amdgpu_describe_begin` and
// `mlxcel_amdgpu_describe_end`, in order, with their arguments. Opaque;
// release it with `mlxcel_amdgpu_launch_list_release` once nothing (no
// stream, no graph) can use its launches any more.
typedef struct MlxcelAmdgpuLaunchList MlxcelAmdgpuLaunchList;

// The shape and quantization format of one routed-expert layer (MLX affine
// format): `bits` 4 or 8, `group_size` 32, 64 or 128; `din` and `dff`
// multiples of it.
typedef struct MlxcelAmdgpuMoeShape {
  // Experts in the stacks `w1`, `w2` (E).
  uint32_t n_experts;
  // Expert slots of the token (K, the top-k).
  uint32_t k;
  // Hidden size (Din).
  uint32_t din;
  // Expert intermediate size (Dff).
  uint32_t dff;
  // Bits per weight: 4 or 8.
  uint32_t bits;
  // Columns per scale and bias: 32, 64 or 128.
  uint32_t group_size;
} MlxcelAmdgpuMoeShape;

// One quantized matrix (or stack) of the C ABI: codes, scales and biases.
typedef struct MlxcelAmdgpuQuantized {
  // Packed codes (u32 words).
  const uint32_t *w;
  // Scales, one a group, of the activation dtype.
  const void *scales;
  // Biases, one a group, of the activation dtype.
  const void *biases;
} MlxcelAmdgpuQuantized;

// One described launch: what `hipModuleLaunchKernel` (or `cuLaunchKernel`)
// and a HIP graph kernel node (`hipKernelNodeParams`) take.
typedef struct MlxcelAmdgpuLaunchDesc {
  // `hipFunction_t` on the HIP backend, `CUfunction` on the CUDA backend.
  void *function;
  // Workgroups along x, y, z.
  uint32_t grid[3];
  // Threads of a workgroup along x, y, z.
  uint32_t block[3];
  // Dynamic workgroup memory in bytes.
  uint32_t shared_mem_bytes;
  // One pointer per kernel argument (`kernelParams`), into storage the
  // list owns: valid until the list is released.
  void **kernel_params;
} MlxcelAmdgpuLaunchDesc;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The message of the last failed call on this thread ("" after a success).
// Valid until the next call of this library on the same thread.
const char *mlxcel_amdgpu_last_error(void);

// Opens device `ordinal` of backend `name` ("hip", "cuda" or "cpu"; the CPU
// backend has only ordinal 0) as the process-wide device, replacing any device
// opened before. If it fails, no device is selected afterwards: every
// predicate answers false and every launch returns `MLXCEL_AMDGPU_UNAVAILABLE`
// saying the select failed, until a select succeeds. Optional: without it,
// the first call opens the default device.
//
// # Safety
// `name` is a NUL-terminated string.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_select_device(const char *name, uint32_t ordinal);

// [`mlxcel_amdgpu_select_device`] with ordinal 0.
//
// # Safety
// `name` is a NUL-terminated string.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_select_backend(const char *name);

// The version of this C ABI, [`MLXCEL_AMDGPU_ABI_VERSION`] of the library that
// is loaded. A caller compiled against another header version should refuse
// to use the library.
uint32_t mlxcel_amdgpu_abi_version(void);

// Writes a one-line description of the device (backend, name, architecture,
// wave size, loaded kernels) into `buf` of `len` bytes, NUL-terminated and
// truncated if needed. On failure `buf` (if usable) holds the empty string.
//
// # Safety
// `buf` points to `len` writable bytes.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_describe_device(char *buf, uintptr_t len);

// Whether `xielu` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
bool mlxcel_amdgpu_xielu_available(uint32_t dtype);

// `out[i] = xielu(x[i])`, i < n (docs/contracts.md, "xielu"; `alpha_p` and
// `alpha_n` arrive already softplus-ed), `n` at most
// `MLXCEL_AMDGPU_XIELU_MAX_N`. Aliasing: `out` may be exactly `x`
// (in place); any other overlap is refused.
//
// # Safety
// `x` and `out` are device pointers to `n` elements of `dtype`; `stream` is a
// stream of the device's backend or NULL.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_xielu(uint32_t dtype,
                                            const void *x,
                                            void *out,
                                            uint64_t n,
                                            float alpha_p,
                                            float alpha_n,
                                            float beta,
                                            float eps,
                                            void *stream);

// Whether `add3_layer_norm` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
bool mlxcel_amdgpu_add3_layer_norm_available(uint32_t dtype);

// Whether `add3_layer_norm` for `dtype` can run on the device with `rows`
// rows of `d` elements: the same checks the launch makes of the shape.
bool mlxcel_amdgpu_add3_layer_norm_supports(uint32_t dtype, uint32_t rows, uint32_t d);

// `x_new = (a + b) + x`, `h = LayerNorm(x_new; w, bias, eps)` over rows of
// `d` elements (docs/contracts.md, "add3_layer_norm"), byte-identical to
// MLX's unfused pair. `bias` may be NULL. `d` must be in
// 1..=`MLXCEL_AMDGPU_ADD3_MAX_D`. Aliasing: `x_new` may be exactly one of `a`,
// `b`, `x`, and so may `h`, but `x_new` and `h` never overlap; any other
// overlap with an output is refused.
//
// # Safety
// `a, b, x, x_new, h` are device pointers to `rows * d` elements of `dtype`,
// `w` and `bias` (unless NULL) to `d` elements; `stream` as for xielu.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_add3_layer_norm(uint32_t dtype,
                                                      const void *a,
                                                      const void *b,
                                                      const void *x,
                                                      const void *w,
                                                      const void *bias,
                                                      void *x_new,
                                                      void *h,
                                                      uint32_t rows,
                                                      uint32_t d,
                                                      float eps,
                                                      void *stream);

// Whether `mamba1_scan` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
bool mlxcel_amdgpu_mamba1_scan_available(uint32_t dtype);

// Whether `mamba1_scan` for `dtype` can run on the device with this shape:
// the same checks the launch makes of it.
bool mlxcel_amdgpu_mamba1_scan_supports(uint32_t dtype,
                                        uint32_t batch,
                                        uint32_t len,
                                        uint32_t dm,
                                        uint32_t n);

// The Mamba1 selective scan (docs/contracts.md) over `len` steps of `batch`
// sequences of `dm` channels with `n` (1..=32) state columns:
// `x, dt, y [batch, len, dm]`, `bm, cm [batch, len, n]` and `dskip [dm]` of
// `dtype`; `a [dm, n]`, `state_in` and `state_out [batch, dm, n]` f32.
// Aliasing: `state_out` may be exactly `state_in` (an in-place update); any
// other overlap with `y` or `state_out` is refused.
//
// # Safety
// The pointers are device pointers to buffers of those sizes; `y` overlaps
// nothing else; `stream` as for xielu.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_mamba1_scan(uint32_t dtype,
                                                  const void *x,
                                                  const void *dt,
                                                  const void *bm,
                                                  const void *cm,
                                                  const float *a,
                                                  const void *dskip,
                                                  const float *state_in,
                                                  void *y,
                                                  float *state_out,
                                                  uint32_t batch,
                                                  uint32_t len,
                                                  uint32_t dm,
                                                  uint32_t n,
                                                  void *stream);

// Whether the MoE kernels (`moe_fc1_relu2`, `moe_down`, `moe_combine`) for
// `dtype` (an [`MlxcelAmdgpuDtype`]) can all run on the device.
bool mlxcel_amdgpu_moe_available(uint32_t dtype);

// Whether the MoE kernels for `dtype` can all run on the device with `shape`:
// the same checks the launches make of it.
bool mlxcel_amdgpu_moe_supports(uint32_t dtype, struct MlxcelAmdgpuMoeShape shape);

// Whether `moe_gateup` and `moe_down` at every width it takes (4, 6 and 8
// bits) for `dtype` can run on the device: the gated (SwiGLU, GeGLU) experts.
bool mlxcel_amdgpu_moe_gated_available(uint32_t dtype);

// Whether [`mlxcel_amdgpu_moe_gateup`] for `dtype` takes `shape` (4 or 8 bits)
// on the device: the checks the launch makes.
bool mlxcel_amdgpu_moe_gateup_supports(uint32_t dtype, struct MlxcelAmdgpuMoeShape shape);

// Whether [`mlxcel_amdgpu_moe_down`] for `dtype` takes `shape` (4, 6 or 8
// bits) on the device: the checks the launch makes.
bool mlxcel_amdgpu_moe_down_supports(uint32_t dtype, struct MlxcelAmdgpuMoeShape shape);

// Writes to `*bytes` the bytes of f32 scratch that
// [`mlxcel_amdgpu_moe_routed_forward`] needs for `k`, `din` and `dff` (`act`
// and `part`). A size that does not fit in 64 bits and in `size_t` is
// `MLXCEL_AMDGPU_INVALID_ARGUMENT` naming `k` (a NULL `bytes`: naming
// `bytes`), and `*bytes` is then left unchanged. The shape's limits are not
// checked here (the launch checks them): any size that can be written is.
//
// # Safety
// `bytes` is NULL or points to a writable `size_t`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_scratch_bytes(uint32_t k,
                                                        uint32_t din,
                                                        uint32_t dff,
                                                        uintptr_t *bytes);

// `act[k, f] = relu(x . dequant(w1[idx[k], f, :]))^2` (f32 `[k, dff]`).
// `status` (one u32, zeroed by the caller, or NULL) receives `1 + k` for the
// first slot whose expert id is `>= n_experts`; that slot's rows become NaN and
// no out-of-range memory is read. Aliasing: none; `act` may not overlap any
// other buffer.
//
// # Safety
// Device pointers of the shapes in `host/kernels/moe.rs`; `stream` as for xielu.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_fc1_relu2(uint32_t dtype,
                                                    struct MlxcelAmdgpuMoeShape shape,
                                                    const void *x,
                                                    const uint32_t *idx,
                                                    const uint32_t *w1,
                                                    const void *s1,
                                                    const void *b1,
                                                    float *act,
                                                    uint32_t *status,
                                                    void *stream);

// `act[k, f] = a(x . dequant(wg[idx[k], f, :])) * (x . dequant(wu[idx[k], f, :]))`
// (f32 `[k, dff]`), `a` SiLU (`activation` 0, SwiGLU) or GELU's tanh form (1,
// GeGLU); any other `activation` is `MLXCEL_AMDGPU_INVALID_ARGUMENT`.
// `shape.bits` 4 or 8 (the gate and up stacks'). `status` as for
// [`mlxcel_amdgpu_moe_fc1_relu2`].
//
// # Safety
// As for [`mlxcel_amdgpu_moe_fc1_relu2`], with the gate and up stacks each of
// `w1`'s shape.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_gateup(uint32_t dtype,
                                                 struct MlxcelAmdgpuMoeShape shape,
                                                 uint32_t activation,
                                                 const void *x,
                                                 const uint32_t *idx,
                                                 const uint32_t *wg,
                                                 const void *sg,
                                                 const void *bg,
                                                 const uint32_t *wu,
                                                 const void *su,
                                                 const void *bu,
                                                 float *act,
                                                 uint32_t *status,
                                                 void *stream);

// `part[k, h] = scores[k] * (act[k, :] . dequant(w2[idx[k], h, :]))` (f32 `[k, din]`),
// `shape.bits` 4, 6 (MLX's four values in three bytes) or 8.
// `status` as for [`mlxcel_amdgpu_moe_fc1_relu2`].
//
// # Safety
// As for [`mlxcel_amdgpu_moe_fc1_relu2`].
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_down(uint32_t dtype,
                                               struct MlxcelAmdgpuMoeShape shape,
                                               const uint32_t *idx,
                                               const uint32_t *w2,
                                               const void *s2,
                                               const void *b2,
                                               const float *act,
                                               const float *scores,
                                               float *part,
                                               uint32_t *status,
                                               void *stream);

// `out[h] = T(sum_k part[k, h])` (f32 sum over k ascending, one rounding).
//
// # Safety
// `part` holds `[k, din]` f32 and `out` `[din]` elements of `dtype`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_combine(uint32_t dtype,
                                                  const float *part,
                                                  void *out,
                                                  uint32_t k,
                                                  uint32_t din,
                                                  void *stream);

// [`mlxcel_amdgpu_moe_gateup`] for `m` tokens in one launch: `x [m, din]`,
// `idx [m, k]` (`k = shape.k`), `act [m, k, dff]` (f32), each token's rows
// bit for bit those of the single-token call. `m` in 1..=8 and `m * k` at
// most 512 (`MLXCEL_AMDGPU_INVALID_ARGUMENT` naming `m`, or `k`); `m = 1`
// runs the single-token kernel. `status` receives `1 + t * k + j` for the
// first bad id in flat order.
//
// # Safety
// As for [`mlxcel_amdgpu_moe_gateup`], with the shapes above.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_gateup_batch(uint32_t dtype,
                                                       struct MlxcelAmdgpuMoeShape shape,
                                                       uint32_t m,
                                                       uint32_t activation,
                                                       const void *x,
                                                       const uint32_t *idx,
                                                       const uint32_t *wg,
                                                       const void *sg,
                                                       const void *bg,
                                                       const uint32_t *wu,
                                                       const void *su,
                                                       const void *bu,
                                                       float *act,
                                                       uint32_t *status,
                                                       void *stream);

// [`mlxcel_amdgpu_moe_down`] for `m` tokens in one launch: `idx` and
// `scores [m, k]`, `act [m, k, dff]`, `part [m, k, din]` (f32); limits as
// for [`mlxcel_amdgpu_moe_gateup_batch`]. `shape.bits` 4, 6 or 8 (6 runs
// `moe_down6` over the `m * k` flat slots).
//
// # Safety
// As for [`mlxcel_amdgpu_moe_down`], with the shapes above.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_down_batch(uint32_t dtype,
                                                     struct MlxcelAmdgpuMoeShape shape,
                                                     uint32_t m,
                                                     const uint32_t *idx,
                                                     const uint32_t *w2,
                                                     const void *s2,
                                                     const void *b2,
                                                     const float *act,
                                                     const float *scores,
                                                     float *part,
                                                     uint32_t *status,
                                                     void *stream);

// `out[t, h] = T(sum_j part[t, j, h])` for `m` tokens (f32 sums over `j`
// ascending, one rounding); limits as for [`mlxcel_amdgpu_moe_gateup_batch`].
//
// # Safety
// `part` holds `[m, k, din]` f32 and `out` `[m, din]` elements of `dtype`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_combine_batch(uint32_t dtype,
                                                        const float *part,
                                                        void *out,
                                                        uint32_t m,
                                                        uint32_t k,
                                                        uint32_t din,
                                                        void *stream);

// The whole routed-expert forward of one token: `moe_fc1_relu2`, `moe_down`
// and `moe_combine` enqueued in order on `stream`, `out [din]` of `dtype`.
// `scratch` is device memory of at least [`mlxcel_amdgpu_moe_scratch_bytes`]
// bytes (`scratch_len`) that nothing else uses until the stream has run them.
// `status` as for [`mlxcel_amdgpu_moe_fc1_relu2`].
//
// # Safety
// As for [`mlxcel_amdgpu_moe_fc1_relu2`].
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_routed_forward(uint32_t dtype,
                                                         struct MlxcelAmdgpuMoeShape shape,
                                                         const void *x,
                                                         const uint32_t *idx,
                                                         const float *scores,
                                                         const uint32_t *w1,
                                                         const void *s1,
                                                         const void *b1,
                                                         const uint32_t *w2,
                                                         const void *s2,
                                                         const void *b2,
                                                         void *out,
                                                         void *scratch,
                                                         uintptr_t scratch_len,
                                                         uint32_t *status,
                                                         void *stream);

// Whether the router's kernels (`moe_router_logits`, `moe_topk`) for `dtype`
// (an [`MlxcelAmdgpuDtype`]) can both run on the device.
bool mlxcel_amdgpu_moe_router_available(uint32_t dtype);

// Whether [`mlxcel_amdgpu_moe_router`] for `dtype` takes this shape on the
// device: the checks the launch makes of it.
bool mlxcel_amdgpu_moe_router_supports(uint32_t dtype,
                                       uint32_t m,
                                       uint32_t n_experts,
                                       uint32_t k,
                                       uint32_t din);

// The router of the routed experts for `m` tokens (1..=8): `logits [m,
// n_experts] = x [m, din] . wr [n_experts, din]^T` in f32, then per token
// the softmax of its logits, the `k` most probable experts `ids [m, k]`
// (larger first, the lower id on equal probabilities) and their
// probabilities `scores [m, k]` (f32), divided by their sum when
// `norm_topk_prob` is 1 (0: as they are; anything else is
// `MLXCEL_AMDGPU_INVALID_ARGUMENT`). Two launches in order on `stream`;
// `logits` is the caller's f32 buffer between them (its values stay for
// the caller to read). A token whose logits hold a NaN or `+inf`, or are all
// `-inf`, gets ids `UINT32_MAX` and scores NaN. Aliasing: none; no output
// may overlap any other buffer.
//
// # Safety
// `x` and `wr` are device pointers to those shapes of `dtype`, `logits`,
// `ids` and `scores` to those shapes of f32, u32 and f32; `stream` as for
// xielu.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_router(uint32_t dtype,
                                                 const void *x,
                                                 const void *wr,
                                                 float *logits,
                                                 uint32_t *ids,
                                                 float *scores,
                                                 uint32_t m,
                                                 uint32_t n_experts,
                                                 uint32_t k,
                                                 uint32_t din,
                                                 uint32_t norm_topk_prob,
                                                 void *stream);

// Whether every kernel of [`mlxcel_amdgpu_moe_block`] for `dtype` (an
// [`MlxcelAmdgpuDtype`]) can run on the device, at every `m`.
bool mlxcel_amdgpu_moe_block_available(uint32_t dtype);

// Whether [`mlxcel_amdgpu_moe_block`] for `dtype` takes `m` tokens of this
// shape on the device: the checks the launch makes of them.
bool mlxcel_amdgpu_moe_block_supports(uint32_t dtype,
                                      struct MlxcelAmdgpuMoeShape shape,
                                      uint32_t m);

// Writes to `*bytes` the scratch [`mlxcel_amdgpu_moe_block`] needs for `m`
// tokens of this shape: the router's `logits [m, E]`, `ids [m, K]` and
// `scores [m, K]`, then `act [m, K, Dff]`, `part [m, K, Din]` and the down
// launch's arrival counts `[m, ceil(Din / 32)]` (f32, u32, f32, f32, f32,
// u32), each on 256 bytes. Refuses the sizes the launch refuses.
//
// # Safety
// `bytes` points to a writable `size_t`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_block_scratch_bytes(struct MlxcelAmdgpuMoeShape shape,
                                                              uint32_t m,
                                                              uintptr_t *bytes);

// The whole routed-expert block of a gated MoE layer (Qwen3 MoE) for `m`
// tokens (1..=8): [`mlxcel_amdgpu_moe_router`] of `x [m, din]` and `wr
// [n_experts, din]` into `scratch`, then [`mlxcel_amdgpu_moe_gateup_batch`],
// [`mlxcel_amdgpu_moe_down_batch`] and [`mlxcel_amdgpu_moe_combine_batch`]
// into `out [m, din]` of `dtype`, bit for bit those calls on the same
// inputs, in order on `stream`: three launches at `m = 1`, where the
// router's top-k runs inside the gate/up launch (`moe_gateup_routed`), four
// from `m = 2`. The combine runs inside the down launch
// (`moe_down_combine`): the last of a token's workgroups to finish a block
// of rows sums the token's rows there, counted in the scratch, which the
// router's launch clears. `shape.k` is the router's top-k (at most 16, at most
// `n_experts`); `shape.bits` 4 or 8; `activation` 0 SwiGLU or 1 GeGLU;
// `norm_topk_prob` 0 or 1. `scratch` holds at least
// [`mlxcel_amdgpu_moe_block_scratch_bytes`] bytes (`scratch_len`) that
// nothing else uses until the stream has run the block. `status`, NULL or
// one zeroed u32, receives `1 + t * k + j` for the first slot whose id is out
// of range (a token whose logits hold a NaN). Every argument is checked
// before the first launch. Aliasing: none.
//
// # Safety
// `x`, `wr` and `out` are device pointers to those shapes of `dtype`, the
// stacks as for [`mlxcel_amdgpu_moe_gateup`] and [`mlxcel_amdgpu_moe_down`];
// `stream` as for xielu.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_block(uint32_t dtype,
                                                struct MlxcelAmdgpuMoeShape shape,
                                                uint32_t m,
                                                uint32_t activation,
                                                uint32_t norm_topk_prob,
                                                const void *x,
                                                const void *wr,
                                                const uint32_t *wg,
                                                const void *sg,
                                                const void *bg,
                                                const uint32_t *wu,
                                                const void *su,
                                                const void *bu,
                                                const uint32_t *w2,
                                                const void *s2,
                                                const void *b2,
                                                void *out,
                                                void *scratch,
                                                uintptr_t scratch_len,
                                                uint32_t *status,
                                                void *stream);

// Whether every kernel of [`mlxcel_amdgpu_moe_block_quantized_router`] for
// `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device, at every `m`.
bool mlxcel_amdgpu_moe_block_quantized_router_available(uint32_t dtype);

// Whether [`mlxcel_amdgpu_moe_block_quantized_router`] for `dtype` takes `m`
// tokens of this shape with a router of `router_bits` and
// `router_group_size` on the device: the checks the launch makes of them.
bool mlxcel_amdgpu_moe_block_quantized_router_supports(uint32_t dtype,
                                                       struct MlxcelAmdgpuMoeShape shape,
                                                       uint32_t m,
                                                       uint32_t router_bits,
                                                       uint32_t router_group_size);

// [`mlxcel_amdgpu_moe_block`] with the router's weights quantized as MLX
// quantizes a linear layer (mlx-lm quantizes Qwen3 MoE's `mlp.gate` at 8
// bits, group 64): codes `wq [n_experts, din * router_bits / 32]` u32
// (16-byte aligned codes take one load a quad), and scales and biases `sq`,
// `bq [n_experts, din / router_group_size]` of `dtype`, read by
// `moe_router_logits_q`.
// `router_bits` is 4 or 8, `router_group_size` 32, 64 or 128 (dividing
// `din`), whatever the experts' `shape.bits` and `shape.group_size`. The
// scratch is [`mlxcel_amdgpu_moe_block_scratch_bytes`]'; everything else is
// as for [`mlxcel_amdgpu_moe_block`], and every argument is checked before
// the first launch.
//
// # Safety
// As for [`mlxcel_amdgpu_moe_block`], with `wq`, `sq` and `bq` device
// pointers to those shapes.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_block_quantized_router(uint32_t dtype,
                                                                 struct MlxcelAmdgpuMoeShape shape,
                                                                 uint32_t m,
                                                                 uint32_t router_bits,
                                                                 uint32_t router_group_size,
                                                                 uint32_t activation,
                                                                 uint32_t norm_topk_prob,
                                                                 const void *x,
                                                                 const uint32_t *wq,
                                                                 const void *sq,
                                                                 const void *bq,
                                                                 const uint32_t *wg,
                                                                 const void *sg,
                                                                 const void *bg,
                                                                 const uint32_t *wu,
                                                                 const void *su,
                                                                 const void *bu,
                                                                 const uint32_t *w2,
                                                                 const void *s2,
                                                                 const void *b2,
                                                                 void *out,
                                                                 void *scratch,
                                                                 uintptr_t scratch_len,
                                                                 uint32_t *status,
                                                                 void *stream);

// Whether every kernel of [`mlxcel_amdgpu_moe_block_shared_expert`] for
// `dtype` (an [`MlxcelAmdgpuDtype`]) with a router of `router_bits` (0:
// dense) can run on the device, at every `m`.
bool mlxcel_amdgpu_moe_block_shared_expert_available(uint32_t dtype, uint32_t router_bits);

// Whether [`mlxcel_amdgpu_moe_block_shared_expert`] for `dtype` takes `m`
// tokens of this shape with a router of `router_bits` (0: dense) and
// `router_group_size` (0 with a dense router) on the device: the checks the
// launch makes of them.
bool mlxcel_amdgpu_moe_block_shared_expert_supports(uint32_t dtype,
                                                    struct MlxcelAmdgpuMoeShape shape,
                                                    uint32_t m,
                                                    uint32_t router_bits,
                                                    uint32_t router_group_size);

// Writes to `*bytes` the scratch [`mlxcel_amdgpu_moe_block_shared_expert`]
// needs for `m` tokens of this shape: as
// [`mlxcel_amdgpu_moe_block_scratch_bytes`] with `k + 1` slots a token, and
// the shared gate's logits `[m]` (f32) before the arrival counts, each on 256
// bytes. Refuses the sizes the launch refuses.
//
// # Safety
// `bytes` points to a writable `size_t`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(struct MlxcelAmdgpuMoeShape shape,
                                                                            uint32_t m,
                                                                            uintptr_t *bytes);

// [`mlxcel_amdgpu_moe_block`] with a shared expert (Qwen3-Next): `out[t] =
// routed(x[t]) + sigmoid(x[t] . expert_gate) * down_s(a(gate_s(x[t])) *
// up_s(x[t]))`, in the same launches (the shared expert is one more
// slot a token, summed last). The router `[n_experts, din]` and the gate
// row `expert_gate [din]` (`shared_expert_gate`, a linear layer of one
// output) are dense when `router_bits` is 0 (`w` holds values of `dtype`;
// `scales`, `biases` and `router_group_size` are NULL and 0), else both
// quantized at `router_bits` (4 or 8) and `router_group_size` (32, 64 or
// 128), as mlx-lm quantizes Qwen3-Next's `mlp.gate` and
// `shared_expert_gate` (8 bits, group 64). `shared_gate`, `shared_up` and
// `shared_down` are one expert of the routed stacks' shape and format.
// `scratch` holds at least
// [`mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes`] bytes. `status`
// receives `1 + t * (k + 1) + j` for the first slot out of range. Everything
// else is as for [`mlxcel_amdgpu_moe_block`], and every argument is checked
// before the first launch.
//
// # Safety
// As for [`mlxcel_amdgpu_moe_block`], with each matrix's pointers device
// pointers to those shapes.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_moe_block_shared_expert(uint32_t dtype,
                                                              struct MlxcelAmdgpuMoeShape shape,
                                                              uint32_t m,
                                                              uint32_t router_bits,
                                                              uint32_t router_group_size,
                                                              uint32_t activation,
                                                              uint32_t norm_topk_prob,
                                                              const void *x,
                                                              struct MlxcelAmdgpuQuantized router,
                                                              struct MlxcelAmdgpuQuantized expert_gate,
                                                              struct MlxcelAmdgpuQuantized gate,
                                                              struct MlxcelAmdgpuQuantized up,
                                                              struct MlxcelAmdgpuQuantized down,
                                                              struct MlxcelAmdgpuQuantized shared_gate,
                                                              struct MlxcelAmdgpuQuantized shared_up,
                                                              struct MlxcelAmdgpuQuantized shared_down,
                                                              void *out,
                                                              void *scratch,
                                                              uintptr_t scratch_len,
                                                              uint32_t *status,
                                                              void *stream);

// Starts describing launches on this thread: until
// `mlxcel_amdgpu_describe_end`, each launch call on this thread checks its
// arguments as usual and then records its kernel launches instead of
// enqueuing them. Its `stream` must be NULL. Only a GPU backend (hip, cuda)
// describes; on the CPU backend such a launch call returns
// `MLXCEL_AMDGPU_UNAVAILABLE`. Describing while already describing is
// `MLXCEL_AMDGPU_INVALID_ARGUMENT`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_describe_begin(void);

// Stops describing on this thread and hands the launches recorded since
// `mlxcel_amdgpu_describe_begin` to `*list` (possibly none: a launch with
// nothing to do records nothing). `MLXCEL_AMDGPU_INVALID_ARGUMENT` if the
// thread was not describing or `list` is NULL; describing ends either way.
//
// # Safety
// `list` is NULL or points to a writable pointer.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_describe_end(struct MlxcelAmdgpuLaunchList **list);

// The number of launches in `list` (0 for NULL).
//
// # Safety
// `list` is NULL or a list from `mlxcel_amdgpu_describe_end` not yet released.
uintptr_t mlxcel_amdgpu_launch_list_len(const struct MlxcelAmdgpuLaunchList *list);

// Writes launch `index` of `list` to `*out`.
//
// # Safety
// `list` is a list from `mlxcel_amdgpu_describe_end` not yet released; `out`
// is NULL or points to a writable `MlxcelAmdgpuLaunchDesc`.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_launch_list_get(const struct MlxcelAmdgpuLaunchList *list,
                                                      uintptr_t index,
                                                      struct MlxcelAmdgpuLaunchDesc *out);

// Frees `list` and the arguments of its launches (NULL is a no-op). The
// arguments are overwritten first, so a graph still using them faults
// rather than running on stale values.
//
// # Safety
// `list` is NULL or a list from `mlxcel_amdgpu_describe_end`, released once,
// after every stream and graph that uses its launches is done with them.
void mlxcel_amdgpu_launch_list_release(struct MlxcelAmdgpuLaunchList *list);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* MLXCEL_AMDGPU_H */
