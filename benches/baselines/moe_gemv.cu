// Baseline: straightforward CUDA C++ versions of the quantized expert GEMVs of docs/contracts.md,
// section 6: `moe_fc1_relu2` and `moe_down` on MLX-affine quantized weights (bits 4 and 8).
//
//   act[k,f]  = relu( sum_i x[i] * (q1[idx[k],f,i] * s1 + b1) )^2          (output f32 [K, Dff])
//   part[k,h] = scores[k] * sum_f act[k,f] * (q2[idx[k],h,f] * s2 + b2)    (output f32 [K, Din])
//
// Reference mapping: one warp per output row; the lanes stride over the row's packed 32-bit
// words, one word per lane per step; each word unpacks into 32/bits values (value j in bits
// [j*bits, (j+1)*bits), least significant first); scale and bias are those of the value's group
// (col / gs; since gs is a multiple of 32/bits, all values of a word share one group, so the
// lookup is done once per word); f32 accumulation; a warp sum (xor-shuffle 16..1) at the end;
// 8 rows per 256-thread block; blockIdx.z = expert slot k. An expert id >= E is clamped
// (the host checks the ids before launching).
//
// main(): Nemotron-3-Nano shapes (Din 2688, Dff 1856, E 128, K 6, gs 64), bits 4 and 8, expert
// ids {3, 17, 42, 77, 100, 127}; weights filled on the device with a hash (deterministic);
// x and scores from the contracts' MMIX generator; a check of some rows against a double-precision
// host reference (stderr; the program fails if it is off). Each kernel: warm-up, then 50
// launches each timed with its own pair of events, median. Two numbers per kernel:
//   baseline cuda-cpp moe_fc1_relu2 bits=<b> us=<t> weight_bytes=<bytes>
//       back-to-back launches on the same experts, as the brief asks: the 6 experts' weights
//       (16.8 MB at 4 bits, 32.4 MB at 8 bits) fit in the H200's L2 (50-60 MB), so this is
//       largely an L2-resident number;
//   baseline cuda-cpp moe_fc1_relu2_l2flushed bits=<b> us=<t> weight_bytes=<bytes>
//       the same, with a 256 MiB memset between launches (outside the timed events) so the
//       weights come from HBM, as they do at decode (every layer has its own experts).
// weight_bytes = the 6 selected experts' w + scales + biases for that matrix. And the same for
// moe_down. Finally a 1 GiB device-to-device cudaMemcpy: `copy GBps=<2*bytes/t>` (read+write,
// GB = 1e9, median of 20).
//
// Build: nvcc -O3 -arch=sm_90 -o moe_gemv moe_gemv.cu  (with common.cuh beside it)

#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "common.cuh"


constexpr int kRowsPerBlock = 8;  // 8 warps = 256 threads

__device__ __forceinline__ float warp_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 16);
    v += __shfl_xor_sync(0xffffffffu, v, 8);
    v += __shfl_xor_sync(0xffffffffu, v, 4);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v;
}

// One row of a quantized matrix times a vector v (read through load_v(col)), f32 accumulation.
// Returns the full dot product in every lane.
template <int BITS, class LoadV>
__device__ __forceinline__ float qrow_dot(const uint32_t* __restrict__ wrow,
                                          const __nv_bfloat16* __restrict__ srow,
                                          const __nv_bfloat16* __restrict__ brow, int cols, int gs,
                                          int lane, LoadV load_v) {
    constexpr int VPW = 32 / BITS;
    constexpr uint32_t MASK = (1u << BITS) - 1u;
    const int words = cols / VPW;
    float acc = 0.0f;
    for (int p = lane; p < words; p += 32) {
        const uint32_t w = wrow[p];
        const int col0 = p * VPW;
        const int g = col0 / gs;  // the group of every value of this word
        const float sc = __bfloat162float(srow[g]);
        const float bi = __bfloat162float(brow[g]);
#pragma unroll
        for (int j = 0; j < VPW; ++j) {
            const float q = (float)((w >> (j * BITS)) & MASK);
            acc += load_v(col0 + j) * (q * sc + bi);
        }
    }
    return warp_sum(acc);
}

