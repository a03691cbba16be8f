// A C++ consumer of the C ABI, as mlxcel's ROCm backend uses it: availability
// predicates, launches, and the error path. Runs on the CPU backend (device
// pointers are host pointers there). Exit status 0 means every check passed.
#include "mlxcel_amdgpu.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static int failures = 0;

#define CHECK(cond, ...)                                   \
    do {                                                   \
        if (!(cond)) {                                     \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            std::fprintf(stderr, __VA_ARGS__);             \
            std::fprintf(stderr, "\n");                    \
            ++failures;                                    \
        }                                                  \
    } while (0)

int main() {
    // The HIP backend is absent on a machine without ROCm: a clear status, no crash.
    MlxcelAmdgpuStatus st = mlxcel_amdgpu_select_backend("hip");
    if (st != MLXCEL_AMDGPU_OK) {
        CHECK(st == MLXCEL_AMDGPU_UNAVAILABLE, "select hip: status %d", (int)st);
        CHECK(std::strlen(mlxcel_amdgpu_last_error()) > 0, "select hip: empty message");
        std::printf("hip: %s\n", mlxcel_amdgpu_last_error());
    }
    st = mlxcel_amdgpu_select_backend("cpu");
    CHECK(st == MLXCEL_AMDGPU_OK, "select cpu: %s", mlxcel_amdgpu_last_error());

    char desc[256];
    CHECK(mlxcel_amdgpu_describe_device(desc, sizeof desc) == MLXCEL_AMDGPU_OK, "describe");
    std::printf("device: %s\n", desc);

    for (uint32_t dt : {MLXCEL_AMDGPU_F32, MLXCEL_AMDGPU_F16, MLXCEL_AMDGPU_BF16}) {
        CHECK(mlxcel_amdgpu_xielu_available(dt), "xielu dtype %u unavailable", dt);
        CHECK(mlxcel_amdgpu_add3_layer_norm_available(dt), "add3 dtype %u unavailable", dt);
    }
    CHECK(!mlxcel_amdgpu_xielu_available(7), "dtype 7 must be unavailable");

    // xielu, f32, positive inputs: alpha_p*x*x + beta*x with the model's roundings
    // (this file is compiled with -ffp-contract=off).
    const float ap = 0.8731f, an = 0.6042f, be = 0.5f, eps = -1e-6f;
    std::vector<float> x(1000), out(1000, -1.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * (float)(i + 1);
    st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, x.data(), out.data(), x.size(), ap, an, be, eps, nullptr);
    CHECK(st == MLXCEL_AMDGPU_OK, "xielu: %s", mlxcel_amdgpu_last_error());
    for (size_t i = 0; i < x.size(); ++i) {
        float v = x[i];
        float x_sq = v * v;
        float pos = x_sq * ap;
        float bx = v * be;
        float want = pos + bx;
        CHECK(std::memcmp(&want, &out[i], 4) == 0, "xielu[%zu]: got %.9g want %.9g", i, out[i], want);
    }

    // add3_layer_norm, f32, D = 96, 3 rows, with bias.
    const uint32_t rows = 3, d = 96;
    std::vector<float> a(rows * d), b(rows * d), xr(rows * d), w(d), bias(d), x_new(rows * d), h(rows * d);
    for (uint32_t i = 0; i < rows * d; ++i) {
        a[i] = std::sin(0.1f * i);
        b[i] = std::cos(0.07f * i);
        xr[i] = 4.0f * std::sin(0.013f * i + 1.0f);
    }
    for (uint32_t i = 0; i < d; ++i) {
        w[i] = 0.5f + 0.01f * i;
        bias[i] = 0.1f * std::cos(0.3f * i);
    }
    st = mlxcel_amdgpu_add3_layer_norm(MLXCEL_AMDGPU_F32, a.data(), b.data(), xr.data(), w.data(), bias.data(),
                                       x_new.data(), h.data(), rows, d, 1e-5f, nullptr);
    CHECK(st == MLXCEL_AMDGPU_OK, "add3_layer_norm: %s", mlxcel_amdgpu_last_error());
    for (uint32_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (uint32_t i = 0; i < d; ++i) {
            float want = (a[r * d + i] + b[r * d + i]) + xr[r * d + i];
            CHECK(std::memcmp(&want, &x_new[r * d + i], 4) == 0, "x_new[%u,%u]", r, i);
            mean += want;
        }
        mean /= d;
        for (uint32_t i = 0; i < d; ++i) var += (x_new[r * d + i] - mean) * (x_new[r * d + i] - mean);
        var /= d;
        for (uint32_t i = 0; i < d; ++i) {
            double want = (x_new[r * d + i] - mean) / std::sqrt(var + 1e-5) * w[i] + bias[i];
            CHECK(std::fabs(want - h[r * d + i]) < 1e-5 * (1 + std::fabs(want)), "h[%u,%u]: got %g want %g", r, i, h[r * d + i], want);
        }
    }

    // Error paths: nothing launched, a status and a message naming the argument.
    st = mlxcel_amdgpu_add3_layer_norm(MLXCEL_AMDGPU_F32, a.data(), b.data(), xr.data(), w.data(), nullptr,
                                       x_new.data(), h.data(), 1, 7000, 1e-5f, nullptr);
    CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "d = 7000: status %d", (int)st);
    CHECK(std::string(mlxcel_amdgpu_last_error()).find("`d`") != std::string::npos, "message: %s", mlxcel_amdgpu_last_error());
    std::printf("d = 7000 refused: %s\n", mlxcel_amdgpu_last_error());
    st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_BF16, nullptr, out.data(), 4, ap, an, be, eps, nullptr);
    CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "null x: status %d", (int)st);
    st = mlxcel_amdgpu_xielu(9, x.data(), out.data(), 4, ap, an, be, eps, nullptr);
    CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "dtype 9: status %d", (int)st);
    st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, x.data(), out.data(), 4, ap, an, be, eps, nullptr);
    CHECK(st == MLXCEL_AMDGPU_OK && mlxcel_amdgpu_last_error()[0] == 0, "success clears the message");

    if (failures == 0) std::printf("C ABI consumer: all checks passed\n");
    return failures == 0 ? 0 : 1;
}
