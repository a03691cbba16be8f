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

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* MLXCEL_AMDGPU_H */
