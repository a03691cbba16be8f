#ifndef MLXCEL_AMDGPU_H
#define MLXCEL_AMDGPU_H

/* Generated from host/ffi.rs by cbindgen; do not edit. Regenerate with: MLXCEL_AMDGPU_BLESS=1 cargo test --test c_header */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

// Shape and quantization of one routed-expert layer (MLX affine format):
// `bits` 4 or 8, `group_size` 32, 64 or 128; `din` and `dff` multiples of it.
typedef struct MlxcelAmdgpuMoeShape {
  uint32_t n_experts;
  uint32_t k;
  uint32_t din;
  uint32_t dff;
  uint32_t bits;
  uint32_t group_size;
} MlxcelAmdgpuMoeShape;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// The message of the last failed call on this thread ("" after a success).
// Valid until the next call of this library on the same thread.
const char *mlxcel_amdgpu_last_error(void);

// Opens the process-wide device on backend `name` ("hip", "cuda" or "cpu"),
// replacing any device opened before. Optional: without it, the first call
// opens the default device.
//
// # Safety
// `name` is a NUL-terminated string.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_select_backend(const char *name);

// Writes a one-line description of the device (backend, name, architecture,
// wave size, loaded kernels) into `buf` of `len` bytes, NUL-terminated and
// truncated if needed.
//
// # Safety
// `buf` points to `len` writable bytes.
enum MlxcelAmdgpuStatus mlxcel_amdgpu_describe_device(char *buf, uintptr_t len);

// Whether `xielu` for `dtype` (an [`MlxcelAmdgpuDtype`]) can run on the device.
bool mlxcel_amdgpu_xielu_available(uint32_t dtype);

// `out[i] = xielu(x[i])`, i < n (spec section 1). `x` may equal `out`.
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

// `x_new = (a + b) + x`, `h = LayerNorm(x_new; w, bias, eps)` over rows of
// `d` elements (spec section 2), byte-identical to MLX's unfused pair.
// `bias` may be NULL. `d` must be in 1..=6656.
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

// The Mamba1 selective scan (spec section 3) over `len` steps of `batch`
// sequences of `dm` channels with `n` (1..=32) state columns:
// `x, dt, y [batch, len, dm]`, `bm, cm [batch, len, n]` and `dskip [dm]` of
// `dtype`; `a [dm, n]`, `state_in` and `state_out [batch, dm, n]` f32.
// `state_in` may equal `state_out` (an in-place update).
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

// Bytes of f32 scratch [`mlxcel_amdgpu_moe_routed_forward`] needs (`act` and
// `part`).
uintptr_t mlxcel_amdgpu_moe_scratch_bytes(uint32_t k, uint32_t din, uint32_t dff);

// `act[k, f] = relu(x . dequant(w1[idx[k], f, :]))^2` (f32 `[k, dff]`).
// `status` (one u32, zeroed by the caller, or NULL) receives `1 + k` for the
// first slot whose expert id is `>= n_experts`; that slot's rows become NaN and
// no out-of-range memory is read.
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

// `part[k, h] = scores[k] * (act[k, :] . dequant(w2[idx[k], h, :]))` (f32 `[k, din]`).
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

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* MLXCEL_AMDGPU_H */
