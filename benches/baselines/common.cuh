// Host helpers shared by the CUDA C++ baselines (mamba1_scan.cu, moe_gemv.cu): the error check,
// the contracts' test-data generator (docs/contracts.md, section 5), bf16 conversions, the median and one event-timed call.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t err_ = (call);                                                            \
        if (err_ != cudaSuccess) {                                                            \
            fprintf(stderr, "CUDA error: %s at %s:%d: %s\n", #call, __FILE__, __LINE__,       \
                    cudaGetErrorString(err_));                                                \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

// The contracts' test-data generator (docs/contracts.md, section 5): state = seed * 0x9E3779B97F4A7C15 + 1, then per element the
// MMIX step; value (((state >> 40) / 2^24) * 2 - 1) * scale + offset.
static std::vector<float> gen(uint64_t seed, size_t n, double scale, double offset) {
    uint64_t st = seed * 0x9E3779B97F4A7C15ull + 1;
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(st >> 40) / 16777216.0;
        v[i] = (float)((u * 2.0 - 1.0) * scale + offset);
    }
    return v;
}

static uint16_t f32_to_bf16_bits(float f) {  // round to nearest even (finite inputs)
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float bf16_bits_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Milliseconds of the work `f` enqueues, between two events recorded around it on the default
// stream.
template <class F>
static float event_ms(cudaEvent_t e0, cudaEvent_t e1, F&& f) {
    CK(cudaEventRecord(e0));
    f();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}
