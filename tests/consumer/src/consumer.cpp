// xielu through the C ABI, as the MLX shim calls it: the CPU device selected by name, host
// pointers, the default stream. Returns the status, with the library's message in `why`.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mlxcel_amdgpu.h"

extern "C" int consumer_xielu_f32(const float *x, float *out, uint64_t n, float alpha_p, float alpha_n,
                                  float beta, float eps, char *why, size_t why_len) {
    MlxcelAmdgpuStatus status = mlxcel_amdgpu_select_device("cpu", 0);
    if (status == MLXCEL_AMDGPU_OK) {
        status = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, x, out, n, alpha_p, alpha_n, beta, eps, nullptr);
    }
    if (status != MLXCEL_AMDGPU_OK && why_len > 0) {
        std::strncpy(why, mlxcel_amdgpu_last_error(), why_len - 1);
        why[why_len - 1] = '\0';
    }
    return static_cast<int>(status);
}