// One warp per output row: row blockIdx.x * kRowsPerBlock + (warp in block) of slot
// blockIdx.z's expert in a quantized [E, rows, cols] matrix, dotted with v (as qrow_dot);
// lane 0 hands the dot to store(k, row, dot). The warps past the last row do nothing. An
// expert id >= E is clamped (the host checks the ids before launching).
template <int BITS, class LoadV, class Store>
__device__ __forceinline__ void expert_rows(const uint32_t* __restrict__ idx, const uint32_t* __restrict__ w,
                                            const __nv_bfloat16* __restrict__ s,
                                            const __nv_bfloat16* __restrict__ b, int rows, int cols, int E,
                                            int gs, LoadV load_v, Store store) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * kRowsPerBlock + (threadIdx.x >> 5);
    const int k = blockIdx.z;
    if (r >= rows) return;
    const uint32_t e = min(idx[k], (uint32_t)(E - 1));
    const size_t row = (size_t)e * rows + r;
    const int wpr = cols * BITS / 32, gpr = cols / gs;
    const float dot = qrow_dot<BITS>(w + row * wpr, s + row * gpr, b + row * gpr, cols, gs, lane, load_v);
    if (lane == 0) store(k, r, dot);
}

template <int BITS>
__global__ void __launch_bounds__(256)
moe_fc1_relu2(const __nv_bfloat16* __restrict__ x,   // [Din]
              const uint32_t* __restrict__ idx,      // [K]
              const uint32_t* __restrict__ w1,       // [E, Dff, Din*BITS/32]
              const __nv_bfloat16* __restrict__ s1,  // [E, Dff, Din/gs]
              const __nv_bfloat16* __restrict__ b1,  // [E, Dff, Din/gs]
              float* __restrict__ act,               // [K, Dff]
              int Din, int Dff, int E, int gs) {
    expert_rows<BITS>(
        idx, w1, s1, b1, Dff, Din, E, gs, [&](int i) { return __bfloat162float(x[i]); },
        [&](int k, int f, float dot) {
            const float r = fmaxf(dot, 0.0f);
            act[(size_t)k * Dff + f] = r * r;
        });
}

template <int BITS>
__global__ void __launch_bounds__(256)
moe_down(const uint32_t* __restrict__ idx,      // [K]
         const uint32_t* __restrict__ w2,       // [E, Din, Dff*BITS/32]
         const __nv_bfloat16* __restrict__ s2,  // [E, Din, Dff/gs]
         const __nv_bfloat16* __restrict__ b2,  // [E, Din, Dff/gs]
         const float* __restrict__ act,         // [K, Dff]
         const float* __restrict__ scores,      // [K]
         float* __restrict__ part,              // [K, Din]
         int Din, int Dff, int E, int gs) {
    const float* a = act + (size_t)blockIdx.z * Dff;
    expert_rows<BITS>(idx, w2, s2, b2, Din, Dff, E, gs, [&](int i) { return a[i]; },
                      [&](int k, int h, float dot) { part[(size_t)k * Din + h] = scores[k] * dot; });
}

// ---- deterministic device fill ------------------------------------------------------------

__host__ __device__ inline uint32_t hash32(uint64_t i, uint32_t seed) {  // splitmix64 finalizer
    uint64_t z = i + 0x9E3779B97F4A7C15ull * (uint64_t)(seed + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

__global__ void fill_u32(uint32_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = hash32(i, seed);
}

// bf16 values uniform in [lo, hi)
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float u = (float)(hash32(i, seed) >> 8) * (1.0f / 16777216.0f);
        p[i] = __float2bfloat16_rn(lo + (hi - lo) * u);
    }
}

// ---- host helpers -------------------------------------------------------------------------

struct Timer {
    cudaEvent_t e0, e1;
    void* flush = nullptr;
    size_t flush_bytes = 256ull << 20;  // > the H200's L2
    Timer() {
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaMalloc(&flush, flush_bytes));
    }
    ~Timer() {
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        cudaFree(flush);
    }
    // median microseconds of one call of f, each of `reps` calls timed with its own events
    double median_us(const std::function<void()>& f, int reps, bool flush_l2) {
        for (int i = 0; i < 5; ++i) f();
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<double> t;
        for (int i = 0; i < reps; ++i) {
            if (flush_l2) CK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
            t.push_back(event_ms(e0, e1, f) * 1e3);
        }
        CK(cudaGetLastError());
        return median(t);
    }
};

template <class T>
static std::vector<T> download(const T* d, size_t off, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), d + off, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

