// Host cost of one launch (its target: within 1.2x a bare launch), from one C program on an NVIDIA GPU: the C ABI's
// xielu (bf16, n = 21504, one Apertus decode token) and add3_layer_norm (bf16, one row of 4096)
// against a bare cuLaunchKernel of an empty kernel, and of the same xielu kernel loaded from the
// library's PTX with the arguments the C ABI passes (its output is checked equal to the C ABI's),
// all on the default stream; and that by-hand launch after cuCtxSetCurrent, as the library makes
// its context current before every launch.
//
// Host cost is the wall time of a batch of calls that return before the GPU finishes them (128
// calls, well below the driver's launch queue, so no call waits for the GPU), divided by the
// calls, then the GPU is drained before the next batch. The median of 200 batches is printed;
// and the rate at which the GPU finishes back-to-back calls (calls over the time to drain).
//
//   launch_cost <empty.ptx> <kernels.ptx> <xielu bf16 workgroup bytes>
//   (scripts/gpu-host/bench.sh builds and runs it)
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mlxcel_amdgpu.h"

#define BATCH 128
#define BATCHES 200

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static void check_cu(CUresult r, const char *what) {
    if (r != CUDA_SUCCESS) {
        const char *s = NULL;
        cuGetErrorString(r, &s);
        fprintf(stderr, "%s failed: %s\n", what, s ? s : "unknown error");
        exit(1);
    }
}

