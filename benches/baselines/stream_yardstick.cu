// The byte-mix yardstick for add3_layer_norm (its copy-bandwidth target): what this GPU reaches when a
// launch only moves add3_layer_norm's bytes, three reads and two writes of rows x D bf16 each,
// with no arithmetic and no reduction. A kernel that reads and writes these bytes cannot be much
// faster, so ours and torch.compile's graph can be judged against it rather than against copy
// (one read, one write), whose mix of reads and writes differs.
//
// Each thread of a grid-stride loop takes 16-byte words, UNROLL of each input in flight, and
// writes their xor to both outputs (so that no load can be dropped). Timed as the benchmark times
// our kernels (benches/kernels.rs): 10 launches back to back between two events, the median of
// 20 such calls, after 3 warm-up calls. Several grids are timed; the fastest is the yardstick.
// A one-read-one-write kernel of the same form and cudaMemcpy over 1 GiB are timed beside it, so
// that the kernel form itself can be compared with the copy the benchmark's percentages use.
// Results are checked on the host for one launch of each kernel.
//
// Output lines:
//   baseline yardstick add3_layer_norm rows=8192 D=4096 us=<fastest grid>
//   yardstick <kernel> grid=<blocks>x<threads> us=<t> GBps=<bytes moved / t>
//   yardstick cudaMemcpy bytes=<n> us=<t> GBps=<2 n / t>
#include "common.cuh"

constexpr int UNROLL = 4;

__global__ void move_3r2w(const uint4* __restrict__ a, const uint4* __restrict__ b, const uint4* __restrict__ c,
                          uint4* __restrict__ s, uint4* __restrict__ t, size_t words) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < words; i += UNROLL * stride) {
        uint4 va[UNROLL], vb[UNROLL], vc[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            va[u] = a[i + u * stride];
            vb[u] = b[i + u * stride];
            vc[u] = c[i + u * stride];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            uint4 r = make_uint4(va[u].x ^ vb[u].x ^ vc[u].x, va[u].y ^ vb[u].y ^ vc[u].y, va[u].z ^ vb[u].z ^ vc[u].z,
                                 va[u].w ^ vb[u].w ^ vc[u].w);
            s[i + u * stride] = r;
            t[i + u * stride] = r;
        }
    }
    for (; i < words; i += stride) {
        uint4 r = make_uint4(a[i].x ^ b[i].x ^ c[i].x, a[i].y ^ b[i].y ^ c[i].y, a[i].z ^ b[i].z ^ c[i].z,
                             a[i].w ^ b[i].w ^ c[i].w);
        s[i] = r;
        t[i] = r;
    }
}

__global__ void move_1r1w(const uint4* __restrict__ a, uint4* __restrict__ s, size_t words) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + (UNROLL - 1) * stride < words; i += UNROLL * stride) {
        uint4 va[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) va[u] = a[i + u * stride];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) s[i + u * stride] = va[u];
    }
    for (; i < words; i += stride) s[i] = a[i];
}

// Median microseconds of one launch of `launch`, timed as described at the top.
template <class F>
static double launch_us(F&& launch) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; ++w) launch();
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int r = 0; r < 20; ++r) {
        float ms = event_ms(e0, e1, [&] {
            for (int k = 0; k < 10; ++k) launch();
        });
        t.push_back(1e3 * ms / 10);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return median(t);
}

static void fill(uint4* d, size_t words, uint32_t seed) {
    std::vector<uint32_t> h(words * 4);
    for (size_t i = 0; i < h.size(); ++i) h[i] = (uint32_t)(i * 2654435761u) ^ seed;
    CK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
}

static void check(const uint4* d, size_t words, uint32_t seed_xor, const char* what) {
    std::vector<uint32_t> h(words * 4);
    CK(cudaMemcpy(h.data(), d, h.size() * 4, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); ++i) {
        uint32_t want = (uint32_t)(i * 2654435761u) ^ seed_xor;
        if (h[i] != want) {
            fprintf(stderr, "yardstick %s: word %zu is %08x, want %08x\n", what, i, h[i], want);
            exit(1);
        }
    }
}

int main() {
    const size_t rows = 8192, d = 4096, bytes = rows * d * 2, words = bytes / 16;
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    uint4 *a, *b, *c, *s, *t;
    for (uint4** p : {&a, &b, &c, &s, &t}) CK(cudaMalloc(p, bytes));
    fill(a, words, 0x11111111u);
    fill(b, words, 0x22222222u);
    fill(c, words, 0x44444444u);

    // One launch of each kernel, checked: the xor of the three fills, and a plain copy.
    move_3r2w<<<sms * 4, 512>>>(a, b, c, s, t, words);
    CK(cudaGetLastError());
    check(s, words, 0x77777777u, "move_3r2w s");
    check(t, words, 0x77777777u, "move_3r2w t");
    move_1r1w<<<sms * 4, 512>>>(a, s, words);
    CK(cudaGetLastError());
    check(s, words, 0x11111111u, "move_1r1w");

    double best = 1e30;
    for (int per_sm : {1, 2, 4, 8}) {
        for (int threads : {256, 512, 1024}) {
            int blocks = sms * per_sm;
            double us3 = launch_us([&] { move_3r2w<<<blocks, threads>>>(a, b, c, s, t, words); });
            double us1 = launch_us([&] { move_1r1w<<<blocks, threads>>>(a, s, words); });
            CK(cudaGetLastError());
            best = std::min(best, us3);
            printf("yardstick move_3r2w grid=%dx%d us=%.2f GBps=%.1f\n", blocks, threads, us3, 5.0 * bytes / us3 / 1e3);
            printf("yardstick move_1r1w grid=%dx%d us=%.2f GBps=%.1f\n", blocks, threads, us1, 2.0 * bytes / us1 / 1e3);
        }
    }
    for (uint4* p : {a, b, c, s, t}) CK(cudaFree(p));

    const size_t copy_bytes = (size_t)1 << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, copy_bytes));
    CK(cudaMalloc(&dst, copy_bytes));
    double us = launch_us([&] { CK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); });
    printf("yardstick cudaMemcpy bytes=%zu us=%.2f GBps=%.1f\n", copy_bytes, us, 2.0 * copy_bytes / us / 1e3);
    CK(cudaFree(src));
    CK(cudaFree(dst));

    printf("baseline yardstick add3_layer_norm rows=%zu D=%zu us=%.2f\n", rows, d, best);
    return 0;
}