// Host reference of one quantized row dot a vector (double).
static double ref_row(const std::vector<uint32_t>& w, const std::vector<uint16_t>& s,
                      const std::vector<uint16_t>& b, const std::vector<double>& v, int cols,
                      int gs, int bits) {
    const int vpw = 32 / bits;
    const uint32_t mask = (1u << bits) - 1u;
    double acc = 0;
    for (int c = 0; c < cols; ++c) {
        uint32_t q = (w[c / vpw] >> ((c % vpw) * bits)) & mask;
        int g = c / gs;
        acc += v[c] * ((double)q * bf16_bits_to_f32(s[g]) + bf16_bits_to_f32(b[g]));
    }
    return acc;
}

template <int BITS>
static bool bench_bits(Timer& tm) {
    const int Din = 2688, Dff = 1856, E = 128, K = 6, gs = 64;
    const uint32_t ids[K] = {3, 17, 42, 77, 100, 127};
    for (uint32_t e : ids)
        if (e >= (uint32_t)E) {
            fprintf(stderr, "expert id %u out of range\n", e);
            return false;
        }
    const size_t wpr1 = (size_t)Din * BITS / 32, gpr1 = Din / gs;  // fc1 rows: Dff
    const size_t wpr2 = (size_t)Dff * BITS / 32, gpr2 = Dff / gs;  // down rows: Din
    const size_t nw1 = (size_t)E * Dff * wpr1, ng1 = (size_t)E * Dff * gpr1;
    const size_t nw2 = (size_t)E * Din * wpr2, ng2 = (size_t)E * Din * gpr2;

    uint32_t *w1, *w2, *didx;
    __nv_bfloat16 *s1, *b1, *s2, *b2, *dx;
    float *act, *part, *dscores;
    CK(cudaMalloc(&w1, nw1 * 4));
    CK(cudaMalloc(&w2, nw2 * 4));
    CK(cudaMalloc(&s1, ng1 * 2));
    CK(cudaMalloc(&b1, ng1 * 2));
    CK(cudaMalloc(&s2, ng2 * 2));
    CK(cudaMalloc(&b2, ng2 * 2));
    CK(cudaMalloc(&dx, Din * 2));
    CK(cudaMalloc(&didx, K * 4));
    CK(cudaMalloc(&dscores, K * 4));
    CK(cudaMalloc(&act, (size_t)K * Dff * 4));
    CK(cudaMalloc(&part, (size_t)K * Din * 4));

    // Weights: random codes; scales ~ 1/(2^bits * sqrt(cols)) so every real weight is of order
    // 1/sqrt(cols); biases centre the codes (bias ~ -scale * 2^(bits-1)).
    const float smax1 = 2.0f / ((1 << BITS) * std::sqrt((float)Din));
    const float smax2 = 2.0f / ((1 << BITS) * std::sqrt((float)Dff));
    const float bmag1 = smax1 * (1 << (BITS - 1)), bmag2 = smax2 * (1 << (BITS - 1));
    fill_u32<<<4096, 256>>>(w1, nw1, 11 + BITS);
    fill_u32<<<4096, 256>>>(w2, nw2, 12 + BITS);
    fill_bf16<<<1024, 256>>>(s1, ng1, 13, 0.5f * smax1, smax1);
    fill_bf16<<<1024, 256>>>(b1, ng1, 14, -1.5f * bmag1, -0.5f * bmag1);
    fill_bf16<<<1024, 256>>>(s2, ng2, 15, 0.5f * smax2, smax2);
    fill_bf16<<<1024, 256>>>(b2, ng2, 16, -1.5f * bmag2, -0.5f * bmag2);
    CK(cudaGetLastError());

    std::vector<float> xf = gen(1, Din, 1.0, 0.0);
    std::vector<uint16_t> hx(Din);
    for (int i = 0; i < Din; ++i) hx[i] = f32_to_bf16_bits(xf[i]);
    std::vector<float> scores = gen(8, K, 0.1, 0.2);  // [0.1, 0.3]
    CK(cudaMemcpy(dx, hx.data(), Din * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(didx, ids, K * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dscores, scores.data(), K * 4, cudaMemcpyHostToDevice));

    const dim3 block(32 * kRowsPerBlock);
    const dim3 grid1((Dff + kRowsPerBlock - 1) / kRowsPerBlock, 1, K);
    const dim3 grid2((Din + kRowsPerBlock - 1) / kRowsPerBlock, 1, K);
    auto fc1 = [&]() { moe_fc1_relu2<BITS><<<grid1, block>>>(dx, didx, w1, s1, b1, act, Din, Dff, E, gs); };
    auto down = [&]() { moe_down<BITS><<<grid2, block>>>(didx, w2, s2, b2, act, dscores, part, Din, Dff, E, gs); };

    // correctness: some rows of each expert slot against a double host reference
    fc1();
    down();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> hact = download(act, 0, (size_t)K * Dff);
    std::vector<float> hpart = download(part, 0, (size_t)K * Din);
    double e1 = 0, m1 = 0, e2 = 0, m2 = 0;
    std::vector<double> xv(Din);
    for (int i = 0; i < Din; ++i) xv[i] = bf16_bits_to_f32(hx[i]);
    for (int k = 0; k < K; ++k) {
        const size_t e = ids[k];
        for (int f : {0, 1, 9, 777, Dff - 1}) {
            size_t r = e * Dff + f;
            double d = ref_row(download(w1, r * wpr1, wpr1), download((uint16_t*)s1, r * gpr1, gpr1),
                               download((uint16_t*)b1, r * gpr1, gpr1), xv, Din, gs, BITS);
            double want = d > 0 ? d * d : 0.0;
            e1 = std::max(e1, std::fabs(hact[(size_t)k * Dff + f] - want));
            m1 = std::max(m1, std::fabs(want));
        }
        std::vector<double> av(Dff);  // down checked on the kernel's own act (isolates the kernel)
        for (int f = 0; f < Dff; ++f) av[f] = hact[(size_t)k * Dff + f];
        for (int h : {0, 1, 9, 1000, Din - 1}) {
            size_t r = e * Din + h;
            double want = scores[k] * ref_row(download(w2, r * wpr2, wpr2),
                                              download((uint16_t*)s2, r * gpr2, gpr2),
                                              download((uint16_t*)b2, r * gpr2, gpr2), av, Dff, gs, BITS);
            e2 = std::max(e2, std::fabs(hpart[(size_t)k * Din + h] - want));
            m2 = std::max(m2, std::fabs(want));
        }
    }
    const double r1 = e1 / std::max(1e-12, m1), r2 = e2 / std::max(1e-12, m2);
    const bool ok = r1 < 1e-4 && r2 < 1e-4 && m1 > 0 && m2 > 0;
    fprintf(stderr, "check moe bits=%d: fc1 max_err/max=%.3g (max %.3g), down max_err/max=%.3g (max %.3g) %s\n",
            BITS, r1, m1, r2, m2, ok ? "ok" : "FAILED");

    const size_t wb1 = (size_t)K * Dff * (wpr1 * 4 + gpr1 * 2 * 2);
    const size_t wb2 = (size_t)K * Din * (wpr2 * 4 + gpr2 * 2 * 2);
    const double t1 = tm.median_us(fc1, 50, false), t1c = tm.median_us(fc1, 50, true);
    const double t2 = tm.median_us(down, 50, false), t2c = tm.median_us(down, 50, true);
    printf("baseline cuda-cpp moe_fc1_relu2 bits=%d us=%.2f weight_bytes=%zu\n", BITS, t1, wb1);
    printf("baseline cuda-cpp moe_fc1_relu2_l2flushed bits=%d us=%.2f weight_bytes=%zu\n", BITS, t1c, wb1);
    printf("baseline cuda-cpp moe_down bits=%d us=%.2f weight_bytes=%zu\n", BITS, t2, wb2);
    printf("baseline cuda-cpp moe_down_l2flushed bits=%d us=%.2f weight_bytes=%zu\n", BITS, t2c, wb2);
    fflush(stdout);

    for (void* p : {(void*)w1, (void*)w2, (void*)s1, (void*)b1, (void*)s2, (void*)b2, (void*)dx,
                    (void*)didx, (void*)dscores, (void*)act, (void*)part})
        CK(cudaFree(p));
    return ok;
}

int main() {
    bool ok = true;
    {
        Timer tm;
        ok &= bench_bits<4>(tm);
        ok &= bench_bits<8>(tm);

        const size_t bytes = 1ull << 30;
        void *src, *dst;
        CK(cudaMalloc(&src, bytes));
        CK(cudaMalloc(&dst, bytes));
        CK(cudaMemset(src, 1, bytes));
        const double us = tm.median_us([&]() { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); },
                                       20, false);
        printf("copy GBps=%.1f\n", 2.0 * bytes / (us * 1e-6) / 1e9);
        fflush(stdout);
        CK(cudaFree(src));
        CK(cudaFree(dst));
    }
    return ok ? 0 : 1;
}