static void check_abi(enum MlxcelAmdgpuStatus s, const char *what) {
    if (s != MLXCEL_AMDGPU_OK) {
        fprintf(stderr, "%s failed (status %d): %s\n", what, (int)s, mlxcel_amdgpu_last_error());
        exit(1);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*call_fn)(void *ctx);

// Median host microseconds per call, and the GPU's microseconds per call when draining.
static void measure(const char *name, call_fn f, void *ctx) {
    double host[BATCHES], drain[BATCHES];
    for (int i = 0; i < 2 * BATCH; i++) f(ctx);
    check_cu(cuCtxSynchronize(), "warm-up");
    for (int b = 0; b < BATCHES; b++) {
        double t0 = now_us();
        for (int i = 0; i < BATCH; i++) f(ctx);
        double t1 = now_us();
        check_cu(cuCtxSynchronize(), name);
        double t2 = now_us();
        host[b] = (t1 - t0) / BATCH;
        drain[b] = (t2 - t0) / BATCH;
    }
    qsort(host, BATCHES, sizeof(double), cmp);
    qsort(drain, BATCHES, sizeof(double), cmp);
    printf("launch_cost %s host_us=%.3f gpu_us_per_call=%.3f\n", name, host[BATCHES / 2], drain[BATCHES / 2]);
}

struct Bare {
    CUfunction f;
};

static void bare_launch(void *ctx) {
    struct Bare *b = ctx;
    check_cu(cuLaunchKernel(b->f, 1, 1, 1, 256, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel");
}

struct Xielu {
    CUdeviceptr x, out;
    uint64_t n;
};

// The C ABI's launch of xielu_bf16, by hand: 256 threads per workgroup, 8 elements per thread.
struct BareXielu {
    CUfunction f;
    struct Xielu *a;
    unsigned smem;
    CUcontext ctx;
};

static void bare_xielu(void *ctx) {
    struct BareXielu *b = ctx;
    float ap = 0.8731f, an = 0.6042f, be = 0.5f, ep = -1e-6f;
    void *args[] = {&b->a->x, &b->a->out, &b->a->n, &ap, &an, &be, &ep};
    unsigned groups = (unsigned)((b->a->n + 2047) / 2048);
    check_cu(cuLaunchKernel(b->f, groups, 1, 1, 256, 1, 1, b->smem, NULL, args, NULL), "cuLaunchKernel xielu_bf16");
}

// The same, after making the context current as the library does before every
// launch (the C ABI may be called from any thread, with any context current).
static void bare_xielu_set_current(void *ctx) {
    struct BareXielu *b = ctx;
    check_cu(cuCtxSetCurrent(b->ctx), "cuCtxSetCurrent");
    bare_xielu(ctx);
}

static void xielu_call(void *ctx) {
    struct Xielu *a = ctx;
    check_abi(mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_BF16, (const void *)a->x, (void *)a->out, a->n, 0.8731f, 0.6042f, 0.5f,
                                  -1e-6f, NULL),
              "mlxcel_amdgpu_xielu");
}

struct Add3 {
    CUdeviceptr a, b, x, w, bias, x_new, h;
    uint32_t d;
};

static void add3_call(void *ctx) {
    struct Add3 *p = ctx;
    check_abi(mlxcel_amdgpu_add3_layer_norm(MLXCEL_AMDGPU_BF16, (const void *)p->a, (const void *)p->b,
                                            (const void *)p->x, (const void *)p->w, (const void *)p->bias,
                                            (void *)p->x_new, (void *)p->h, 1, p->d, 1e-5f, NULL),
              "mlxcel_amdgpu_add3_layer_norm");
}

static CUdeviceptr filled(size_t bytes, uint8_t v) {
    CUdeviceptr p;
    check_cu(cuMemAlloc(&p, bytes), "cuMemAlloc");
    check_cu(cuMemsetD8(p, v, bytes), "cuMemsetD8");
    return p;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <empty.ptx> <kernels.ptx> <xielu bf16 workgroup bytes>\n", argv[0]);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    check_cu(cuInit(0), "cuInit");
    check_cu(cuDeviceGet(&dev, 0), "cuDeviceGet");
    // The library uses the device's primary context; so does this program.
    check_cu(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check_cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check_abi(mlxcel_amdgpu_select_backend("cuda"), "mlxcel_amdgpu_select_backend");
    char desc[256];
    check_abi(mlxcel_amdgpu_describe_device(desc, sizeof desc), "mlxcel_amdgpu_describe_device");
    printf("# %s\n", desc);

    CUmodule mod;
    struct Bare bare;
    check_cu(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    check_cu(cuModuleGetFunction(&bare.f, mod, "empty"), "cuModuleGetFunction");

    struct Xielu xa = {filled(21504 * 2, 0x3c), filled(21504 * 2, 0), 21504};
    CUmodule kernels;
    struct BareXielu bx = {NULL, &xa, (unsigned)atoi(argv[3]), ctx};
    check_cu(cuModuleLoad(&kernels, argv[2]), "cuModuleLoad kernels");
    check_cu(cuModuleGetFunction(&bx.f, kernels, "xielu_bf16"), "cuModuleGetFunction xielu_bf16");
    // The by-hand launch computes what the C ABI's does.
    static uint8_t by_abi[21504 * 2], by_hand[21504 * 2];
    xielu_call(&xa);
    check_cu(cuMemcpyDtoH(by_abi, xa.out, sizeof by_abi), "cuMemcpyDtoH");
    check_cu(cuMemsetD8(xa.out, 0, sizeof by_abi), "cuMemsetD8");
    bare_xielu(&bx);
    check_cu(cuMemcpyDtoH(by_hand, xa.out, sizeof by_hand), "cuMemcpyDtoH");
    if (memcmp(by_abi, by_hand, sizeof by_abi) != 0) {
        fprintf(stderr, "the by-hand xielu_bf16 launch differs from the C ABI's\n");
        return 1;
    }
    const uint32_t d = 4096;
    struct Add3 aa = {filled(d * 2, 0x3c), filled(d * 2, 0x3d), filled(d * 2, 0x3e), filled(d * 2, 0x3f),
                      filled(d * 2, 0x3b), filled(d * 2, 0),    filled(d * 2, 0),    d};

    // Twice each, interleaved, so that drift between the first and the last shows.
    for (int round = 0; round < 2; round++) {
        measure("bare_cuLaunchKernel_empty", bare_launch, &bare);
        measure("bare_cuLaunchKernel_xielu_bf16_n21504", bare_xielu, &bx);
        measure("bare_cuCtxSetCurrent_cuLaunchKernel_xielu_bf16_n21504", bare_xielu_set_current, &bx);
        measure("c_abi_xielu_bf16_n21504", xielu_call, &xa);
        measure("c_abi_add3_layer_norm_bf16_rows1_d4096", add3_call, &aa);
    }
    return 0;
}
