// A C++ consumer of the C ABI, as mlxcel's ROCm backend uses it: availability
// predicates, launches, and the error path. Runs on the CPU backend (device
// pointers are host pointers there). Exit status 0 means every check passed.
#include "mlxcel_amdgpu.h"

#include <algorithm>
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
    // The library loaded is the one this header describes.
    CHECK(mlxcel_amdgpu_abi_version() == MLXCEL_AMDGPU_ABI_VERSION, "ABI version %u, header %u",
          mlxcel_amdgpu_abi_version(), (unsigned)MLXCEL_AMDGPU_ABI_VERSION);
    static_assert(MLXCEL_AMDGPU_ADD3_MAX_D == 6656, "the header exports add3's row limit");
    // Without a selection the device is HIP device 0, with no fallback: where HIP
    // is absent, nothing is available and a launch touches nothing.
    bool default_available = mlxcel_amdgpu_xielu_available(MLXCEL_AMDGPU_F32);
    // The HIP backend is absent on a machine without ROCm: a clear status, no crash.
    MlxcelAmdgpuStatus st = mlxcel_amdgpu_select_backend("hip");
    if (st != MLXCEL_AMDGPU_OK) {
        CHECK(st == MLXCEL_AMDGPU_UNAVAILABLE, "select hip: status %d", (int)st);
        CHECK(std::strlen(mlxcel_amdgpu_last_error()) > 0, "select hip: empty message");
        std::printf("hip: %s\n", mlxcel_amdgpu_last_error());
        CHECK(!default_available, "without HIP the default device must not fall back to the CPU emulator");
        float host_value = 1.0f;
        st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, &host_value, &host_value, 1, 0.8f, 0.6f, 0.5f, -1e-6f, nullptr);
        CHECK(st == MLXCEL_AMDGPU_UNAVAILABLE && host_value == 1.0f, "a launch without HIP: status %d", (int)st);
    }
    st = mlxcel_amdgpu_select_backend("cpu");
    CHECK(st == MLXCEL_AMDGPU_OK, "select cpu: %s", mlxcel_amdgpu_last_error());

    // A failed select leaves no device: the CPU device selected before is gone.
    st = mlxcel_amdgpu_select_device("cpu", 1);
    CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "select cpu ordinal 1: status %d", (int)st);
    CHECK(!mlxcel_amdgpu_xielu_available(MLXCEL_AMDGPU_F32), "after a failed select nothing is available");
    {
        float v = 1.0f;
        st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, &v, &v, 1, 0.8f, 0.6f, 0.5f, -1e-6f, nullptr);
        CHECK(st == MLXCEL_AMDGPU_UNAVAILABLE && v == 1.0f, "a launch after a failed select: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "last select failed") != nullptr, "message: %s",
              mlxcel_amdgpu_last_error());
        char junk[16];
        std::memset(junk, 'x', sizeof junk);
        CHECK(mlxcel_amdgpu_describe_device(junk, sizeof junk) == MLXCEL_AMDGPU_UNAVAILABLE, "describe, no device");
        CHECK(junk[0] == 0, "a failed describe writes the empty string");
    }
    st = mlxcel_amdgpu_select_device("cpu", 0);
    CHECK(st == MLXCEL_AMDGPU_OK, "select cpu 0: %s", mlxcel_amdgpu_last_error());

    char desc[256];
    CHECK(mlxcel_amdgpu_describe_device(desc, sizeof desc) == MLXCEL_AMDGPU_OK, "describe");
    std::printf("device: %s\n", desc);

    // Shape-aware predicates answer as the launch checks.
    CHECK(mlxcel_amdgpu_add3_layer_norm_supports(MLXCEL_AMDGPU_BF16, 8, MLXCEL_AMDGPU_ADD3_MAX_D), "add3 max d");
    CHECK(!mlxcel_amdgpu_add3_layer_norm_supports(MLXCEL_AMDGPU_BF16, 8, MLXCEL_AMDGPU_ADD3_MAX_D + 1), "add3 d+1");
    CHECK(!mlxcel_amdgpu_add3_layer_norm_supports(MLXCEL_AMDGPU_BF16, 8, 0), "add3 d 0");
    CHECK(mlxcel_amdgpu_mamba1_scan_supports(MLXCEL_AMDGPU_F32, 1, 16, 64, MLXCEL_AMDGPU_MAMBA1_MAX_N), "mamba n");
    CHECK(!mlxcel_amdgpu_mamba1_scan_supports(MLXCEL_AMDGPU_F32, 1, 16, 64, MLXCEL_AMDGPU_MAMBA1_MAX_N + 1), "n+1");
    {
        MlxcelAmdgpuMoeShape shape = {128, 6, 2688, 1856, 4, 64};
        CHECK(mlxcel_amdgpu_moe_supports(MLXCEL_AMDGPU_BF16, shape), "moe nemotron");
        CHECK((MLXCEL_AMDGPU_MOE_BITS_MASK >> shape.bits) & 1, "4 bits in the mask");
        CHECK(MLXCEL_AMDGPU_MOE_GROUP_SIZES_MASK & shape.group_size, "gs 64 in the mask");
        shape.bits = 3;
        CHECK(!mlxcel_amdgpu_moe_supports(MLXCEL_AMDGPU_BF16, shape), "moe 3 bits");
    }

    // The CPU backend has no streams: a non-NULL stream is refused, nothing written.
    {
        float v = 1.0f;
        int not_a_stream = 0;
        st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, &v, &v, 1, 0.8f, 0.6f, 0.5f, -1e-6f, &not_a_stream);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT && v == 1.0f, "a stream on the CPU backend: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "stream") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
    }

    // A partial overlap of xielu's input and output is refused, naming both.
    {
        std::vector<float> buf(8, 2.0f);
        st = mlxcel_amdgpu_xielu(MLXCEL_AMDGPU_F32, buf.data(), buf.data() + 1, 4, 0.8f, 0.6f, 0.5f, -1e-6f, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "partial overlap: status %d", (int)st);
        std::string msg = mlxcel_amdgpu_last_error();
        CHECK(msg.find("`out`") != std::string::npos && msg.find("`x`") != std::string::npos, "message: %s",
              msg.c_str());
        for (float v : buf) CHECK(v == 2.0f, "a refused launch wrote");
    }

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

    // mamba1_scan, f32: B 1, L 5, Dm 3, N 4, carried state, against a plain loop.
    {
        const uint32_t L = 5, Dm = 3, N = 4;
        std::vector<float> mx(L * Dm), mdt(L * Dm), mb(L * N), mc(L * N), ma(Dm * N), md(Dm), s0(Dm * N), my(L * Dm), s1(Dm * N);
        for (uint32_t i = 0; i < L * Dm; ++i) { mx[i] = std::sin(0.7f * i); mdt[i] = 0.1f + 0.05f * (i % 5); }
        for (uint32_t i = 0; i < L * N; ++i) { mb[i] = std::cos(0.3f * i); mc[i] = std::sin(0.2f * i + 1.0f); }
        for (uint32_t i = 0; i < Dm * N; ++i) { ma[i] = -0.5f - 0.1f * i; s0[i] = 0.01f * i; }
        for (uint32_t i = 0; i < Dm; ++i) md[i] = 0.5f + i;
        CHECK(mlxcel_amdgpu_mamba1_scan_available(MLXCEL_AMDGPU_F32), "mamba1_scan unavailable");
        st = mlxcel_amdgpu_mamba1_scan(MLXCEL_AMDGPU_F32, mx.data(), mdt.data(), mb.data(), mc.data(), ma.data(), md.data(),
                                       s0.data(), my.data(), s1.data(), 1, L, Dm, N, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK, "mamba1_scan: %s", mlxcel_amdgpu_last_error());
        std::vector<double> s(s0.begin(), s0.end());
        for (uint32_t t = 0; t < L; ++t) {
            for (uint32_t d = 0; d < Dm; ++d) {
                double dt = mdt[t * Dm + d], x = mx[t * Dm + d], y = 0;
                for (uint32_t n = 0; n < N; ++n) {
                    double &sn = s[d * N + n];
                    sn = std::exp(dt * ma[d * N + n]) * sn + dt * x * mb[t * N + n];
                    y += sn * mc[t * N + n];
                }
                y += x * md[d];
                CHECK(std::fabs(y - my[t * Dm + d]) < 1e-5 * (1 + std::fabs(y)), "mamba y[%u,%u]: got %g want %g", t, d, my[t * Dm + d], y);
            }
        }
        for (uint32_t i = 0; i < Dm * N; ++i)
            CHECK(std::fabs(s[i] - s1[i]) < 1e-5 * (1 + std::fabs(s[i])), "mamba state[%u]: got %g want %g", i, s1[i], s[i]);
        st = mlxcel_amdgpu_mamba1_scan(MLXCEL_AMDGPU_F32, mx.data(), mdt.data(), mb.data(), mc.data(), ma.data(), md.data(),
                                       s0.data(), my.data(), s1.data(), 1, L, Dm, 33, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "mamba N = 33: status %d", (int)st);
    }

    // The routed MoE forward, f32, 8-bit, group size 32: E 2, K 2, Din 64, Dff 32.
    {
        MlxcelAmdgpuMoeShape shape = {2, 2, 64, 32, 8, 32};
        const uint32_t E = 2, K = 2, Din = 64, Dff = 32, gs = 32;
        // Packed codes: value j of a row is code (row * 7 + j) % 256, four per word, least significant first.
        auto pack = [](uint32_t rows, uint32_t cols) {
            std::vector<uint32_t> w(rows * cols / 4);
            for (uint32_t r = 0; r < rows; ++r)
                for (uint32_t c = 0; c < cols; ++c) w[(r * cols + c) / 4] |= ((r * 7 + c) % 256u) << (8 * (c % 4));
            return w;
        };
        std::vector<uint32_t> w1 = pack(E * Dff, Din), w2 = pack(E * Din, Dff);
        std::vector<float> s1(E * Dff * Din / gs), b1(s1.size()), s2(E * Din * Dff / gs), b2(s2.size());
        for (size_t i = 0; i < s1.size(); ++i) { s1[i] = 0.001f * (1 + i % 3); b1[i] = -0.1f + 0.01f * (i % 5); }
        for (size_t i = 0; i < s2.size(); ++i) { s2[i] = 0.002f * (1 + i % 2); b2[i] = -0.05f + 0.01f * (i % 7); }
        std::vector<float> mxin(Din), scores = {0.75f, 0.25f}, out(Din);
        for (uint32_t i = 0; i < Din; ++i) mxin[i] = std::sin(0.1f * i);
        std::vector<uint32_t> idx = {1, 0};
        uint32_t status = 0;
        size_t scratch_bytes = 0;
        st = mlxcel_amdgpu_moe_scratch_bytes(K, Din, Dff, &scratch_bytes);
        CHECK(st == MLXCEL_AMDGPU_OK && scratch_bytes > 0, "moe scratch bytes: %s", mlxcel_amdgpu_last_error());
        // A size past 64 bits is an error, never a wrapped number, and leaves the output alone.
        size_t untouched = 7;
        st = mlxcel_amdgpu_moe_scratch_bytes(1u << 31, 1, 1u << 31, &untouched);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT && untouched == 7, "moe scratch bytes of 2^31 x 2^31: status %d, %zu",
              (int)st, untouched);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`k`") != nullptr, "moe scratch overflow: %s", mlxcel_amdgpu_last_error());
        std::vector<unsigned char> scratch(scratch_bytes);
        CHECK(mlxcel_amdgpu_moe_available(MLXCEL_AMDGPU_F32), "moe unavailable");
        st = mlxcel_amdgpu_moe_routed_forward(MLXCEL_AMDGPU_F32, shape, mxin.data(), idx.data(), scores.data(), w1.data(), s1.data(),
                                              b1.data(), w2.data(), s2.data(), b2.data(), out.data(), scratch.data(),
                                              scratch.size(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe routed: %s (status %u)", mlxcel_amdgpu_last_error(), status);
        auto weight = [&](const std::vector<float>& sc, const std::vector<float>& bi, uint32_t row, uint32_t col, uint32_t cols) {
            return double((row * 7 + col) % 256u) * sc[(row * cols + col) / gs] + bi[(row * cols + col) / gs];
        };
        for (uint32_t h = 0; h < Din; ++h) {
            double want = 0;
            for (uint32_t k = 0; k < K; ++k) {
                double part = 0;
                for (uint32_t f = 0; f < Dff; ++f) {
                    double a = 0;
                    for (uint32_t i = 0; i < Din; ++i) a += mxin[i] * weight(s1, b1, idx[k] * Dff + f, i, Din);
                    a = a > 0 ? a * a : 0;
                    part += a * weight(s2, b2, idx[k] * Din + h, f, Dff);
                }
                want += scores[k] * part;
            }
            CHECK(std::fabs(want - out[h]) < 1e-4 * (1 + std::fabs(want)), "moe out[%u]: got %g want %g", h, out[h], want);
        }
        // An expert id past E: NaN output and the slot in the status word, no out-of-bounds read.
        idx[1] = 5;
        st = mlxcel_amdgpu_moe_routed_forward(MLXCEL_AMDGPU_F32, shape, mxin.data(), idx.data(), scores.data(), w1.data(), s1.data(),
                                              b1.data(), w2.data(), s2.data(), b2.data(), out.data(), scratch.data(),
                                              scratch.size(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 2 && std::isnan(out[0]), "bad expert id: status %u, out[0] %g", status, out[0]);
        shape.bits = 5;
        st = mlxcel_amdgpu_moe_routed_forward(MLXCEL_AMDGPU_F32, shape, mxin.data(), idx.data(), scores.data(), w1.data(), s1.data(),
                                              b1.data(), w2.data(), s2.data(), b2.data(), out.data(), scratch.data(),
                                              scratch.size(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "bits = 5: status %d", (int)st);
        std::printf("bits = 5 refused: %s\n", mlxcel_amdgpu_last_error());
    }

    // The gated experts for two tokens, f32, 8-bit, group size 32: E 4, K 2, Din 64, Dff 32, SwiGLU.
    // The router and the batch launches against a plain loop, then the whole block, which must be
    // those launches bit for bit, and the refusals the batch launches and the block add.
    {
        const uint32_t E = 4, K = 2, M = 2, Din = 64, Dff = 32, gs = 32;
        MlxcelAmdgpuMoeShape shape = {E, K, Din, Dff, 8, gs};
        // As above: value j of row r is code (r * 7 + j) % 256 (the gate's), (r * 5 + j) % 256 (the up's).
        auto pack = [](uint32_t rows, uint32_t cols, uint32_t step) {
            std::vector<uint32_t> w(rows * cols / 4);
            for (uint32_t r = 0; r < rows; ++r)
                for (uint32_t c = 0; c < cols; ++c) w[(r * cols + c) / 4] |= ((r * step + c) % 256u) << (8 * (c % 4));
            return w;
        };
        std::vector<uint32_t> wg = pack(E * Dff, Din, 7), wu = pack(E * Dff, Din, 5), w2 = pack(E * Din, Dff, 7);
        std::vector<float> sg(E * Dff * Din / gs), bg(sg.size()), su(sg.size()), bu(sg.size());
        std::vector<float> s2(E * Din * Dff / gs), b2(s2.size());
        for (size_t i = 0; i < sg.size(); ++i) {
            sg[i] = 0.001f * (1 + i % 3);
            bg[i] = -0.1f + 0.01f * (i % 5);
            su[i] = 0.0015f * (1 + i % 2);
            bu[i] = -0.15f + 0.02f * (i % 3);
        }
        for (size_t i = 0; i < s2.size(); ++i) { s2[i] = 0.002f * (1 + i % 2); b2[i] = -0.05f + 0.01f * (i % 7); }
        std::vector<float> bx(M * Din), wr(E * Din);
        for (uint32_t i = 0; i < M * Din; ++i) bx[i] = std::sin(0.1f * i + 0.5f * (i / Din));
        // The router: 8-bit codes (r * 3 + j) % 256 in groups of 32, and `wr` their values, so that the
        // dense router and the quantized one read the same weights.
        std::vector<uint32_t> wrq = pack(E, Din, 3);
        std::vector<float> srq(E * Din / gs), brq(srq.size());
        for (size_t i = 0; i < srq.size(); ++i) { srq[i] = 0.0004f * (1 + i % 3); brq[i] = -0.05f + 0.005f * (i % 4); }
        for (uint32_t i = 0; i < E * Din; ++i) wr[i] = float((i / Din * 3 + i % Din) % 256u) * srq[i / gs] + brq[i / gs];
        auto weight = [&](const std::vector<uint32_t>& wq, const std::vector<float>& sc, const std::vector<float>& bi,
                          uint32_t row, uint32_t col, uint32_t cols) {
            uint32_t code = (wq[(row * cols + col) / 4] >> (8 * (col % 4))) & 0xFF;
            return double(code) * sc[(row * cols + col) / gs] + bi[(row * cols + col) / gs];
        };
        // The reference: logits, the top K by probability (renormalized), SwiGLU, down, the scored sum.
        std::vector<uint32_t> want_ids(M * K);
        std::vector<double> want_scores(M * K), want_out(M * Din, 0.0);
        for (uint32_t t = 0; t < M; ++t) {
            std::vector<double> logit(E);
            for (uint32_t e = 0; e < E; ++e) {
                logit[e] = 0;
                for (uint32_t i = 0; i < Din; ++i) logit[e] += double(bx[t * Din + i]) * wr[e * Din + i];
            }
            std::vector<bool> taken(E, false);
            double sum = 0;
            for (uint32_t j = 0; j < K; ++j) {
                uint32_t best = E;
                for (uint32_t e = 0; e < E; ++e)
                    if (!taken[e] && (best == E || logit[e] > logit[best])) best = e;
                taken[best] = true;
                want_ids[t * K + j] = best;
                want_scores[t * K + j] = std::exp(logit[best] - logit[want_ids[t * K]]);
                sum += want_scores[t * K + j];
            }
            for (uint32_t j = 0; j < K; ++j) want_scores[t * K + j] /= sum;
            for (uint32_t j = 0; j < K; ++j) {
                uint32_t e = want_ids[t * K + j];
                std::vector<double> act(Dff);
                for (uint32_t f = 0; f < Dff; ++f) {
                    double g = 0, u = 0;
                    for (uint32_t i = 0; i < Din; ++i) {
                        g += bx[t * Din + i] * weight(wg, sg, bg, e * Dff + f, i, Din);
                        u += bx[t * Din + i] * weight(wu, su, bu, e * Dff + f, i, Din);
                    }
                    act[f] = g / (1 + std::exp(-g)) * u;
                }
                for (uint32_t h = 0; h < Din; ++h) {
                    double part = 0;
                    for (uint32_t f = 0; f < Dff; ++f) part += act[f] * weight(w2, s2, b2, e * Din + h, f, Dff);
                    want_out[t * Din + h] += want_scores[t * K + j] * part;
                }
            }
        }
        CHECK(mlxcel_amdgpu_moe_block_available(MLXCEL_AMDGPU_F32), "moe block unavailable");
        CHECK(mlxcel_amdgpu_moe_block_supports(MLXCEL_AMDGPU_F32, shape, M), "moe block of 2 tokens");
        // The router, then the three batch launches.
        std::vector<float> logits(M * E), scores(M * K), act(M * K * Dff), part(M * K * Din), out_b(M * Din);
        std::vector<uint32_t> ids(M * K);
        uint32_t status = 0;
        st = mlxcel_amdgpu_moe_router(MLXCEL_AMDGPU_F32, bx.data(), wr.data(), logits.data(), ids.data(), scores.data(), M, E,
                                      K, Din, 1, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK, "moe router: %s", mlxcel_amdgpu_last_error());
        for (uint32_t s = 0; s < M * K; ++s) {
            CHECK(ids[s] == want_ids[s], "router slot %u: expert %u, want %u", s, ids[s], want_ids[s]);
            CHECK(std::fabs(scores[s] - want_scores[s]) < 1e-5, "router slot %u: score %g, want %g", s, scores[s],
                  want_scores[s]);
        }
        st = mlxcel_amdgpu_moe_gateup_batch(MLXCEL_AMDGPU_F32, shape, M, 0, bx.data(), ids.data(), wg.data(), sg.data(),
                                            bg.data(), wu.data(), su.data(), bu.data(), act.data(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe gateup batch: %s (status %u)", mlxcel_amdgpu_last_error(), status);
        st = mlxcel_amdgpu_moe_down_batch(MLXCEL_AMDGPU_F32, shape, M, ids.data(), w2.data(), s2.data(), b2.data(), act.data(),
                                          scores.data(), part.data(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe down batch: %s (status %u)", mlxcel_amdgpu_last_error(), status);
        st = mlxcel_amdgpu_moe_combine_batch(MLXCEL_AMDGPU_F32, part.data(), out_b.data(), M, K, Din, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK, "moe combine batch: %s", mlxcel_amdgpu_last_error());
        for (uint32_t i = 0; i < M * Din; ++i)
            CHECK(std::fabs(want_out[i] - out_b[i]) < 1e-4 * (1 + std::fabs(want_out[i])), "moe batch out[%u]: got %g want %g",
                  i, out_b[i], want_out[i]);
        // The whole block: the same launches, bit for bit.
        size_t block_bytes = 0;
        st = mlxcel_amdgpu_moe_block_scratch_bytes(shape, M, &block_bytes);
        CHECK(st == MLXCEL_AMDGPU_OK && block_bytes > 0, "moe block scratch bytes: %s", mlxcel_amdgpu_last_error());
        std::vector<float> block_scratch((block_bytes + 3) / 4), out_k(M * Din, -1.0f);
        st = mlxcel_amdgpu_moe_block(MLXCEL_AMDGPU_F32, shape, M, 0, 1, bx.data(), wr.data(), wg.data(), sg.data(), bg.data(),
                                     wu.data(), su.data(), bu.data(), w2.data(), s2.data(), b2.data(), out_k.data(),
                                     block_scratch.data(), block_bytes, &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe block: %s (status %u)", mlxcel_amdgpu_last_error(), status);
        CHECK(std::memcmp(out_k.data(), out_b.data(), out_b.size() * 4) == 0, "moe block: not bit for bit its launches");
        // The block with the quantized router: the reference's selection (ids at byte 256 of the
        // scratch, after the logits) and its output.
        CHECK(mlxcel_amdgpu_moe_block_quantized_router_available(MLXCEL_AMDGPU_F32), "moe block, quantized router: unavailable");
        CHECK(mlxcel_amdgpu_moe_block_quantized_router_supports(MLXCEL_AMDGPU_F32, shape, M, 8, gs),
              "moe block, quantized router: 8 bits, group 32");
        std::vector<float> out_q(M * Din, -1.0f);
        st = mlxcel_amdgpu_moe_block_quantized_router(MLXCEL_AMDGPU_F32, shape, M, 8, gs, 0, 1, bx.data(), wrq.data(),
                                                      srq.data(), brq.data(), wg.data(), sg.data(), bg.data(), wu.data(),
                                                      su.data(), bu.data(), w2.data(), s2.data(), b2.data(), out_q.data(),
                                                      block_scratch.data(), block_bytes, &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe block, quantized router: %s (status %u)", mlxcel_amdgpu_last_error(),
              status);
        const uint32_t* ids_q = reinterpret_cast<const uint32_t*>(block_scratch.data() + 256 / 4);
        for (uint32_t s = 0; s < M * K; ++s)
            CHECK(ids_q[s] == want_ids[s], "quantized router slot %u: expert %u, want %u", s, ids_q[s], want_ids[s]);
        for (uint32_t i = 0; i < M * Din; ++i)
            CHECK(std::fabs(want_out[i] - out_q[i]) < 1e-4 * (1 + std::fabs(want_out[i])),
                  "moe block, quantized router, out[%u]: got %g want %g", i, out_q[i], want_out[i]);
        st = mlxcel_amdgpu_moe_block_quantized_router(MLXCEL_AMDGPU_F32, shape, M, 6, gs, 0, 1, bx.data(), wrq.data(),
                                                      srq.data(), brq.data(), wg.data(), sg.data(), bg.data(), wu.data(),
                                                      su.data(), bu.data(), w2.data(), s2.data(), b2.data(), out_q.data(),
                                                      block_scratch.data(), block_bytes, &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "moe block, 6-bit router: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`router_bits`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        // The block with a shared expert: expert E - 1 of the stacks as the shared one (its
        // matrices' pointers), the router's row 0 as its gate row, both quantized (8 bits);
        // out = the routed block's + sigmoid(x . row 0) * expert E - 1.
        CHECK(mlxcel_amdgpu_moe_block_shared_expert_available(MLXCEL_AMDGPU_F32, 8), "moe block, shared expert: unavailable");
        CHECK(mlxcel_amdgpu_moe_block_shared_expert_supports(MLXCEL_AMDGPU_F32, shape, M, 8, gs),
              "moe block, shared expert: 8-bit router, group 32");
        size_t shared_bytes = 0;
        st = mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(shape, M, &shared_bytes);
        CHECK(st == MLXCEL_AMDGPU_OK && shared_bytes > block_bytes, "moe block, shared expert, scratch bytes: %s",
              mlxcel_amdgpu_last_error());
        std::vector<float> shared_scratch((shared_bytes + 3) / 4), out_s(M * Din, -1.0f);
        const uint32_t last = E - 1;
        auto matrix = [&](const std::vector<uint32_t>& w, const std::vector<float>& sc, const std::vector<float>& bi,
                          size_t expert, size_t rows, size_t cols) {
            return MlxcelAmdgpuQuantized{w.data() + expert * rows * cols / 4, sc.data() + expert * rows * cols / gs,
                                         bi.data() + expert * rows * cols / gs};
        };
        st = mlxcel_amdgpu_moe_block_shared_expert(
            MLXCEL_AMDGPU_F32, shape, M, 8, gs, 0, 1, bx.data(), matrix(wrq, srq, brq, 0, E, Din),
            matrix(wrq, srq, brq, 0, 1, Din), matrix(wg, sg, bg, 0, E * Dff, Din), matrix(wu, su, bu, 0, E * Dff, Din),
            matrix(w2, s2, b2, 0, E * Din, Dff), matrix(wg, sg, bg, last, Dff, Din), matrix(wu, su, bu, last, Dff, Din),
            matrix(w2, s2, b2, last, Din, Dff), out_s.data(), shared_scratch.data(), shared_bytes, &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_OK && status == 0, "moe block, shared expert: %s (status %u)", mlxcel_amdgpu_last_error(),
              status);
        for (uint32_t t = 0; t < M; ++t) {
            double gate = 0;
            for (uint32_t i = 0; i < Din; ++i) gate += double(bx[t * Din + i]) * wr[i];
            std::vector<double> act(Dff);
            for (uint32_t f = 0; f < Dff; ++f) {
                double g = 0, u = 0;
                for (uint32_t i = 0; i < Din; ++i) {
                    g += bx[t * Din + i] * weight(wg, sg, bg, last * Dff + f, i, Din);
                    u += bx[t * Din + i] * weight(wu, su, bu, last * Dff + f, i, Din);
                }
                act[f] = g / (1 + std::exp(-g)) * u;
            }
            for (uint32_t h = 0; h < Din; ++h) {
                double part = 0;
                for (uint32_t f = 0; f < Dff; ++f) part += act[f] * weight(w2, s2, b2, last * Din + h, f, Dff);
                double want = want_out[t * Din + h] + part / (1 + std::exp(-gate));
                CHECK(std::fabs(want - out_s[t * Din + h]) < 1e-4 * (1 + std::fabs(want)),
                      "moe block, shared expert, out[%u]: got %g want %g", t * Din + h, out_s[t * Din + h], want);
            }
        }
        // Refusals: a status and a message naming the argument, nothing written.
        size_t untouched = 7;
        st = mlxcel_amdgpu_moe_block_scratch_bytes(shape, MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS + 1, &untouched);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT && untouched == 7, "moe block scratch bytes of 9 tokens: status %d, %zu",
              (int)st, untouched);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`m`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        std::fill(out_k.begin(), out_k.end(), -1.0f);
        st = mlxcel_amdgpu_moe_block(MLXCEL_AMDGPU_F32, shape, M, 0, 1, bx.data(), wr.data(), wg.data(), sg.data(), bg.data(),
                                     wu.data(), su.data(), bu.data(), w2.data(), s2.data(), b2.data(), out_k.data(),
                                     block_scratch.data(), block_bytes - 1, &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT && out_k[0] == -1.0f, "moe block, short scratch: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`scratch`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        st = mlxcel_amdgpu_moe_gateup_batch(MLXCEL_AMDGPU_F32, shape, MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS + 1, 0, bx.data(),
                                            ids.data(), wg.data(), sg.data(), bg.data(), wu.data(), su.data(), bu.data(),
                                            act.data(), &status, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "moe gateup batch of 9 tokens: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`m`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        MlxcelAmdgpuMoeShape six = shape;
        six.bits = 6;
        st = mlxcel_amdgpu_moe_down_batch(MLXCEL_AMDGPU_F32, six, MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS + 1, ids.data(),
                                          w2.data(), s2.data(), b2.data(), act.data(), scores.data(), part.data(), &status,
                                          nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "moe down batch, 6 bits of 9 tokens: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`m`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        st = mlxcel_amdgpu_moe_combine_batch(MLXCEL_AMDGPU_F32, part.data(), out_b.data(), 0, K, Din, nullptr);
        CHECK(st == MLXCEL_AMDGPU_INVALID_ARGUMENT, "moe combine batch of 0 tokens: status %d", (int)st);
        CHECK(std::strstr(mlxcel_amdgpu_last_error(), "`m`") != nullptr, "message: %s", mlxcel_amdgpu_last_error());
        MlxcelAmdgpuMoeShape wide = shape;
        wide.k = MLXCEL_AMDGPU_MOE_ROUTER_MAX_K + 1;
        wide.n_experts = 64;
        CHECK(!mlxcel_amdgpu_moe_block_supports(MLXCEL_AMDGPU_F32, wide, M), "moe block: top-17 is past the router");
        std::printf("moe block of %u tokens: bit for bit its launches\n", M);
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
