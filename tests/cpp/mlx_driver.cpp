// Runs mlxcel-amdgpu's kernels inside real MLX through the shim
// (shim/mlx), the way mlxcel's launchers call their custom kernels, and checks
// the results: bit for bit against the C ABI called directly on the same
// inputs, and within the contracts (docs/contracts.md) against MLX's own
// unfused graphs of the same ops. Also checks that wrong arguments raise.
//
//   mlxcel_amdgpu_mlx_driver cpu        # MLX's CPU stream, the library's CPU backend (CI)
//   mlxcel_amdgpu_mlx_driver gpu [time] # MLX's CUDA stream, the library's CUDA backend (H200);
//                                       # "time" adds the timing tables, the last one of
//                                       # Qwen3-30B-A3B's whole MoE block ("time-smoke": tiny
//                                       # shapes, to exercise them on the CPU)
//   mlxcel_amdgpu_mlx_driver gpu launches  # only the GPU kernels per MoE block, counted by
//                                          # CUPTI (libcupti opened at run time), no checks
// Prints "MLX shim driver: all checks passed" and exits 0, or FAIL lines and 1.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <iostream>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <dlfcn.h>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlx_driver_support.h"
#include "mlxcel_amdgpu.h"
#include "mlxcel_amdgpu_mlx.h"

#ifdef MLXCEL_AMDGPU_SHIM_CUDA
#include <cuda_runtime.h>
#endif

namespace shim = mlxcel_amdgpu::shim;

static bool g_gpu = false;

// ---- data ----------------------------------------------------------------

static array make(const std::vector<float>& v, Shape shape, mx::Dtype t) {
  return mx::astype(array(v.data(), std::move(shape), mx::float32), t);
}

static Bytes bytes_of(const array& a) {
  array c = mx::contiguous(a);
  mx::eval(c);
  Bytes b(c.nbytes());
  std::memcpy(b.data(), c.data<uint8_t>(), c.nbytes());
  return b;
}

static std::vector<float> floats_of(const array& a) {
  Bytes b = bytes_of(mx::astype(a, mx::float32));
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

// ---- comparisons ---------------------------------------------------------

static void same_bytes(const std::string& what, const Bytes& got, const Bytes& want, size_t elem) {
  if (got.size() != want.size()) {
    ok(false, what + ": " + std::to_string(got.size()) + " bytes, expected " + std::to_string(want.size()));
    return;
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i += elem) {
    if (std::memcmp(&got[i], &want[i], elem) != 0) {
      if (bad++ == 0) first = i / elem;
    }
  }
  ok(bad == 0, what + ": " + std::to_string(bad) + " of " + std::to_string(got.size() / elem) +
                   " elements differ from the C ABI (first at " + std::to_string(first) + ")");
}

// Normalized RMS of the deviation (divided by the reference's RMS).
static double nrms_of(const std::vector<float>& got, const std::vector<float>& want) {
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    d2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    r2 += double(want[i]) * want[i];
  }
  return std::sqrt(d2 / std::max(r2, 1e-300));
}

// Normalized RMS and max deviation (each divided by the reference's RMS),
// and the count of NaNs in one but not the other; sizes that differ or are
// zero count as infinitely far.
struct Deviation {
  double nrms, nmax;
  size_t nan;
};

static Deviation deviation(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size() || got.empty()) return {INFINITY, INFINITY, 0};
  double d2 = 0, r2 = 0, dmax = 0;
  size_t nan = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i])) ++nan;
    if (std::isnan(got[i]) || std::isnan(want[i])) continue;
    double d = double(got[i]) - double(want[i]);
    d2 += d * d;
    r2 += double(want[i]) * want[i];
    dmax = std::max(dmax, std::abs(d));
  }
  double rms = std::sqrt(r2 / got.size());
  return {std::sqrt(d2 / got.size()) / std::max(rms, 1e-30), dmax / std::max(rms, 1e-30), nan};
}

static void close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  double nrms_tol, double nmax_tol) {
  if (got.size() != want.size() || got.empty()) {
    ok(false, what + ": sizes " + std::to_string(got.size()) + " and " + std::to_string(want.size()));
    return;
  }
  Deviation d = deviation(got, want);
  char line[256];
  std::snprintf(line, sizeof line, "%s: nRMS %.2e (< %.1e), nMax %.2e (< %.1e), NaN mismatches %zu", what.c_str(),
                d.nrms, nrms_tol, d.nmax, nmax_tol, d.nan);
  ok(d.nrms < nrms_tol && d.nmax < nmax_tol && d.nan == 0, line);
  std::cout << "  " << line << std::endl;
}

static size_t differing(const Bytes& a, const Bytes& b, size_t elem) {
  size_t n = 0;
  for (size_t i = 0; i + elem <= std::min(a.size(), b.size()); i += elem) n += std::memcmp(&a[i], &b[i], elem) != 0;
  return n + (a.size() != b.size());
}

static void raises(const std::string& what, const std::string& needle, const std::function<void()>& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    ok(std::string(e.what()).find(needle) != std::string::npos,
       what + ": the message \"" + e.what() + "\" does not name \"" + needle + "\"");
    return;
  } catch (const std::exception& e) {
    ok(false, what + ": raised the wrong kind of exception: " + e.what());
    return;
  }
  ok(false, what + ": did not raise");
}

// ---- the C ABI on the same inputs -----------------------------------------

// Buffers of the library's device: host memory on the CPU backend, device
// memory (cudaMalloc) on the CUDA backend.
struct Device {
  std::vector<void*> owned;
  // `misalign`: the address modulo 256 the buffer starts at. The kernels
  // choose vector or scalar loads by alignment (same contract, not the same
  // bits), so a direct call gets the alignment of MLX's buffer.
  void* alloc(size_t n, size_t misalign = 0) {
    void* p = nullptr;
#ifdef MLXCEL_AMDGPU_SHIM_CUDA
    if (g_gpu) {
      if (cudaMalloc(&p, n + misalign + 1) != cudaSuccess) throw std::runtime_error("cudaMalloc");
      cudaMemset(p, 0, n + misalign + 1);
      owned.push_back(p);
      return static_cast<char*>(p) + misalign;
    }
#endif
    size_t rounded = (n + misalign + 256) / 256 * 256;
    p = std::aligned_alloc(256, rounded);
    std::memset(p, 0, rounded);
    owned.push_back(p);
    return static_cast<char*>(p) + misalign;
  }
  // A copy of `a` on the library's device, at the alignment MLX gave it.
  void* up(const array& a) {
    array c = mx::contiguous(a);
    mx::eval(c);
    size_t misalign = reinterpret_cast<uintptr_t>(c.data<void>()) % 256;
    Bytes b = bytes_of(c);
    void* p = alloc(b.size(), misalign);
#ifdef MLXCEL_AMDGPU_SHIM_CUDA
    if (g_gpu) {
      cudaMemcpy(p, b.data(), b.size(), cudaMemcpyHostToDevice);
      return p;
    }
#endif
    std::memcpy(p, b.data(), b.size());
    return p;
  }
  Bytes down(void* p, size_t n) {
    Bytes b(n);
#ifdef MLXCEL_AMDGPU_SHIM_CUDA
    if (g_gpu) {
      cudaDeviceSynchronize();
      cudaMemcpy(b.data(), p, n, cudaMemcpyDeviceToHost);
      return b;
    }
#endif
    std::memcpy(b.data(), p, n);
    return b;
  }
  ~Device() {
    for (void* p : owned) {
#ifdef MLXCEL_AMDGPU_SHIM_CUDA
      if (g_gpu) {
        cudaFree(p);
        continue;
      }
#endif
      std::free(p);
    }
  }
};

static void abi_ok(MlxcelAmdgpuStatus s, const std::string& what) {
  ok(s == MLXCEL_AMDGPU_OK, what + ": the direct C ABI call failed: " + mlxcel_amdgpu_last_error());
}

// ---- the kernels, called as mlxcel calls them ------------------------------

static array f32_scalar(float v) {
  return mx::full({1}, v, mx::float32);
}

static const std::tuple<int, int, int> kAnyGrid{7, 7, 7};  // ignored by the shim

static array xielu_shim(const array& x, float ap, float an, float be, float ep, bool with_n = true) {
  // mlx_cxx_kernels.cpp, fused_xielu: flat x, four [1] f32 scalars, T (and n
  // off ROCm), grid (ceil(n/256)*256, 1, 1), threadgroup (256, 1, 1).
  int n = int(x.size());
  auto xflat = mx::reshape(x, {n});
  TemplateArgs ta = {{"T", x.dtype()}};
  if (with_n) ta.push_back({"n", n});
  auto out = shim::xielu_kernel()({xflat, f32_scalar(ap), f32_scalar(an), f32_scalar(be), f32_scalar(ep)}, {Shape{n}},
                                  {x.dtype()}, {(n + 255) / 256 * 256, 1, 1}, {256, 1, 1}, ta, std::nullopt, false, {});
  return mx::reshape(out[0], x.shape());
}

static array xielu_graph(const array& x, float ap, float an, float be, float ep) {
  // mlxcel's xielu_elementwise.
  auto dt = x.dtype();
  auto pos = mx::multiply(array(ap, dt), mx::square(x));
  auto neg = mx::multiply(array(an, dt), mx::subtract(mx::expm1(mx::minimum(x, array(ep, dt))), x));
  return mx::add(mx::where(mx::greater(x, array(0.0f, dt)), pos, neg), mx::multiply(x, array(be, dt)));
}

static void test_xielu() {
  const float ap = 0.8731f, an = 0.6042f, be = 0.5f, ep = -1e-6f;
  std::vector<float> v = {0.0f, -0.0f, 1e-7f, -1e-7f, 5e-7f, -5e-7f, 1e-6f, -1e-6f, 2e-6f, -2e-6f, 1e-4f, -1e-4f,
                          1e-3f, -1e-3f, 0.5f, -0.5f, 1.0f, -1.0f, 2.5f, -2.5f, 8.0f, -8.0f, 42.0f, -42.0f, 90.0f, -90.0f};
  for (int k = 0; k < 2048; ++k) v.push_back((k - 1024) * 0.05f);
  for (float r : values(4096, 0x2069, 12.0f)) v.push_back(r);
  const int n = int(v.size());
  for (mx::Dtype t : {mx::float32, mx::float16, mx::bfloat16}) {
    std::string name = std::string("xielu ") + dname(t);
    array x = make(v, {n / 2, 2}, t);  // 2-D: the launcher flattens it
    array got = xielu_shim(x, ap, an, be, ep);
    Bytes gb = bytes_of(got);
    Device d;
    Bytes xb = bytes_of(x);
    void* dx = d.up(x);
    void* dout = d.alloc(xb.size());
    abi_ok(mlxcel_amdgpu_xielu(abi(t), dx, dout, n, ap, an, be, ep, nullptr), name);
    same_bytes(name + " vs the C ABI", gb, d.down(dout, xb.size()), mx::size_of(t));
    // Negative control: the comparison sees a parameter passed wrong.
    ok(differing(bytes_of(xielu_shim(x, ap, an * 1.01f, be, ep)), gb, mx::size_of(t)) > 100,
       name + ": a perturbed alpha_n went unnoticed");
    // The ROCm spelling (no "n") and any grid give the same bits.
    same_bytes(name + " without 'n'", bytes_of(xielu_shim(x, ap, an, be, ep, false)), gb, mx::size_of(t));
    // A strided (non-row-contiguous) input is made contiguous first.
    array wide = mx::concatenate({mx::reshape(x, {n, 1}), mx::zeros({n, 1}, t)}, 1);
    array strided = mx::squeeze(mx::slice(wide, {0, 0}, {n, 1}), 1);
    mx::eval(strided);
    ok(!strided.flags().row_contiguous || g_gpu, name + ": the strided test input is unexpectedly contiguous");
    same_bytes(name + " of a strided input", bytes_of(xielu_shim(strided, ap, an, be, ep)), gb, mx::size_of(t));
    // MLX's own elementwise graph: the same op-by-op roundings, but MLX's
    // expm1 is not AMD's expm1f, so within the design's budget.
    double tol[2] = {t == mx::float32 ? 1e-6 : t == mx::float16 ? 2e-3 : 1.6e-2,
                     t == mx::float32 ? 1e-5 : t == mx::float16 ? 1.2e-2 : 7e-2};
    close(name + " vs MLX's graph", floats_of(got), floats_of(xielu_graph(x, ap, an, be, ep)), tol[0], tol[1]);
  }
}

static std::vector<array> add3_shim(const array& a, const array& b, const array& x, const array& w,
                                    const std::optional<array>& bias, float eps) {
  // mlx_cxx_kernels.cpp, fused_add3_layer_norm.
  auto T = x.dtype();
  const int D = x.shape().back();
  array bias_arr = bias ? mx::astype(*bias, T) : mx::zeros({1}, T);
  const int b_stride = bias && bias->ndim() == 1 ? 1 : 0;
  TemplateArgs ta = {{"T", T}, {"D", D}, {"W_STRIDE", 1}, {"B_STRIDE", b_stride}};
  const int rows = int(x.size() / D);
  return shim::add3_layer_norm_kernel()({a, b, x, mx::astype(w, T), bias_arr, mx::full({1}, eps, mx::float32)},
                                        {x.shape(), x.shape()}, {T, T}, {rows * 256, 1, 1}, {256, 1, 1}, ta,
                                        std::nullopt, false, {});
}

static void test_add3() {
  struct Case {
    mx::Dtype t;
    int d, rows;
    bool bias;
  };
  const Case cases[] = {{mx::float16, 4096, 5, false}, {mx::bfloat16, 4096, 2, true}, {mx::float16, 96, 4, false},
                        {mx::float32, 1025, 3, false}, {mx::bfloat16, 6656, 2, true}, {mx::bfloat16, 5, 2, false}};
  const float eps = 1e-5f;
  for (const auto& c : cases) {
    std::string name = std::string("add3_layer_norm ") + dname(c.t) + " d=" + std::to_string(c.d) +
                       " rows=" + std::to_string(c.rows) + (c.bias ? " bias" : "");
    const size_t n = size_t(c.d) * c.rows;
    Shape s = {1, c.rows, c.d};
    array a = make(values(n, 1), s, c.t), b = make(values(n, 2), s, c.t), x = make(values(n, 3, 4.0f), s, c.t);
    array w = make(values(c.d, 4, 0.5f), {c.d}, c.t);
    std::optional<array> bias;
    if (c.bias) bias = make(values(c.d, 5, 0.1f), {c.d}, c.t);
    auto got = add3_shim(a, b, x, w, bias, eps);
    Device d;
    const size_t bytes = n * mx::size_of(c.t);
    void* dxn = d.alloc(bytes);
    void* dh = d.alloc(bytes);
    abi_ok(mlxcel_amdgpu_add3_layer_norm(abi(c.t), d.up(a), d.up(b), d.up(x),
                                         d.up(w), bias ? d.up(*bias) : nullptr, dxn, dh, c.rows,
                                         c.d, eps, nullptr),
           name);
    same_bytes(name + " x_new vs the C ABI", bytes_of(got[0]), d.down(dxn, bytes), mx::size_of(c.t));
    same_bytes(name + " h vs the C ABI", bytes_of(got[1]), d.down(dh, bytes), mx::size_of(c.t));
    // The unfused MLX pair: the residual is the same rounding of the same
    // sums, bit for bit; MLX's layer_norm reduces in another order, so h is
    // within a few ulps of T.
    array x_new = mx::add(mx::add(a, b), x);
    same_bytes(name + " x_new vs MLX's add", bytes_of(got[0]), bytes_of(x_new), mx::size_of(c.t));
    double tol = c.t == mx::float32 ? 1e-5 : c.t == mx::float16 ? 5e-3 : 4e-2;
    close(name + " h vs MLX's layer_norm", floats_of(got[1]), floats_of(mx::fast::layer_norm(x_new, w, bias, eps)),
          tol / 4, tol);
  }
  // A bias passed as one broadcast element (B_STRIDE 0) that is not zero.
  {
    const int D = 64, rows = 3;
    Shape s = {rows, D};
    auto t = mx::bfloat16;
    array a = make(values(rows * D, 1), s, t), b = make(values(rows * D, 2), s, t), x = make(values(rows * D, 3), s, t);
    array w = make(values(D, 4, 0.5f), {D}, t);
    array scalar_bias = mx::astype(array(0.25f), t);  // 0-d: B_STRIDE 0 at the call site
    auto got = add3_shim(a, b, x, w, scalar_bias, 1e-5f);
    auto want = add3_shim(a, b, x, w, mx::full({D}, 0.25f, t), 1e-5f);
    same_bytes("add3_layer_norm broadcast bias", bytes_of(got[1]), bytes_of(want[1]), 2);
  }
}

static std::vector<array> mamba_shim(const array& x, const array& delta, const array& bm, const array& cm,
                                     const array& a, const array& dskip, const array& state_in) {
  // mlx_cxx_kernels.cpp, mamba1_selective_scan (float32-state variant).
  auto t = x.dtype();
  int B = x.shape(0), L = x.shape(1), Dm = x.shape(2), N = bm.shape().back();
  TemplateArgs ta = {{"T", t}, {"N", N}, {"Dm", Dm}};
  std::vector<array> in = {x, mx::astype(delta, t), mx::astype(bm, t), mx::astype(cm, t), mx::astype(a, mx::float32),
                           mx::astype(dskip, t), mx::astype(state_in, mx::float32)};
  return shim::mamba1_scan_kernel()(in, {Shape{B, L, Dm}, Shape{B, Dm, N}}, {t, mx::float32},
                                    {32, (Dm + 7) / 8 * 8, B}, {32, 8, 1}, ta, std::nullopt, false, {});
}

// The scan as an MLX graph in float32, step by step.
static std::vector<array> mamba_graph(const array& x, const array& dt, const array& bm, const array& cm,
                                      const array& a, const array& dskip, array s) {
  int B = x.shape(0), L = x.shape(1), Dm = x.shape(2), N = bm.shape(2);
  auto f = [](const array& v) { return mx::astype(v, mx::float32); };
  std::vector<array> ys;
  for (int t = 0; t < L; ++t) {
    array xt = f(mx::slice(x, {0, t, 0}, {B, t + 1, Dm}));   // [B,1,Dm]
    array dtt = f(mx::slice(dt, {0, t, 0}, {B, t + 1, Dm}));
    array bt = f(mx::slice(bm, {0, t, 0}, {B, t + 1, N}));   // [B,1,N]
    array ct = f(mx::slice(cm, {0, t, 0}, {B, t + 1, N}));
    array dtc = mx::swapaxes(dtt, 1, 2), xc = mx::swapaxes(xt, 1, 2);  // [B,Dm,1]
    s = mx::add(mx::multiply(mx::exp(mx::multiply(dtc, a)), s), mx::multiply(mx::multiply(dtc, xc), bt));
    array y = mx::add(mx::sum(mx::multiply(s, ct), 2), mx::multiply(mx::reshape(xt, {B, Dm}), f(dskip)));
    ys.push_back(mx::reshape(y, {B, 1, Dm}));
  }
  return {mx::concatenate(ys, 1), s};
}

static void test_mamba() {
  struct Case {
    mx::Dtype t;
    int B, L, Dm, N;
  };
  const Case cases[] = {{mx::float32, 2, 7, 24, 16}, {mx::float32, 2, 1, 24, 32}, {mx::bfloat16, 1, 64, 24, 16},
                        {mx::float16, 1, 9, 40, 8}};
  for (const auto& c : cases) {
    std::string name = std::string("mamba1_scan ") + dname(c.t) + " B=" + std::to_string(c.B) +
                       " L=" + std::to_string(c.L) + " N=" + std::to_string(c.N);
    size_t nx = size_t(c.B) * c.L * c.Dm, nb = size_t(c.B) * c.L * c.N;
    array x = make(values(nx, 1), {c.B, c.L, c.Dm}, c.t);
    array dt = make(values(nx, 2, 0.25f, 0.3f), {c.B, c.L, c.Dm}, c.t);
    array bm = make(values(nb, 3), {c.B, c.L, c.N}, c.t), cm = make(values(nb, 4), {c.B, c.L, c.N}, c.t);
    array a = make(values(size_t(c.Dm) * c.N, 5, 0.5f, -1.0f), {c.Dm, c.N}, mx::float32);
    array dskip = make(values(c.Dm, 6), {c.Dm}, c.t);
    array s0 = make(values(size_t(c.B) * c.Dm * c.N, 7, 0.5f), {c.B, c.Dm, c.N}, mx::float32);
    auto got = mamba_shim(x, dt, bm, cm, a, dskip, s0);
    Device d;
    size_t ybytes = nx * mx::size_of(c.t), sbytes = size_t(c.B) * c.Dm * c.N * 4;
    void* dy = d.alloc(ybytes);
    void* ds = d.alloc(sbytes);
    abi_ok(mlxcel_amdgpu_mamba1_scan(abi(c.t), d.up(x), d.up(dt), d.up(bm),
                                     d.up(cm), static_cast<const float*>(d.up(a)),
                                     d.up(dskip), static_cast<const float*>(d.up(s0)), dy,
                                     static_cast<float*>(ds), c.B, c.L, c.Dm, c.N, nullptr),
           name);
    same_bytes(name + " y vs the C ABI", bytes_of(got[0]), d.down(dy, ybytes), mx::size_of(c.t));
    same_bytes(name + " state vs the C ABI", bytes_of(got[1]), d.down(ds, sbytes), 4);
    auto want = mamba_graph(x, dt, bm, cm, a, dskip, s0);
    double ytol = c.t == mx::float32 ? 1e-5 : c.t == mx::float16 ? 1e-3 : 1e-2;
    close(name + " y vs MLX's graph", floats_of(got[0]), floats_of(want[0]), ytol, ytol * 8);
    close(name + " state vs MLX's graph", floats_of(got[1]), floats_of(want[1]), 1e-5, 1e-4);
    if (c.L > 1) {
      // A scan of L1 + L2 steps equals a scan of L1 then L2 from its state.
      int l1 = c.L / 2;
      auto cut = [&](const array& v, int from, int to) {
        return mx::slice(v, {0, from, 0}, {c.B, to, v.shape(2)});
      };
      auto first = mamba_shim(cut(x, 0, l1), cut(dt, 0, l1), cut(bm, 0, l1), cut(cm, 0, l1), a, dskip, s0);
      auto second = mamba_shim(cut(x, l1, c.L), cut(dt, l1, c.L), cut(bm, l1, c.L), cut(cm, l1, c.L), a, dskip,
                               first[1]);
      same_bytes(name + " chunked state", bytes_of(second[1]), bytes_of(got[1]), 4);
      same_bytes(name + " chunked y", bytes_of(mx::concatenate({first[0], second[0]}, 1)), bytes_of(got[0]),
                 mx::size_of(c.t));
    }
  }
}

// ---- the Nemotron MoE block: MLX router and top-k, our experts, MLX residual --

struct Moe {
  mx::Dtype t;
  int E, K, din, dff, bits, gs;
  array x, gate_w, corr_bias, w1, s1, b1, w2, s2, b2;
};

static Moe make_moe(mx::Dtype t, int E, int K, int din, int dff, int bits, int gs) {
  auto q1 = mx::quantize(make(values(size_t(E) * dff * din, 11, 0.05f), {E, dff, din}, t), gs, bits);
  auto q2 = mx::quantize(make(values(size_t(E) * din * dff, 12, 0.05f), {E, din, dff}, t), gs, bits);
  return {t,
          E,
          K,
          din,
          dff,
          bits,
          gs,
          make(values(din, 13), {1, din}, t),
          make(values(size_t(E) * din, 14, 0.1f), {E, din}, t),
          make(values(E, 15, 0.01f), {E}, mx::float32),
          q1[0],
          q1[1],
          q1[2],
          q2[0],
          q2[1],
          q2[2]};
}

// mlx_cxx_kernels.cpp, fused_moe_forward's router: sigmoid scores with a
// correction bias, argpartition top-k, normalized.
static std::pair<array, array> router(const Moe& m) {
  auto gates = mx::matmul(m.x, mx::transpose(m.gate_w));
  auto orig = mx::sigmoid(mx::astype(gates, mx::float32));
  auto neg = mx::negative(mx::add(orig, m.corr_bias));
  auto idx = mx::slice(mx::argpartition(neg, m.K - 1, -1), {0, 0}, {1, m.K});
  auto scores = mx::take_along_axis(orig, idx, -1);
  scores = mx::multiply(mx::divide(scores, mx::add(mx::sum(scores, -1, true), array(1e-20f))), array(2.5f));
  return {idx, scores};
}

static TemplateArgs moe_ta(const Moe& m) {
  return {{"T", m.t}, {"K", m.K}, {"Din", m.din}, {"Dff", m.dff}, {"bits", m.bits}, {"group_size", m.gs}};
}

// fused_moe_forward's MLXCEL_FUSED_MOE_RELU2 branch, with the shim's kernels.
static std::vector<array> routed_two_kernels(const Moe& m, const array& idx, const array& scores) {
  auto T = m.t;
  auto ta = moe_ta(m);
  auto idx_u32 = mx::astype(mx::reshape(idx, {m.K}), mx::uint32);
  auto rA = shim::moe_fc1_relu2_kernel()(
      {mx::astype(mx::reshape(m.x, {m.din}), T), idx_u32, m.w1, mx::astype(m.s1, T), mx::astype(m.b1, T)},
      {Shape{m.K, m.dff}}, {mx::float32}, {32, m.dff, m.K}, {32, 2, 1}, ta, std::nullopt, false, {});
  auto rB = shim::moe_down_kernel()({idx_u32, m.w2, mx::astype(m.s2, T), mx::astype(m.b2, T), rA[0],
                                     mx::astype(mx::reshape(scores, {m.K}), mx::float32)},
                                    {Shape{m.K, m.din}}, {mx::float32}, {32, m.din, m.K}, {32, 2, 1}, ta,
                                    std::nullopt, false, {});
  return {rA[0], rB[0], mx::reshape(mx::astype(mx::sum(rB[0], 0, false), T), {1, m.din})};
}

static array routed_one_kernel(const Moe& m, const array& idx, const array& scores) {
  auto T = m.t;
  auto out = shim::moe_routed_forward_kernel()(
      {mx::reshape(m.x, {m.din}), mx::astype(mx::reshape(idx, {m.K}), mx::uint32), m.w1, m.s1, m.b1, m.w2, m.s2, m.b2,
       mx::astype(mx::reshape(scores, {m.K}), mx::float32)},
      {Shape{m.din}}, {T}, kAnyGrid, kAnyGrid, moe_ta(m), std::nullopt, false, {});
  return mx::reshape(out[0], {1, m.din});
}

// fused_moe_forward's default branch: MLX's gather_qmm.
static array routed_gather_qmm(const Moe& m, const array& idx, const array& scores) {
  auto h = mx::gather_qmm(mx::reshape(m.x, {1, 1, 1, m.din}), m.w1, m.s1, m.b1, std::nullopt, idx, true, m.gs, m.bits);
  h = mx::square(mx::maximum(h, array(0.0f, h.dtype())));
  h = mx::squeeze(mx::gather_qmm(h, m.w2, m.s2, m.b2, std::nullopt, idx, true, m.gs, m.bits), -2);
  auto sc = mx::astype(mx::reshape(scores, {1, m.K, 1}), h.dtype());
  return mx::astype(mx::sum(mx::multiply(h, sc), -2, false), m.t);
}

// A dense float32 reference of the routed experts (the contract's oracle).
static array routed_dense_f32(const Moe& m, const array& idx, const array& scores) {
  auto deq = [&](const array& w, const array& s, const array& b) {
    return mx::dequantize(w, mx::astype(s, mx::float32), mx::astype(b, mx::float32), m.gs, m.bits);
  };
  auto i = mx::reshape(idx, {m.K});
  auto w1 = mx::take(deq(m.w1, m.s1, m.b1), i, 0), w2 = mx::take(deq(m.w2, m.s2, m.b2), i, 0);
  auto x = mx::reshape(mx::astype(m.x, mx::float32), {m.din, 1});
  auto act = mx::square(mx::maximum(mx::matmul(w1, x), array(0.0f)));               // [K, dff, 1]
  auto part = mx::reshape(mx::matmul(w2, act), {m.K, m.din});                        // [K, din]
  return mx::sum(mx::multiply(part, mx::reshape(scores, {m.K, 1})), 0, false);      // [din] f32
}

// ---- the SwiGLU / GeGLU experts: mlxcel's run_fused_moe_two_kernel --------

struct Gated {
  mx::Dtype t;
  int E, K, din, dff, gu_bits, d_bits, gs, act;
  array x, router_w, wg, sg, bg, wu, su, bu, wd, sd, bd;
  // A quantized router {codes, scales, biases} of router_bits and router_gs, or none: router_w.
  std::optional<std::vector<array>> router_q = std::nullopt;
  int router_bits = 0, router_gs = 0;
};

static Gated make_gated(mx::Dtype t, int E, int K, int din, int dff, int gu_bits, int d_bits, int gs, int act) {
  auto q = [&](int rows, int cols, uint32_t seed, int bits) {
    return mx::quantize(make(values(size_t(E) * rows * cols, seed, 0.05f), {E, rows, cols}, t), gs, bits);
  };
  auto g = q(dff, din, 21, gu_bits), u = q(dff, din, 22, gu_bits), d = q(din, dff, 23, d_bits);
  return {t,    E,    K,    din,  dff,  gu_bits, d_bits, gs,   act, make(values(din, 24), {1, din}, t),
          make(values(size_t(E) * din, 25, 0.1f), {E, din}, t),
          g[0], g[1], g[2], u[0], u[1], u[2], d[0], d[1], d[2]};
}

// Qwen3 MoE's router: softmax in f32, argpartition top-k, renormalized.
static std::pair<array, array> softmax_router(const Gated& m) {
  auto probs = mx::softmax(mx::astype(mx::matmul(m.x, mx::transpose(m.router_w)), mx::float32), -1);
  auto idx = mx::slice(mx::argpartition(mx::negative(probs), m.K - 1, -1), {0, 0}, {1, m.K});
  auto scores = mx::take_along_axis(probs, idx, -1);
  return {idx, mx::divide(scores, mx::sum(scores, -1, true))};
}

// run_fused_moe_two_kernel as mlxcel calls it, with the shim's getters:
// {act_g, part, out}.
static std::vector<array> gated_two_kernels(const Gated& m, const array& idx, const array& scores) {
  auto T = m.t;
  TemplateArgs a = {{"T", T},       {"K", m.K},       {"Din", m.din}, {"Dff", m.dff},
                    {"bits", m.gu_bits}, {"group_size", m.gs}, {"act", m.act}};
  TemplateArgs b = {{"T", T}, {"K", m.K}, {"Din", m.din}, {"Dff", m.dff}, {"bits", m.d_bits}, {"group_size", m.gs}};
  auto rA = shim::moe_gateup_kernel()({mx::astype(m.x, T), mx::astype(idx, mx::uint32), m.wg, mx::astype(m.sg, T),
                                       mx::astype(m.bg, T), m.wu, mx::astype(m.su, T), mx::astype(m.bu, T)},
                                      {Shape{m.K, m.dff}}, {mx::float32}, {32, m.dff, m.K}, {32, 2, 1}, a, std::nullopt,
                                      false, {});
  auto rB = shim::moe_down_kernel()({mx::astype(idx, mx::uint32), m.wd, mx::astype(m.sd, T), mx::astype(m.bd, T),
                                     rA[0], mx::astype(scores, mx::float32)},
                                    {Shape{m.K, m.din}}, {mx::float32}, {32, m.din, m.K}, {32, 2, 1}, b, std::nullopt,
                                    false, {});
  return {rA[0], rB[0], mx::astype(mx::sum(rB[0], 0, false), T)};
}

static array gate_activation(const Gated& m, const array& g) {
  if (m.act == 0) return mx::multiply(g, mx::sigmoid(g));
  auto inner = mx::multiply(array(0.7978845608f), mx::add(g, mx::multiply(array(0.044715f), mx::power(g, array(3.0f)))));
  return mx::multiply(mx::multiply(array(0.5f), g), mx::add(array(1.0f), mx::tanh(inner)));
}

// The dense f32 reference: dequantized weights, every step in f32.
static array gated_dense_f32(const Gated& m, const array& idx, const array& scores) {
  auto deq = [&](const array& w, const array& s, const array& b, int bits) {
    return mx::dequantize(w, mx::astype(s, mx::float32), mx::astype(b, mx::float32), m.gs, bits);
  };
  auto i = mx::reshape(idx, {m.K});
  auto x = mx::reshape(mx::astype(m.x, mx::float32), {m.din, 1});
  auto g = mx::matmul(mx::take(deq(m.wg, m.sg, m.bg, m.gu_bits), i, 0), x);  // [K, dff, 1]
  auto u = mx::matmul(mx::take(deq(m.wu, m.su, m.bu, m.gu_bits), i, 0), x);
  auto h = mx::multiply(gate_activation(m, g), u);
  auto part = mx::reshape(mx::matmul(mx::take(deq(m.wd, m.sd, m.bd, m.d_bits), i, 0), h), {m.K, m.din});
  return mx::sum(mx::multiply(part, mx::reshape(scores, {m.K, 1})), 0, false);
}

// MLX's own graph of the experts: gather_qmm for gate, up and down.
static array gated_gather_qmm(const Gated& m, const array& idx, const array& scores) {
  auto x = mx::reshape(m.x, {1, 1, 1, m.din});
  auto g = mx::gather_qmm(x, m.wg, m.sg, m.bg, std::nullopt, idx, true, m.gs, m.gu_bits);
  auto u = mx::gather_qmm(x, m.wu, m.su, m.bu, std::nullopt, idx, true, m.gs, m.gu_bits);
  auto h = mx::multiply(mx::astype(gate_activation(m, mx::astype(g, mx::float32)), g.dtype()), u);
  h = mx::squeeze(mx::gather_qmm(h, m.wd, m.sd, m.bd, std::nullopt, idx, true, m.gs, m.d_bits), -2);
  auto sc = mx::astype(mx::reshape(scores, {1, m.K, 1}), h.dtype());
  return mx::reshape(mx::astype(mx::sum(mx::multiply(h, sc), -2, false), m.t), {m.din});
}

static void test_gated_moe() {
  struct Case {
    mx::Dtype t;
    int E, K, din, dff, gu_bits, d_bits, gs, act;
  };
  const Case cases[] = {{mx::bfloat16, 16, 8, 512, 384, 4, 4, 64, 0},   // Qwen3 MoE, reduced
                        {mx::bfloat16, 8, 6, 256, 192, 4, 6, 64, 0},    // dots.llm1: 6-bit down
                        {mx::float16, 8, 4, 256, 256, 8, 8, 32, 1},     // GeGLU (Gemma 4)
                        {mx::float32, 4, 3, 128, 256, 4, 4, 128, 0}};
  for (const auto& c : cases) {
    std::string name = std::string("gated moe ") + dname(c.t) + " E=" + std::to_string(c.E) +
                       " K=" + std::to_string(c.K) + " " + std::to_string(c.din) + "x" + std::to_string(c.dff) +
                       " bits=" + std::to_string(c.gu_bits) + "/" + std::to_string(c.d_bits) +
                       " gs=" + std::to_string(c.gs) + (c.act ? " GeGLU" : " SwiGLU");
    Gated m = make_gated(c.t, c.E, c.K, c.din, c.dff, c.gu_bits, c.d_bits, c.gs, c.act);
    auto [idx, scores] = softmax_router(m);
    mx::eval(idx, scores);
    ok(shim::moe_gated_supports(c.t, c.E, c.K, c.din, c.dff, c.gu_bits, c.d_bits, c.gs), name + ": supported");
    auto two = gated_two_kernels(m, idx, scores);

    // The C ABI on the same inputs, bit for bit.
    Device d;
    MlxcelAmdgpuMoeShape s{uint32_t(c.E), uint32_t(c.K), uint32_t(c.din), uint32_t(c.dff), uint32_t(c.gu_bits),
                           uint32_t(c.gs)};
    MlxcelAmdgpuMoeShape sd = s;
    sd.bits = uint32_t(c.d_bits);
    auto T = c.t;
    auto u32 = [&](const array& a) { return static_cast<const uint32_t*>(d.up(a)); };
    void* x = d.up(mx::reshape(m.x, {c.din}));
    auto* id = u32(mx::astype(mx::reshape(idx, {c.K}), mx::uint32));
    auto* sc = static_cast<const float*>(d.up(mx::astype(mx::reshape(scores, {c.K}), mx::float32)));
    size_t act_bytes = size_t(c.K) * c.dff * 4, part_bytes = size_t(c.K) * c.din * 4;
    auto* act = static_cast<float*>(d.alloc(act_bytes));
    auto* part = static_cast<float*>(d.alloc(part_bytes));
    abi_ok(mlxcel_amdgpu_moe_gateup(abi(T), s, uint32_t(c.act), x, id, u32(m.wg), d.up(m.sg), d.up(m.bg), u32(m.wu),
                                    d.up(m.su), d.up(m.bu), act, nullptr, nullptr),
           name + " gateup");
    abi_ok(mlxcel_amdgpu_moe_down(abi(T), sd, id, u32(m.wd), d.up(m.sd), d.up(m.bd), act, sc, part, nullptr, nullptr),
           name + " down");
    same_bytes(name + " act_g vs the C ABI", bytes_of(two[0]), d.down(act, act_bytes), 4);
    same_bytes(name + " part vs the C ABI", bytes_of(two[1]), d.down(part, part_bytes), 4);

    // The contract: against the dense f32 reference rounded to T once, and
    // against MLX's own graph of the experts.
    auto dense = floats_of(mx::astype(gated_dense_f32(m, idx, scores), T));
    close(name + " vs dense f32", floats_of(two[2]), dense, 5e-4, 2e-2);
    // MLX's graph rounds g, u, the activation and each expert's output to T,
    // so in bf16 it is itself a few percent from the dense reference: ours
    // must be no farther from it than 1.5 times that distance.
    auto graph = floats_of(gated_gather_qmm(m, idx, scores));
    double graph_err = nrms_of(graph, dense);
    std::cout << "  " << name << ": MLX's graph vs dense f32: nRMS " << graph_err << std::endl;
    close(name + " vs MLX's gather_qmm graph", floats_of(two[2]), graph, std::max(5e-4, 1.5 * graph_err), 2e-1);
    // Negative control: the other activation is far outside the contract.
    Gated other = m;
    other.act = 1 - m.act;
    ok(nrms_of(floats_of(gated_two_kernels(other, idx, scores)[2]), dense) > 0.05,
       name + ": the wrong activation went unnoticed");
  }
}

// ---- the router: softmax top-k (Qwen3 MoE's), for one to eight tokens -------

static std::vector<array> router_shim(const array& x, const array& wr, int K, int norm) {
  const int M = x.shape(0);
  TemplateArgs ta = {{"T", x.dtype()}, {"K", K}, {"norm_topk_prob", norm}};
  return shim::moe_router_kernel()({x, wr}, {Shape{M, K}, Shape{M, K}}, {mx::uint32, mx::float32}, kAnyGrid, kAnyGrid,
                                   ta, std::nullopt, false, {});
}

static array renormalized(const array& p, int norm) {
  return norm ? mx::divide(p, mx::sum(p, -1, true)) : p;
}

static void test_router() {
  struct Case {
    mx::Dtype t;
    int M, E, K, din, norm;
  };
  const Case cases[] = {{mx::bfloat16, 1, 128, 8, 2048, 1},  // Qwen3-30B-A3B's router, one token
                        {mx::bfloat16, 8, 128, 8, 2048, 1},  // and a batch of eight
                        {mx::float16, 3, 512, 10, 256, 1},   // Qwen3-Next's E and K, a shorter row
                        {mx::float32, 2, 40, 6, 96, 0}};
  for (const auto& c : cases) {
    std::string name = std::string("moe_router ") + dname(c.t) + " M=" + std::to_string(c.M) +
                       " E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) + " Din=" + std::to_string(c.din) +
                       " norm=" + std::to_string(c.norm);
    const int M = c.M, E = c.E, K = c.K;
    array x = make(values(size_t(M) * c.din, 31), {M, c.din}, c.t);
    array wr = make(values(size_t(E) * c.din, 32, 0.05f), {E, c.din}, c.t);
    ok(shim::moe_router_supports(c.t, M, E, K, c.din), name + ": supported");
    auto got = router_shim(x, wr, K, c.norm);
    Bytes ids = bytes_of(got[0]);

    // The C ABI on the same inputs, bit for bit.
    Device d;
    const size_t out_bytes = size_t(M) * K * 4;
    auto* logits = static_cast<float*>(d.alloc(size_t(M) * E * 4));
    auto* dids = static_cast<uint32_t*>(d.alloc(out_bytes));
    auto* dscores = static_cast<float*>(d.alloc(out_bytes));
    abi_ok(mlxcel_amdgpu_moe_router(abi(c.t), d.up(x), d.up(wr), logits, dids, dscores, M, E, K, c.din, c.norm,
                                    nullptr),
           name);
    same_bytes(name + " ids vs the C ABI", ids, d.down(dids, out_bytes), 4);
    same_bytes(name + " scores vs the C ABI", bytes_of(got[1]), d.down(dscores, out_bytes), 4);

    // Each token's ids are distinct experts, their scores in descending order.
    std::vector<uint32_t> id(size_t(M) * K);
    std::memcpy(id.data(), ids.data(), ids.size());
    std::vector<float> sc = floats_of(got[1]);
    bool ordered = true;
    for (int t = 0; t < M; ++t)
      for (int i = 0; i < K; ++i) {
        const size_t at = size_t(t) * K + i;
        ordered &= id[at] < uint32_t(E) && (i == 0 || sc[at] <= sc[at - 1]);
        for (int j = 0; j < i; ++j) ordered &= id[at] != id[size_t(t) * K + j];
      }
    ok(ordered, name + ": ids out of range, repeated, or not in descending order of score");

    // MLX's graph in f32: the softmax of x . W_r^T. Our scores are its K
    // largest probabilities, in order, and its probabilities of our ids. On
    // the CPU stream: MLX's CUDA matmul of f32 arrays rounds them to TF32
    // (4.9e-5 nRMS from ours on an H100 for f32 inputs).
    const auto cpu = mx::Device(mx::Device::cpu);
    array probs = mx::softmax(
        mx::matmul(mx::astype(x, mx::float32, cpu), mx::transpose(mx::astype(wr, mx::float32, cpu), cpu), cpu), -1,
        false, cpu);
    array largest = mx::slice(mx::negative(mx::sort(mx::negative(probs), -1)), {0, 0}, {M, K});
    close(name + " scores vs MLX's sorted softmax", sc, floats_of(renormalized(largest, c.norm)), 1e-5, 1e-4);
    array of_ours = mx::take_along_axis(probs, mx::astype(got[0], mx::int32), -1);
    close(name + " scores vs MLX's probabilities of our ids", sc, floats_of(renormalized(of_ours, c.norm)), 1e-5, 1e-4);
    // Negative control: the other norm_topk_prob changes every score.
    ok(differing(bytes_of(router_shim(x, wr, K, 1 - c.norm)[1]), bytes_of(got[1]), 4) == size_t(M) * K,
       name + ": a flipped norm_topk_prob went unnoticed");
  }
}

// The router against the testkit's reference (reference::moe::router_logits
// and topk, in f64): the cases tests/mlx_shim.rs writes to the file named by
// MLXCEL_AMDGPU_ROUTER_CASES. Each: u32 dtype code, M, E, K, Din,
// norm_topk_prob; f32 x [M, Din] and W_r [E, Din] (values of the dtype);
// the reference's u32 ids [M, K] and f32 scores [M, K]. The cases have no
// two probabilities within the kernels' rounding of each other, so the ids
// must be equal; the scores within 1e-5 (f32 logits and softmax against f64).
static void test_router_reference() {
  const char* path = std::getenv("MLXCEL_AMDGPU_ROUTER_CASES");
  if (!path) {
    std::cout << "  router vs the testkit reference: no cases file (MLXCEL_AMDGPU_ROUTER_CASES)" << std::endl;
    return;
  }
  std::ifstream file(path, std::ios::binary);
  ok(bool(file), std::string("cannot read ") + path);
  Bytes all((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  size_t at = 0;
  auto take = [&](void* dst, size_t bytes) {
    if (at + bytes > all.size()) throw std::runtime_error(std::string(path) + " is truncated");
    std::memcpy(dst, all.data() + at, bytes);
    at += bytes;
  };
  int n = 0;
  while (at < all.size()) {
    uint32_t h[6];
    take(h, sizeof h);
    const int M = int(h[1]), E = int(h[2]), K = int(h[3]), din = int(h[4]), norm = int(h[5]);
    mx::Dtype t = h[0] == MLXCEL_AMDGPU_F32 ? mx::float32 : h[0] == MLXCEL_AMDGPU_F16 ? mx::float16 : mx::bfloat16;
    std::vector<float> xv(size_t(M) * din), wv(size_t(E) * din), want_scores(size_t(M) * K);
    std::vector<uint32_t> want_ids(size_t(M) * K), ids(size_t(M) * K);
    take(xv.data(), xv.size() * 4);
    take(wv.data(), wv.size() * 4);
    take(want_ids.data(), want_ids.size() * 4);
    take(want_scores.data(), want_scores.size() * 4);
    std::string name = std::string("moe_router ") + dname(t) + " M=" + std::to_string(M) + " E=" + std::to_string(E) +
                       " K=" + std::to_string(K) + " Din=" + std::to_string(din) + " norm=" + std::to_string(norm);
    auto got = router_shim(make(xv, {M, din}, t), make(wv, {E, din}, t), K, norm);
    Bytes gi = bytes_of(got[0]);
    std::memcpy(ids.data(), gi.data(), gi.size());
    size_t first = ids.size();
    for (size_t i = ids.size(); i-- > 0;)
      if (ids[i] != want_ids[i]) first = i;
    ok(first == ids.size(), name + ": ids differ from the reference's (first at " + std::to_string(first) + ")");
    std::vector<float> sc = floats_of(got[1]);
    double worst = 0;
    for (size_t i = 0; i < sc.size(); ++i)
      worst = std::max(worst, std::abs(double(sc[i]) - want_scores[i]) / std::abs(double(want_scores[i])));
    char line[256];
    std::snprintf(line, sizeof line, "%s vs the testkit reference: ids %s, scores within %.2e (< 1e-5)", name.c_str(),
                  first == ids.size() ? "equal" : "DIFFER", worst);
    ok(worst < 1e-5, line);
    std::cout << "  " << line << std::endl;
    ++n;
  }
  std::cout << "  router vs the testkit reference: " << n << " cases" << std::endl;
}

// ---- Qwen3-30B-A3B's whole MoE block: router and experts, ours and MLX's ----

// The block's output [M, din] of T and its expert ids [M, K].
struct Block {
  array out, ids;
};

// switch_layers.py's swiglu(x, gate) = silu(gate) * x: {up, gate}.
static std::vector<array> swiglu(const std::vector<array>& in) {
  return {mx::multiply(mx::multiply(in[1], mx::sigmoid(in[1])), in[0])};
}

// mlx-lm's Qwen3 MoE block (qwen3_moe.py's sparse MoE block over switch_layers.py's SwitchGLU) as
// MLX ops: the gate Linear x . W_r^T, the precise softmax, argpartition's last K, take_along_axis,
// renormalized; SwitchGLU's stop_gradient, gather_qmm for up, gate and down with the compiled
// swiglu between; the scores' weighted sum over k. Like SwitchGLU, it sorts the (token, expert)
// pairs by expert when M * K >= 64 (gather_qmm's sorted_indices path) and unsorts after down.
// With m.router_q, the gate is a quantized_matmul, as in mlx-lm's quantized checkpoints.
static Block block_graph(const Gated& m, const array& x) {
  const int M = x.shape(0), K = m.K, E = m.E;
  auto logits = m.router_q ? mx::quantized_matmul(x, (*m.router_q)[0], (*m.router_q)[1], (*m.router_q)[2], true,
                                                  m.router_gs, m.router_bits)
                           : mx::matmul(x, mx::transpose(m.router_w));
  auto probs = mx::softmax(logits, std::vector<int>{-1}, true);
  auto inds = mx::slice(mx::argpartition(probs, E - K, -1), {0, E - K}, {M, E});
  auto scores = mx::take_along_axis(probs, inds, -1);
  scores = mx::divide(scores, mx::sum(scores, -1, true));
  array xe = mx::expand_dims(x, {-2, -3});  // [M, 1, 1, din]
  array idx = mx::stop_gradient(inds);
  std::optional<array> inverse;
  const bool sort = M * K >= 64;
  if (sort) {
    array flat = mx::flatten(idx);
    array order = mx::argsort(flat);
    inverse = mx::argsort(order);
    xe = mx::take(mx::flatten(xe, 0, -3), mx::floor_divide(order, array(uint32_t(K), order.dtype())), 0);
    idx = mx::take(flat, order, 0);
  }
  auto qmm = [&](const array& a, const array& w, const array& s, const array& b) {
    return mx::gather_qmm(a, w, s, b, std::nullopt, idx, true, m.gs, m.gu_bits, "affine", std::nullopt, sort);
  };
  array up = qmm(xe, m.wu, m.su, m.bu), gate = qmm(xe, m.wg, m.sg, m.bg);
  // mlx-lm compiles swiglu (shapeless) into one fused kernel; MLX's CPU compile would build it
  // with the system compiler at run time, so the CPU stream runs the same ops uncompiled.
  static auto swiglu_compiled = mx::compile(swiglu, true);
  array h = g_gpu ? swiglu_compiled({up, gate})[0] : swiglu({up, gate})[0];
  array y = mx::gather_qmm(h, m.wd, m.sd, m.bd, std::nullopt, idx, true, m.gs, m.d_bits, "affine", std::nullopt, sort);
  if (sort) y = mx::reshape(mx::take(y, *inverse, 0), {M, K, 1, m.din});
  y = mx::squeeze(y, -2);  // [M, K, din]
  return {mx::sum(mx::multiply(y, mx::expand_dims(scores, -1)), -2, false), inds};
}

// The whole block through moe_block_kernel(), or moe_block_quantized_router_kernel() with
// m.router_q: one primitive, [M, din] of T.
static array block_kernel(const Gated& m, const array& x, int norm = 1) {
  const int M = x.shape(0);
  TemplateArgs ta = {{"T", m.t},         {"K", m.K},   {"bits", m.gu_bits}, {"group_size", m.gs},
                     {"act", m.act},     {"norm_topk_prob", norm}};
  if (m.router_q) {
    const auto& r = *m.router_q;
    ta.push_back({"router_bits", m.router_bits});
    ta.push_back({"router_group_size", m.router_gs});
    return shim::moe_block_quantized_router_kernel()(
        {x, r[0], r[1], r[2], m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd}, {Shape{M, m.din}}, {m.t}, kAnyGrid,
        kAnyGrid, ta, std::nullopt, false, {})[0];
  }
  return shim::moe_block_kernel()({x, m.router_w, m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd},
                                  {Shape{M, m.din}}, {m.t}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {})[0];
}

// Ours: the whole block in one primitive (moe_block_kernel); its ids are the router kernel's,
// which the block runs first on the same inputs.
static Block block_ours(const Gated& m, const array& x) {
  return {block_kernel(m, x), router_shim(x, m.router_w, m.K, 1)[0]};
}

// Ours per token: the router kernel, then per token the gate/up and down kernels as run_fused_moe_two_kernel
// calls them (they take one token), then one sum over k of every token's [K, din] f32 parts,
// rounded to T. `score_factor` [M, K] multiplies the router's scores (the negative control).
static Block block_per_token(const Gated& m, const array& x,
                             const std::optional<array>& score_factor = std::nullopt) {
  const int M = x.shape(0), K = m.K;
  auto r = router_shim(x, m.router_w, K, 1);
  array scores = score_factor ? mx::multiply(r[1], *score_factor) : r[1];
  std::vector<array> parts;
  for (int t = 0; t < M; ++t) {
    Gated g = m;
    g.x = mx::slice(x, {t, 0}, {t + 1, m.din});
    parts.push_back(
        gated_two_kernels(g, mx::slice(r[0], {t, 0}, {t + 1, K}), mx::slice(scores, {t, 0}, {t + 1, K}))[1]);
  }
  array all = M == 1 ? parts[0] : mx::concatenate(parts, 0);  // [M * K, din] f32
  return {mx::astype(mx::sum(mx::reshape(all, {M, K, m.din}), 1, false), m.t), r[0]};
}

// The default device for one scope, then the one before.
struct DefaultDevice {
  mx::Device before = mx::default_device();
  explicit DefaultDevice(mx::Device d) { mx::set_default_device(d); }
  ~DefaultDevice() { mx::set_default_device(before); }
};

// The dense f32 reference: f32 logits and softmax, a sorted top-k, renormalized, then per token
// gated_dense_f32 (dequantized weights, every step in f32). [M, din] f32. On the CPU stream:
// MLX's CUDA matmul of f32 arrays rounds them to TF32, which moves a quantized router's logits
// (its dequantized values are not bf16) by enough to fail the contract on an H200.
static array block_dense_f32(const Gated& m, const array& x) {
  DefaultDevice on_cpu(mx::Device::cpu);
  const int M = x.shape(0), K = m.K;
  auto f = [](const array& a) { return mx::astype(a, mx::float32); };
  auto probs = mx::softmax(mx::matmul(f(x), mx::transpose(f(m.router_w))), std::vector<int>{-1}, true);
  auto ids = mx::slice(mx::argsort(mx::negative(probs), -1), {0, 0}, {M, K});
  auto scores = mx::take_along_axis(probs, ids, -1);
  scores = mx::divide(scores, mx::sum(scores, -1, true));
  std::vector<array> rows;
  for (int t = 0; t < M; ++t) {
    Gated g = m;
    g.x = mx::slice(x, {t, 0}, {t + 1, m.din});
    rows.push_back(mx::reshape(
        gated_dense_f32(g, mx::slice(ids, {t, 0}, {t + 1, K}), mx::slice(scores, {t, 0}, {t + 1, K})), {1, m.din}));
  }
  array dense = mx::concatenate(rows, 0);
  mx::eval(dense);
  return dense;
}

// A block's weights: the gated experts with one bit width for gate/up and down, SwiGLU, group 64.
static Gated make_block(int E, int K, int din, int dff, int bits) {
  return make_gated(mx::bfloat16, E, K, din, dff, bits, bits, 64, 0);
}

// Inputs x [M, din] without near ties in top-k: for every token the K-th and (K+1)-th largest
// logits (over the unrounded x and the bf16 W_r, in f64) are at least 0.1 apart, beyond the bf16
// rounding of x and of the graph's logits (|logit| < 8 here), so that every path must choose the
// same experts.
static array untied_input(const Gated& m, int M, uint64_t seed) {
  std::vector<float> wr = floats_of(m.router_w);
  for (uint64_t s = seed; s < seed + 1000; ++s) {
    std::vector<float> xv = values(size_t(M) * m.din, s);
    bool untied = true;
    for (int t = 0; t < M && untied; ++t) {
      std::vector<double> logit(m.E);
      for (int e = 0; e < m.E; ++e) {
        double acc = 0;
        for (int i = 0; i < m.din; ++i) acc += double(xv[size_t(t) * m.din + i]) * wr[size_t(e) * m.din + i];
        logit[e] = acc;
      }
      std::sort(logit.begin(), logit.end(), std::greater<double>());
      untied = std::max(logit[0], -logit[m.E - 1]) < 8 && (m.K == m.E || logit[m.K - 1] - logit[m.K] >= 0.1);
    }
    if (untied) return make(xv, {M, m.din}, m.t);
  }
  throw std::runtime_error("no input without near ties in top-k among 1000 seeds");
}

// Each token's ids as a sorted list: the set of experts it chose.
static std::vector<uint32_t> expert_sets(const array& ids) {
  std::vector<uint32_t> v(ids.size());
  Bytes b = bytes_of(mx::astype(ids, mx::uint32));
  std::memcpy(v.data(), b.data(), b.size());
  const size_t k = size_t(ids.shape(-1));
  for (size_t t = 0; t < v.size(); t += k) std::sort(v.begin() + t, v.begin() + t + k);
  return v;
}

// The block through the C ABI called directly (mlxcel_amdgpu_moe_block, or with m.router_q
// mlxcel_amdgpu_moe_block_quantized_router), SwiGLU, renormalized: the output's bytes.
static Bytes block_abi(const Gated& m, const array& x, const std::string& name) {
  const int M = x.shape(0);
  Device d;
  MlxcelAmdgpuMoeShape s{uint32_t(m.E),   uint32_t(m.K),       uint32_t(m.din),
                         uint32_t(m.dff), uint32_t(m.gu_bits), uint32_t(m.gs)};
  size_t scratch_bytes = 0;
  abi_ok(mlxcel_amdgpu_moe_block_scratch_bytes(s, uint32_t(M), &scratch_bytes), name + " scratch bytes");
  auto u32 = [&](const array& a) { return static_cast<const uint32_t*>(d.up(a)); };
  const size_t out_bytes = size_t(M) * m.din * mx::size_of(m.t);
  void *dout = d.alloc(out_bytes), *scratch = d.alloc(scratch_bytes);
  if (m.router_q) {
    const auto& r = *m.router_q;
    abi_ok(mlxcel_amdgpu_moe_block_quantized_router(
               abi(m.t), s, uint32_t(M), uint32_t(m.router_bits), uint32_t(m.router_gs), 0, 1, d.up(x), u32(r[0]),
               d.up(r[1]), d.up(r[2]), u32(m.wg), d.up(m.sg), d.up(m.bg), u32(m.wu), d.up(m.su), d.up(m.bu),
               u32(m.wd), d.up(m.sd), d.up(m.bd), dout, scratch, scratch_bytes, nullptr, nullptr),
           name + " block");
  } else {
    abi_ok(mlxcel_amdgpu_moe_block(abi(m.t), s, uint32_t(M), 0, 1, d.up(x), d.up(m.router_w), u32(m.wg), d.up(m.sg),
                                   d.up(m.bg), u32(m.wu), d.up(m.su), d.up(m.bu), u32(m.wd), d.up(m.sd), d.up(m.bd),
                                   dout, scratch, scratch_bytes, nullptr, nullptr),
           name + " block");
  }
  return d.down(dout, out_bytes);
}

static void test_block() {
  struct Case {
    int E, K, M, din, dff, bits;
  };
  // M 8 with K 8 takes SwitchGLU's sorted path (M * K >= 64).
  const Case cases[] = {
      {16, 8, 2, 256, 128, 4}, {16, 8, 8, 256, 128, 8}, {16, 4, 8, 256, 128, 4}, {16, 4, 2, 256, 128, 8}};
  for (const auto& c : cases) {
    std::string name = "Qwen3 MoE block bf16 E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) +
                       " M=" + std::to_string(c.M) + " " + std::to_string(c.din) + "x" + std::to_string(c.dff) +
                       " " + std::to_string(c.bits) + "-bit";
    Gated m = make_block(c.E, c.K, c.din, c.dff, c.bits);
    // A wider spread of logits than make_gated's, so that untied inputs are common.
    m.router_w = make(values(size_t(c.E) * c.din, 25, 0.3f), {c.E, c.din}, m.t);
    ok(shim::moe_router_supports(m.t, c.M, c.E, c.K, c.din) &&
           shim::moe_gated_supports(m.t, c.E, c.K, c.din, c.dff, c.bits, c.bits, m.gs),
       name + ": supported");
    array x = untied_input(m, c.M, 200);
    ok(shim::moe_block_supports(m.t, c.M, c.E, c.K, c.din, c.dff, c.bits, m.gs), name + ": block supported");
    Block ours = block_ours(m, x), graph = block_graph(m, x);
    ok(expert_sets(ours.ids) == expert_sets(graph.ids), name + ": our router and the graph chose other experts");
    auto dense = floats_of(mx::astype(block_dense_f32(m, x), m.t));
    auto got = floats_of(ours.out), theirs = floats_of(graph.out);
    close(name + " ours vs dense f32", got, dense, 5e-4, 2e-2);
    close(name + " ours per token vs dense f32", floats_of(block_per_token(m, x).out), dense, 5e-4, 2e-2);

    // moe_block_kernel against the C ABI called directly on the same inputs, bit for bit.
    same_bytes(name + " moe_block_kernel vs the C ABI", bytes_of(ours.out), block_abi(m, x, name), 2);
    // Negative control: scores left unnormalized (norm_topk_prob 0) fail the contract.
    Deviation unnormalized = deviation(floats_of(block_kernel(m, x, 0)), dense);
    ok(!(unnormalized.nrms < 5e-4 && unnormalized.nmax < 2e-2), name + ": norm_topk_prob 0 went unnoticed");
    // As in test_gated_moe: MLX's graph rounds the scores, g, u, the activation and each expert's
    // output to bf16, so it is itself a little off the dense reference (but must not be far);
    // ours must be no farther from it than 1.5 times that distance.
    double graph_err = nrms_of(theirs, dense);
    std::cout << "  " << name << ": MLX's graph vs dense f32: nRMS " << graph_err << std::endl;
    // Its bf16 roundings put it 3-5% off; experts, sort or unsort wrong would put it near 100%.
    ok(graph_err < 0.1, name + ": MLX's graph is far from the dense reference");
    close(name + " ours vs MLX's graph", got, theirs, std::max(5e-4, 1.5 * graph_err), 2e-1);
    // Negative control: one score of the first token 10% off fails the contract.
    std::vector<float> factor(size_t(c.M) * c.K, 1.0f);
    factor[0] = 1.1f;
    Deviation bad = deviation(floats_of(block_per_token(m, x, array(factor.data(), {c.M, c.K}, mx::float32)).out), dense);
    ok(!(bad.nrms < 5e-4 && bad.nmax < 2e-2), name + ": a perturbed score went unnoticed");
  }
}

// Quantizes the block's router as mlx-lm quantizes mlp.gate; router_w becomes the values the
// kernels compute from it (codes times scale plus bias, in f32), of dtype `as`.
static void quantize_router(Gated& m, int bits, int gs, mx::Dtype as) {
  m.router_q = mx::quantize(m.router_w, gs, bits);
  m.router_bits = bits;
  m.router_gs = gs;
  const auto& r = *m.router_q;
  auto f32 = [](const array& a) { return mx::astype(a, mx::float32); };
  m.router_w = mx::astype(mx::dequantize(r[0], f32(r[1]), f32(r[2]), gs, bits), as);
  mx::eval(r[0], r[1], r[2], m.router_w);
}

// The block with its router quantized (mlx-lm's 8 bits, group 64, and 4 bits, group 32): within
// the contract of the dense f32 reference over the dequantized router, near mlx-lm's graph with
// the gate's quantized_matmul, and bit for bit the C ABI.
static void test_block_quantized_router() {
  struct Case {
    int E, K, M, din, dff, bits, router_bits, router_gs;
  };
  const Case cases[] = {{16, 8, 1, 256, 128, 4, 8, 64}, {16, 8, 8, 256, 128, 4, 8, 64}, {16, 4, 3, 256, 128, 8, 4, 32}};
  for (const auto& c : cases) {
    std::string name = "Qwen3 MoE block bf16, " + std::to_string(c.router_bits) + "-bit router (group " +
                       std::to_string(c.router_gs) + "), E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) +
                       " M=" + std::to_string(c.M) + " " + std::to_string(c.bits) + "-bit experts";
    Gated m = make_block(c.E, c.K, c.din, c.dff, c.bits);
    m.router_w = make(values(size_t(c.E) * c.din, 25, 0.3f), {c.E, c.din}, m.t);
    quantize_router(m, c.router_bits, c.router_gs, mx::float32);
    ok(shim::moe_block_quantized_router_supports(m.t, c.M, c.E, c.K, c.din, c.dff, c.bits, m.gs, c.router_bits,
                                                 c.router_gs),
       name + ": supported");
    array x = untied_input(m, c.M, 300);
    array ours = block_kernel(m, x);
    Block graph = block_graph(m, x);
    auto dense = floats_of(mx::astype(block_dense_f32(m, x), m.t));
    auto got = floats_of(ours), theirs = floats_of(graph.out);
    close(name + " ours vs dense f32", got, dense, 5e-4, 2e-2);
    // The graph's bf16 logits from quantized_matmul put it a little farther off than test_block's
    // graph, in nMAX too: ours must be no farther from it than 1.5 times its own distance.
    Deviation graph_err = deviation(theirs, dense);
    std::cout << "  " << name << ": MLX's graph vs dense f32: nRMS " << graph_err.nrms << ", nMAX " << graph_err.nmax
              << std::endl;
    ok(graph_err.nrms < 0.1, name + ": MLX's graph is far from the dense reference");
    close(name + " ours vs MLX's graph", got, theirs, std::max(5e-4, 1.5 * graph_err.nrms),
          std::max(2e-1, 1.5 * graph_err.nmax));
    // Negative control: the kernel given another router's codes (W_r negated) fails the contract.
    Gated other = m;
    other.router_q = mx::quantize(mx::astype(mx::negative(m.router_w), m.t), c.router_gs, c.router_bits);
    Deviation wrong = deviation(floats_of(block_kernel(other, x)), dense);
    ok(!(wrong.nrms < 5e-4 && wrong.nmax < 2e-2), name + ": another router's codes went unnoticed");

    same_bytes(name + " moe_block_quantized_router_kernel vs the C ABI", bytes_of(ours), block_abi(m, x, name), 2);
  }
}

// Qwen3-Next's shared expert: a gated expert of the routed experts' format
// {gate, up [dff, din], down [din, dff], each {codes, scales, biases}} and its
// gate row W_sg [1, din] of T, or quantized as the router is (then W_sg holds
// the dequantized values in f32).
struct SharedExpert {
  std::vector<array> gate, up, down;
  array w_sg;
  std::optional<std::vector<array>> w_sg_q = std::nullopt;
};

static SharedExpert make_shared(const Gated& m, uint32_t seed) {
  auto q = [&](int rows, int cols, uint32_t s) {
    return mx::quantize(make(values(size_t(rows) * cols, s, 0.05f), {rows, cols}, m.t), m.gs, m.gu_bits);
  };
  SharedExpert e{q(m.dff, m.din, seed), q(m.dff, m.din, seed + 1), q(m.din, m.dff, seed + 2),
                 make(values(m.din, seed + 3, 0.3f), {1, m.din}, m.t)};
  if (m.router_q) {
    e.w_sg_q = mx::quantize(e.w_sg, m.router_gs, m.router_bits);
    auto f32 = [](const array& a) { return mx::astype(a, mx::float32); };
    const auto& r = *e.w_sg_q;
    // The values the kernels compute from the codes, kept in f32 for the dense reference.
    e.w_sg = mx::dequantize(r[0], f32(r[1]), f32(r[2]), m.router_gs, m.router_bits);
  }
  return e;
}

// The block with its shared expert through moe_block_shared_expert_kernel(), or
// moe_block_shared_expert_quantized_router_kernel() with m.router_q: [M, din] of T.
static array block_shared_kernel(const Gated& m, const SharedExpert& e, const array& x) {
  const int M = x.shape(0);
  TemplateArgs ta = {{"T", m.t},     {"K", m.K},   {"bits", m.gu_bits}, {"group_size", m.gs},
                     {"act", m.act}, {"norm_topk_prob", 1}};
  std::vector<array> in{x};
  if (m.router_q) {
    ta.push_back({"router_bits", m.router_bits});
    ta.push_back({"router_group_size", m.router_gs});
    for (const auto& a : *m.router_q) in.push_back(a);
    for (const auto& a : *e.w_sg_q) in.push_back(a);
  } else {
    in.push_back(m.router_w);
    in.push_back(e.w_sg);
  }
  for (const auto& a : {m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd}) in.push_back(a);
  for (const auto* w : {&e.gate, &e.up, &e.down})
    for (const auto& a : *w) in.push_back(a);
  auto& kernel = m.router_q ? shim::moe_block_shared_expert_quantized_router_kernel()
                            : shim::moe_block_shared_expert_kernel();
  return kernel(in, {Shape{M, m.din}}, {m.t}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {})[0];
}

// mlx-lm's Qwen3NextSparseMoeBlock: the routed block's graph plus sigmoid(x . W_sg) times the shared
// expert's quantized_matmul SwiGLU, every step in T as the model runs it.
static array block_shared_graph(const Gated& m, const SharedExpert& e, const array& x) {
  auto qmm = [&](const array& a, const std::vector<array>& w) {
    return mx::quantized_matmul(a, w[0], w[1], w[2], true, m.gs, m.gu_bits);
  };
  array g = qmm(x, e.gate), u = qmm(x, e.up);
  array shared = qmm(mx::multiply(mx::multiply(g, mx::sigmoid(g)), u), e.down);
  array gate = e.w_sg_q ? mx::quantized_matmul(x, (*e.w_sg_q)[0], (*e.w_sg_q)[1], (*e.w_sg_q)[2], true, m.router_gs,
                                               m.router_bits)
                        : mx::matmul(x, mx::transpose(e.w_sg));
  return mx::add(block_graph(m, x).out, mx::multiply(mx::sigmoid(gate), shared));
}

// The dense f32 reference: block_dense_f32's routed part plus sigmoid(x . W_sg) times the shared
// expert over its dequantized weights, every step in f32 on the CPU stream.
static array block_shared_dense_f32(const Gated& m, const SharedExpert& e, const array& x) {
  array routed = block_dense_f32(m, x);
  DefaultDevice on_cpu(mx::Device::cpu);
  auto f32 = [](const array& a) { return mx::astype(a, mx::float32); };
  auto deq = [&](const std::vector<array>& w) { return mx::dequantize(w[0], f32(w[1]), f32(w[2]), m.gs, m.gu_bits); };
  array xf = f32(x);
  array g = mx::matmul(xf, mx::transpose(deq(e.gate))), u = mx::matmul(xf, mx::transpose(deq(e.up)));
  array shared = mx::matmul(mx::multiply(mx::multiply(g, mx::sigmoid(g)), u), mx::transpose(deq(e.down)));
  array gate = mx::sigmoid(mx::matmul(xf, mx::transpose(f32(e.w_sg))));  // [M, 1]
  array out = mx::add(routed, mx::multiply(gate, shared));
  mx::eval(out);
  return out;
}

// The shared-expert block through the C ABI called directly: the output's bytes.
static Bytes block_shared_abi(const Gated& m, const SharedExpert& e, const array& x, const std::string& name) {
  const int M = x.shape(0);
  Device d;
  MlxcelAmdgpuMoeShape s{uint32_t(m.E),   uint32_t(m.K),       uint32_t(m.din),
                         uint32_t(m.dff), uint32_t(m.gu_bits), uint32_t(m.gs)};
  size_t scratch_bytes = 0;
  abi_ok(mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(s, uint32_t(M), &scratch_bytes), name + " scratch bytes");
  auto matrix = [&](const array& w, const array& sc, const array& b) {
    return MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(d.up(w)), d.up(sc), d.up(b)};
  };
  auto of = [&](const std::vector<array>& w) { return matrix(w[0], w[1], w[2]); };
  auto dense = [&](const array& w) { return MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(d.up(w)), nullptr, nullptr}; };
  const size_t out_bytes = size_t(M) * m.din * mx::size_of(m.t);
  void *dout = d.alloc(out_bytes), *scratch = d.alloc(scratch_bytes);
  MlxcelAmdgpuQuantized router = m.router_q ? of(*m.router_q) : dense(m.router_w);
  MlxcelAmdgpuQuantized gate_row = e.w_sg_q ? of(*e.w_sg_q) : dense(e.w_sg);
  abi_ok(mlxcel_amdgpu_moe_block_shared_expert(
             abi(m.t), s, uint32_t(M), uint32_t(m.router_bits), uint32_t(m.router_gs), uint32_t(m.act), 1, d.up(x),
             router, gate_row, matrix(m.wg, m.sg, m.bg), matrix(m.wu, m.su, m.bu), matrix(m.wd, m.sd, m.bd),
             of(e.gate), of(e.up), of(e.down), dout, scratch, scratch_bytes, nullptr, nullptr),
         name + " block");
  return d.down(dout, out_bytes);
}

// The block with Qwen3-Next's shared expert, dense or 8-bit router and gate row: within the
// contract of the dense f32 reference, near mlx-lm's graph, bit for bit the C ABI, and a negative
// control (the gate row negated).
static void test_block_shared_expert() {
  struct Case {
    int E, K, M, din, dff, bits, router_bits;
  };
  const Case cases[] = {{32, 10, 1, 256, 128, 4, 0}, {32, 10, 4, 256, 128, 4, 8}, {32, 10, 8, 256, 128, 8, 8}};
  for (const auto& c : cases) {
    std::string name = "Qwen3-Next block bf16, shared expert, " +
                       (c.router_bits ? std::to_string(c.router_bits) + "-bit router and gate row" : "bf16 router") +
                       ", E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) + " M=" + std::to_string(c.M) + " " +
                       std::to_string(c.bits) + "-bit experts";
    Gated m = make_block(c.E, c.K, c.din, c.dff, c.bits);
    m.router_w = make(values(size_t(c.E) * c.din, 25, 0.3f), {c.E, c.din}, m.t);
    if (c.router_bits) quantize_router(m, c.router_bits, 64, mx::float32);
    SharedExpert e = make_shared(m, 700);
    ok(shim::moe_block_shared_expert_supports(m.t, c.M, c.E, c.K, c.din, c.dff, c.bits, m.gs, c.router_bits,
                                              c.router_bits ? 64 : 0),
       name + ": supported");
    array x = untied_input(m, c.M, 400);
    auto got = floats_of(block_shared_kernel(m, e, x));
    auto dense = floats_of(mx::astype(block_shared_dense_f32(m, e, x), m.t));
    auto theirs = floats_of(block_shared_graph(m, e, x));
    close(name + " ours vs dense f32", got, dense, 5e-4, 2e-2);
    Deviation graph_err = deviation(theirs, dense);
    std::cout << "  " << name << ": MLX's graph vs dense f32: nRMS " << graph_err.nrms << ", nMAX " << graph_err.nmax
              << std::endl;
    ok(graph_err.nrms < 0.1, name + ": MLX's graph is far from the dense reference");
    close(name + " ours vs MLX's graph", got, theirs, std::max(5e-4, 1.5 * graph_err.nrms),
          std::max(2e-1, 1.5 * graph_err.nmax));
    same_bytes(name + " moe_block_shared_expert kernel vs the C ABI", bytes_of(block_shared_kernel(m, e, x)),
               block_shared_abi(m, e, x, name), 2);
    // Negative control: the gate row negated (sigmoid(-s) for sigmoid(s)) fails the contract.
    SharedExpert flipped = e;
    flipped.w_sg = mx::negative(e.w_sg);
    if (e.w_sg_q) flipped.w_sg_q = mx::quantize(mx::astype(flipped.w_sg, m.t), m.router_gs, m.router_bits);
    Deviation wrong = deviation(floats_of(block_shared_kernel(m, flipped, x)), dense);
    ok(!(wrong.nrms < 5e-4 && wrong.nmax < 2e-2), name + ": a negated gate row went unnoticed");
  }
}

static void test_moe() {
  struct Case {
    mx::Dtype t;
    int E, K, din, dff, bits, gs;
  };
  const Case cases[] = {{mx::bfloat16, 8, 4, 512, 384, 4, 64},
                        {mx::bfloat16, 8, 6, 256, 192, 8, 32},
                        {mx::float16, 4, 2, 256, 128, 4, 128},
                        {mx::float32, 4, 3, 128, 256, 8, 64}};
  for (const auto& c : cases) {
    std::string name = std::string("moe ") + dname(c.t) + " E=" + std::to_string(c.E) + " K=" + std::to_string(c.K) +
                       " " + std::to_string(c.din) + "x" + std::to_string(c.dff) + " bits=" + std::to_string(c.bits) +
                       " gs=" + std::to_string(c.gs);
    Moe m = make_moe(c.t, c.E, c.K, c.din, c.dff, c.bits, c.gs);
    auto [idx, scores] = router(m);
    mx::eval(idx, scores);
    auto two = routed_two_kernels(m, idx, scores);
    array one = routed_one_kernel(m, idx, scores);

    // The C ABI on the same inputs.
    Device d;
    MlxcelAmdgpuMoeShape s{uint32_t(c.E), uint32_t(c.K), uint32_t(c.din), uint32_t(c.dff), uint32_t(c.bits),
                           uint32_t(c.gs)};
    auto T = c.t;
    void* x = d.up(mx::reshape(m.x, {c.din}));
    auto* id = static_cast<const uint32_t*>(d.up(mx::astype(mx::reshape(idx, {c.K}), mx::uint32)));
    auto* sc = static_cast<const float*>(d.up(mx::astype(mx::reshape(scores, {c.K}), mx::float32)));
    auto* w1 = static_cast<const uint32_t*>(d.up(m.w1));
    auto* w2 = static_cast<const uint32_t*>(d.up(m.w2));
    void *s1 = d.up(m.s1), *b1 = d.up(m.b1), *s2 = d.up(m.s2), *b2 = d.up(m.b2);
    size_t act_bytes = size_t(c.K) * c.dff * 4, part_bytes = size_t(c.K) * c.din * 4;
    auto* act = static_cast<float*>(d.alloc(act_bytes));
    auto* part = static_cast<float*>(d.alloc(part_bytes));
    abi_ok(mlxcel_amdgpu_moe_fc1_relu2(abi(T), s, x, id, w1, s1, b1, act, nullptr, nullptr), name + " fc1");
    abi_ok(mlxcel_amdgpu_moe_down(abi(T), s, id, w2, s2, b2, act, sc, part, nullptr, nullptr), name + " down");
    size_t out_bytes = size_t(c.din) * mx::size_of(T), scratch = 0;
    abi_ok(mlxcel_amdgpu_moe_scratch_bytes(c.K, c.din, c.dff, &scratch), name + " scratch bytes");
    void* out = d.alloc(out_bytes);
    abi_ok(mlxcel_amdgpu_moe_routed_forward(abi(T), s, x, id, sc, w1, s1, b1, w2, s2, b2, out, d.alloc(scratch),
                                            scratch, nullptr, nullptr),
           name + " routed");
    same_bytes(name + " fc1 act vs the C ABI", bytes_of(two[0]), d.down(act, act_bytes), 4);
    same_bytes(name + " down part vs the C ABI", bytes_of(two[1]), d.down(part, part_bytes), 4);
    same_bytes(name + " routed forward vs the C ABI", bytes_of(one), d.down(out, out_bytes), mx::size_of(T));

    // Within the contract of the dense f32 reference: both our spellings
    // (two kernels + MLX's sum, and the one-primitive forward).
    // The contract's oracle rounds the f32 result to T once.
    auto dense = floats_of(mx::astype(routed_dense_f32(m, idx, scores), T));
    close(name + " two kernels vs dense f32", floats_of(two[2]), dense, 5e-4, 2e-2);
    close(name + " routed forward vs dense f32", floats_of(one), dense, 5e-4, 2e-2);

    // Negative control: routing to other experts is far outside the contract.
    {
      auto wrong = mx::remainder(mx::add(idx, array(1u, mx::uint32)), array(uint32_t(c.E), mx::uint32));
      auto got = floats_of(routed_one_kernel(m, wrong, scores));
      double d2 = 0, r2 = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        d2 += (got[i] - dense[i]) * double(got[i] - dense[i]);
        r2 += dense[i] * double(dense[i]);
      }
      ok(std::sqrt(d2 / r2) > 0.1, name + ": routing to the wrong experts went unnoticed");
    }
    // The whole block against the unfused MLX graph (gather_qmm experts,
    // which round their intermediates to T): the residual add on top.
    array residual = make(values(c.din, 16), {1, c.din}, T);
    array ours = mx::add(two[2], residual), theirs = mx::add(routed_gather_qmm(m, idx, scores), residual);
    double tol = T == mx::float32 ? 1e-4 : T == mx::float16 ? 5e-3 : 2e-2;
    close(name + " block vs MLX's gather_qmm graph", floats_of(ours), floats_of(theirs), tol, tol * 10);
  }
}

// ---- wrong arguments raise --------------------------------------------------

static void test_refusals() {
  auto bf = mx::bfloat16;
  array x = make(values(64, 1), {64}, bf);
  auto xi = [&](std::vector<array> in, std::vector<Shape> shapes, std::vector<mx::Dtype> dt, TemplateArgs ta,
                std::optional<float> init = std::nullopt) {
    return [=] { shim::xielu_kernel()(in, shapes, dt, kAnyGrid, kAnyGrid, ta, init, false, {}); };
  };
  std::vector<array> sc = {f32_scalar(0.8f), f32_scalar(0.6f), f32_scalar(0.5f), f32_scalar(-1e-6f)};
  auto with = [&](array first) {
    std::vector<array> v = {first};
    v.insert(v.end(), sc.begin(), sc.end());
    return v;
  };
  raises("xielu int32 T", "'T' must be float32, float16 or bfloat16",
         xi(with(mx::astype(x, mx::int32)), {{64}}, {mx::int32}, {{"T", mx::int32}}));
  raises("xielu x not of T", "input 'x' must be bfloat16", xi(with(mx::astype(x, mx::float32)), {{64}}, {bf}, {{"T", bf}}));
  raises("xielu output shape", "output 0 must have shape [64]", xi(with(x), {{32}}, {bf}, {{"T", bf}}));
  raises("xielu output dtype", "output 0 must be bfloat16", xi(with(x), {{64}}, {mx::float16}, {{"T", bf}}));
  raises("xielu unknown template arg", "unexpected template argument 'U'", xi(with(x), {{64}}, {bf}, {{"T", bf}, {"U", 1}}));
  raises("xielu wrong n", "'n' = 63", xi(with(x), {{64}}, {bf}, {{"T", bf}, {"n", 63}}));
  raises("xielu missing T", "missing template argument 'T'", xi(with(x), {{64}}, {bf}, {}));
  raises("xielu four inputs", "expects 5 inputs", xi({x, sc[0], sc[1], sc[2]}, {{64}}, {bf}, {{"T", bf}}));
  raises("xielu init_value", "init_value", xi(with(x), {{64}}, {bf}, {{"T", bf}}, 0.0f));
  raises("xielu 2-D x", "input 'x' must be flat", xi(with(mx::reshape(x, {8, 8})), {{8, 8}}, {bf}, {{"T", bf}}));
  raises("xielu NaN alpha_p", "'alpha_p' must be finite",
         xi({x, f32_scalar(NAN), sc[1], sc[2], sc[3]}, {{64}}, {bf}, {{"T", bf}}));
  raises("xielu f16 scalar", "input 'beta' must be a [1] float32 array",
         xi({x, sc[0], sc[1], mx::full({1}, 0.5f, mx::float16), sc[3]}, {{64}}, {bf}, {{"T", bf}}));

  auto a = make(values(2 * 6657, 1), {2, 6657}, bf);
  auto w = make(values(6657, 2), {6657}, bf);
  auto add3 = [&](std::vector<array> in, Shape s, TemplateArgs ta) {
    return [=] {
      shim::add3_layer_norm_kernel()(in, {s, s}, {bf, bf}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
    };
  };
  auto z = mx::zeros({1}, bf);
  auto e = f32_scalar(1e-5f);
  raises("add3 D too long", "shape not supported: D = 6657",
         add3({a, a, a, w, z, e}, {2, 6657}, {{"T", bf}, {"D", 6657}, {"W_STRIDE", 1}, {"B_STRIDE", 0}}));
  auto a2 = make(values(2 * 64, 1), {2, 64}, bf);
  auto w2 = make(values(64, 2), {64}, bf);
  raises("add3 w shape", "input 'w' must have shape [64]",
         add3({a2, a2, a2, w, z, e}, {2, 64}, {{"T", bf}, {"D", 64}, {"W_STRIDE", 1}, {"B_STRIDE", 0}}));
  raises("add3 missing B_STRIDE", "missing template argument 'B_STRIDE'",
         add3({a2, a2, a2, w2, z, e}, {2, 64}, {{"T", bf}, {"D", 64}, {"W_STRIDE", 1}}));
  raises("add3 W_STRIDE 0", "'W_STRIDE' = 0",
         add3({a2, a2, a2, w2, z, e}, {2, 64}, {{"T", bf}, {"D", 64}, {"W_STRIDE", 0}, {"B_STRIDE", 0}}));
  raises("add3 rb shape", "input 'rb' must have shape [2, 64]",
         add3({a2, mx::reshape(a2, {128}), a2, w2, z, e}, {2, 64}, {{"T", bf}, {"D", 64}, {"W_STRIDE", 1}, {"B_STRIDE", 0}}));
  raises("add3 negative eps", "'eps' must not be negative",
         add3({a2, a2, a2, w2, z, f32_scalar(-1.0f)}, {2, 64}, {{"T", bf}, {"D", 64}, {"W_STRIDE", 1}, {"B_STRIDE", 0}}));

  auto mamba = [&](int N, mx::Dtype adt) {
    return [=] {
      int B = 1, L = 2, Dm = 8;
      auto X = mx::zeros({B, L, Dm}, bf), Bm = mx::zeros({B, L, N}, bf);
      shim::mamba1_scan_kernel()({X, X, Bm, Bm, mx::zeros({Dm, N}, adt), mx::zeros({Dm}, bf), mx::zeros({B, Dm, N})},
                                 {Shape{B, L, Dm}, Shape{B, Dm, N}}, {bf, mx::float32}, kAnyGrid, kAnyGrid,
                                 {{"T", bf}, {"N", N}, {"Dm", Dm}}, std::nullopt, false, {});
    };
  };
  raises("mamba1_scan N=33", "shape not supported", mamba(33, mx::float32));
  raises("mamba1_scan bf16 A", "input 'A' must be float32", mamba(16, bf));

  Moe m = make_moe(bf, 4, 2, 128, 128, 4, 64);
  auto idx = mx::array({0u, 3u}, mx::uint32);
  auto fc1 = [&](array indices, int bits) {
    return [=] {
      TemplateArgs ta = {{"T", bf}, {"K", 2}, {"Din", 128}, {"Dff", 128}, {"bits", bits}, {"group_size", 64}};
      shim::moe_fc1_relu2_kernel()({mx::reshape(m.x, {128}), indices, m.w1, m.s1, m.b1}, {Shape{2, 128}},
                                   {mx::float32}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
    };
  };
  raises("moe 6-bit", "shape not supported: bits 6", fc1(idx, 6));
  raises("moe int32 indices", "input 'indices' must be uint32", fc1(mx::astype(idx, mx::int32), 4));
  raises("moe down scores shape", "input 'scores' must hold 2 elements", [&] {
    TemplateArgs ta = {{"T", bf}, {"K", 2}, {"Din", 128}, {"Dff", 128}, {"bits", 4}, {"group_size", 64}};
    shim::moe_down_kernel()({idx, m.w2, m.s2, m.b2, mx::zeros({2, 128}), mx::zeros({3})}, {Shape{2, 128}},
                            {mx::float32}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
  });

  raises("moe_gateup act 2", "template argument 'act' = 2", [&] {
    TemplateArgs ta = {{"T", bf},       {"K", 2},           {"Din", 128}, {"Dff", 128},
                       {"bits", 4}, {"group_size", 64}, {"act", 2}};
    shim::moe_gateup_kernel()({m.x, idx, m.w1, m.s1, m.b1, m.w1, m.s1, m.b1}, {Shape{2, 128}}, {mx::float32},
                              kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
  });
  raises("moe_gateup without act", "missing template argument 'act'", [&] {
    TemplateArgs ta = {{"T", bf}, {"K", 2}, {"Din", 128}, {"Dff", 128}, {"bits", 4}, {"group_size", 64}};
    shim::moe_gateup_kernel()({m.x, idx, m.w1, m.s1, m.b1, m.w1, m.s1, m.b1}, {Shape{2, 128}}, {mx::float32},
                              kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
  });
  raises("moe_down 5-bit", "shape not supported: bits 5 (4, 6 or 8)", [&] {
    TemplateArgs ta = {{"T", bf}, {"K", 2}, {"Din", 128}, {"Dff", 128}, {"bits", 5}, {"group_size", 64}};
    shim::moe_down_kernel()({idx, m.w2, m.s2, m.b2, mx::zeros({2, 128}), mx::zeros({2})}, {Shape{2, 128}},
                            {mx::float32}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
  });

  {
    // moe_block_kernel: each refusal names what was wrong, before anything is launched.
    Gated g = make_block(16, 4, 128, 64, 4);
    array x = make(values(2 * 128, 3), {2, 128}, bf);
    auto block = [&](const array& xs, const array& wr, TemplateArgs ta) {
      return [=] {
        shim::moe_block_kernel()({xs, wr, g.wg, g.sg, g.bg, g.wu, g.su, g.bu, g.wd, g.sd, g.bd},
                                 {Shape{xs.shape(0), 128}}, {bf}, kAnyGrid, kAnyGrid, ta, std::nullopt, false, {});
      };
    };
    auto args = [&](int K, int bits, int act) {
      return TemplateArgs{{"T", bf}, {"K", K}, {"bits", bits}, {"group_size", 64}, {"act", act}, {"norm_topk_prob", 1}};
    };
    raises("moe_block K 17", "shape not supported: M 2 (1..8), K 17", block(x, g.router_w, args(17, 4, 0)));
    raises("moe_block 9 tokens", "shape not supported: M 9",
           block(make(values(9 * 128, 4), {9, 128}, bf), g.router_w, args(4, 4, 0)));
    raises("moe_block 6-bit", "bits 6 (4 or 8)", block(x, g.router_w, args(4, 6, 0)));
    raises("moe_block act 2", "template argument 'act' = 2 is not 0 (SwiGLU) or 1 (GeGLU)",
           block(x, g.router_w, args(4, 4, 2)));
    raises("moe_block without norm_topk_prob", "missing template argument 'norm_topk_prob'",
           block(x, g.router_w, {{"T", bf}, {"K", 4}, {"bits", 4}, {"group_size", 64}, {"act", 0}}));
    raises("moe_block W_r of another Din", "input 'W_r' must have shape [16, 128]",
           block(x, make(values(16 * 127, 5), {16, 127}, bf), args(4, 4, 0)));
    raises("moe_block 1-D W_r", "input 'W_r' must be [E, Din]",
           block(x, make(values(16 * 128, 5), {16 * 128}, bf), args(4, 4, 0)));
    ok(shim::moe_block_available() && shim::moe_block_available(bf) == mlxcel_amdgpu_moe_block_available(abi(bf)),
       "moe_block_available follows the C ABI");
    ok(shim::moe_block_supports(bf, 8, 128, 8, 2048, 768, 4, 64) && !shim::moe_block_supports(bf, 9, 128, 8, 2048, 768, 4, 64) &&
           !shim::moe_block_supports(bf, 1, 128, 17, 2048, 768, 4, 64) &&
           !shim::moe_block_supports(bf, 1, 128, 8, 2048, 768, 6, 64) &&
           !shim::moe_block_supports(bf, -1, 128, 8, 2048, 768, 4, 64) &&
           !shim::moe_block_supports(mx::int32, 1, 128, 8, 2048, 768, 4, 64),
       "moe_block_supports follows the block's limits");
  }
  {
    array x = make(values(2 * 64, 1), {2, 64}, bf), wr = make(values(32 * 64, 2), {32, 64}, bf);
    auto router = [&](const array& xs, const array& w, int K, int norm, mx::Dtype ids_dtype = mx::uint32) {
      return [=] {
        const int M = xs.shape(0);
        shim::moe_router_kernel()({xs, w}, {Shape{M, K}, Shape{M, K}}, {ids_dtype, mx::float32}, kAnyGrid, kAnyGrid,
                                  {{"T", bf}, {"K", K}, {"norm_topk_prob", norm}}, std::nullopt, false, {});
      };
    };
    raises("moe_router K 17", "shape not supported: M 2 (1..8), E 32 (1..1024), K 17 (1..16, at most E)",
           router(x, wr, 17, 1));
    raises("moe_router K above E", "K 33", router(x, wr, 33, 1));
    raises("moe_router 9 tokens", "shape not supported: M 9",
           router(make(values(9 * 64, 1), {9, 64}, bf), wr, 8, 1));
    raises("moe_router norm_topk_prob 2", "'norm_topk_prob' = 2 is not 0 or 1", router(x, wr, 8, 2));
    raises("moe_router W_r of another Din", "input 'W_r' must have shape [32, 64]",
           router(x, make(values(32 * 63, 2), {32, 63}, bf), 8, 1));
    raises("moe_router 1-D x", "input 'x' must be [M, Din]", [&] {
      shim::moe_router_kernel()({mx::reshape(x, {128}), wr}, {Shape{1, 8}, Shape{1, 8}}, {mx::uint32, mx::float32},
                                kAnyGrid, kAnyGrid, {{"T", bf}, {"K", 8}, {"norm_topk_prob", 1}}, std::nullopt, false,
                                {});
    });
    raises("moe_router int32 ids", "output 0 must be uint32", router(x, wr, 8, 1, mx::int32));
    raises("moe_router without norm_topk_prob", "missing template argument 'norm_topk_prob'", [&] {
      shim::moe_router_kernel()({x, wr}, {Shape{2, 8}, Shape{2, 8}}, {mx::uint32, mx::float32}, kAnyGrid, kAnyGrid,
                                {{"T", bf}, {"K", 8}}, std::nullopt, false, {});
    });
  }

  // The availability functions answer as the C ABI's predicates do.
  for (mx::Dtype t : {mx::float32, mx::float16, mx::bfloat16}) {
    ok(shim::xielu_available(t) == mlxcel_amdgpu_xielu_available(abi(t)) && shim::xielu_available(t),
       std::string("xielu_available ") + dname(t));
    ok(shim::add3_layer_norm_available(t) && shim::mamba1_scan_available(t) && shim::moe_available(t) &&
           shim::moe_gated_available(t) == mlxcel_amdgpu_moe_gated_available(abi(t)) && shim::moe_gated_available(t),
       std::string("availability ") + dname(t));
    ok(shim::moe_router_available(t) == mlxcel_amdgpu_moe_router_available(abi(t)) && shim::moe_router_available(t),
       std::string("moe_router_available ") + dname(t));
  }
  ok(!shim::xielu_available(mx::int32), "xielu_available(int32) is false");
  ok(shim::xielu_available() && shim::add3_layer_norm_available() && shim::mamba1_scan_available() &&
         shim::moe_available() && shim::moe_gated_available() && shim::moe_router_available(),
     "the dtype-less availability functions");
  ok(shim::add3_layer_norm_supports(bf, 1, 6656) && !shim::add3_layer_norm_supports(bf, 1, 6657),
     "add3_layer_norm_supports follows MLXCEL_AMDGPU_ADD3_MAX_D");
  ok(!shim::mamba1_scan_supports(bf, 1, 1, 8, 33), "mamba1_scan_supports(N=33) is false");
  ok(shim::moe_router_supports(bf, 8, 1024, 16, 1) && !shim::moe_router_supports(bf, 9, 128, 8, 2048) &&
         !shim::moe_router_supports(bf, 1, 1025, 8, 2048) && !shim::moe_router_supports(bf, 1, 128, 17, 2048) &&
         !shim::moe_router_supports(bf, 1, 4, 5, 2048) && !shim::moe_router_supports(bf, 1, 128, 8, 0) &&
         !shim::moe_router_supports(bf, -1, 128, 8, 2048) && !shim::moe_router_supports(mx::int32, 1, 128, 8, 2048),
     "moe_router_supports follows the router's limits");
  ok(shim::moe_supports(bf, 128, 6, 2688, 1856, 4, 64) && !shim::moe_supports(bf, 128, 6, 2688, 1856, 6, 64),
     "moe_supports: Nemotron's shape at 4 bits, not 6");
}

// ---- Qwen3-30B-A3B's MoE block: ours against MLX's graph, whole ------------

// Graph nodes per primitive (a multi-output primitive once): all, and those
// that are not views or no-ops: reshapes, slices, transposes and the like
// move no data, nor does Contiguous (the shim's, on each input) of an input
// that is already row-contiguous, as every one here is.
struct PrimitiveCount {
  int all = 0, compute = 0;
};

static PrimitiveCount count_primitives(const std::vector<array>& outputs) {
  static const std::unordered_set<std::string> views = {
      "Reshape",   "Slice",     "Squeeze",      "ExpandDims", "Broadcast", "BroadcastAxes",
      "Transpose", "AsStrided", "StopGradient", "Flatten",    "Unflatten", "Contiguous"};
  PrimitiveCount n;
  std::unordered_set<uintptr_t> seen;
  std::unordered_set<const void*> primitives;
  std::vector<array> todo = outputs;
  while (!todo.empty()) {
    array a = todo.back();
    todo.pop_back();
    if (!seen.insert(a.id()).second || !a.has_primitive()) continue;
    if (primitives.insert(&a.primitive()).second) {
      ++n.all;
      n.compute += views.count(a.primitive().name()) == 0;
    }
    for (const auto& s : a.siblings()) seen.insert(s.id());
    for (const auto& in : a.inputs()) todo.push_back(in);
  }
  return n;
}

// Wall time per call of `run(i)` (i = 0, 1, ...), each an mx::eval, after
// `warm` calls: what a decode step that evaluates it pays.
static double us_per_call(const std::function<void(int)>& run, int iters, int warm) {
  for (int i = 0; i < warm; ++i) run(i);
  mx::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) run(warm + i);
  mx::synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// The block's shapes: Qwen3-30B-A3B's (E 128, K 8, hidden 2048, expert 768), or tiny ones for
// `small` (time-smoke on the CPU, where the numbers mean nothing and the library's CPU backend
// is slow).
static Gated block_weights(bool small, int bits) {
  return small ? make_block(16, 8, 128, 64, bits) : make_block(128, 8, 2048, 768, bits);
}

// The token counts timed; `small`: one, and eight (the graph's sorted path).
static std::vector<int> block_tokens(bool small) {
  return small ? std::vector<int>{1, 8} : std::vector<int>{1, 2, 4, 8};
}

// 16 inputs [M, din] (2 when `small`), used in turn so that successive blocks choose other
// experts (the weights then come from memory, not from L2).
static std::vector<array> block_inputs(const Gated& m, int M, bool small) {
  std::vector<array> xs;
  for (uint32_t i = 0; i < (small ? 2u : 16u); ++i)
    xs.push_back(make(values(size_t(M) * m.din, 300 + 17 * M + i), {M, m.din}, m.t));
  mx::eval(xs);
  return xs;
}

static void block_timing(bool small) {
  std::printf("\nQwen3-30B-A3B MoE block bf16 (E 128, K 8, hidden 2048, expert 768, group 64, norm_topk_prob): "
              "router + experts + sum over k, ours (moe_block_kernel: one primitive) against MLX's graph "
              "(mlx-lm's ops, gather_qmm); router: W_r in bf16 (moe_block_kernel; the graph's matmul) or quantized at "
              "8 bits, group 64, as in mlx-lm's quantized checkpoints (moe_block_quantized_router_kernel; the "
              "graph's quantized_matmul); per eval: one block per mx::eval; amortized: 16 independent blocks per "
              "eval, time / 16; primitives per block: all / not views or no-ops%s\n",
              small ? " (time-smoke: E 16, hidden 128, expert 64, 2 inputs; the numbers mean nothing)" : "");
  std::printf("| bits | router | M | distinct experts | ours per eval (us) | graph per eval (us) | ratio | "
              "ours amortized (us) | graph amortized (us) | ratio | primitives ours | primitives graph |\n"
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const int iters = small ? 1 : 200, batches = small ? 1 : 25, warm = small ? 1 : 10, warm_batches = small ? 0 : 1;
  for (int bits : {4, 8}) {
    for (bool quantized_router : {false, true}) {
      Gated m = block_weights(small, bits);
      if (quantized_router) quantize_router(m, 8, 64, m.t);
      mx::eval(m.router_w, m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd);
      for (int M : block_tokens(small)) {
        std::vector<array> xs = block_inputs(m, M, small);
        // With the quantized router, counted over its dequantized W_r (in bf16): a statistic of
        // the inputs, which may differ from the quantized router's choice near a tie.
        double distinct = 0;
        for (const auto& x : xs) {
          std::vector<uint32_t> ids = expert_sets(router_shim(x, m.router_w, m.K, 1)[0]);
          std::sort(ids.begin(), ids.end());
          distinct += double(std::unique(ids.begin(), ids.end()) - ids.begin()) / xs.size();
        }
        auto one = [&](bool ours) {
          return [&, ours](int i) {
            const array& x = xs[size_t(i) % xs.size()];
            mx::eval(ours ? block_ours(m, x).out : block_graph(m, x).out);
          };
        };
        auto every_input = [&](bool ours) {
          return [&, ours](int) {
            std::vector<array> outs;
            for (const auto& x : xs) outs.push_back(ours ? block_ours(m, x).out : block_graph(m, x).out);
            mx::eval(outs);
          };
        };
        double ours = us_per_call(one(true), iters, warm), graph = us_per_call(one(false), iters, warm);
        double ours_amortized = us_per_call(every_input(true), batches, warm_batches) / xs.size();
        double graph_amortized = us_per_call(every_input(false), batches, warm_batches) / xs.size();
        PrimitiveCount po = count_primitives({block_ours(m, xs[0]).out});
        PrimitiveCount pg = count_primitives({block_graph(m, xs[0]).out});
        std::printf("| %d | %s | %d | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %d / %d | %d / %d |\n", bits,
                    quantized_router ? "8-bit" : "bf16", M, distinct, ours, graph, graph / ours, ours_amortized,
                    graph_amortized, graph_amortized / ours_amortized, po.all, po.compute, pg.all, pg.compute);
      }
    }
  }
}

// Qwen3-Next-80B-A3B's block with its shared expert: E 512, K 10, hidden 2048, expert 512 (the
// shared expert's too), 4 bits, group 64, the router and shared_expert_gate at 8 bits, group 64,
// as mlx-lm's quantized checkpoints hold them; tiny for `small`.
static std::pair<Gated, SharedExpert> next_weights(bool small) {
  Gated m = small ? make_block(32, 10, 128, 64, 4) : make_block(512, 10, 2048, 512, 4);
  quantize_router(m, 8, 64, m.t);
  SharedExpert e = make_shared(m, 900);
  mx::eval(m.router_w, m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd, e.w_sg);
  return {m, e};
}

static void block_shared_timing(bool small) {
  std::printf("\nQwen3-Next-80B-A3B MoE block bf16 with its shared expert (E 512, K 10, hidden 2048, expert and "
              "shared expert 512, 4-bit, group 64; router and shared_expert_gate at 8 bits, group 64): ours "
              "(moe_block_shared_expert_quantized_router_kernel: one primitive) against mlx-lm's graph "
              "(Qwen3NextSparseMoeBlock's ops: quantized_matmul, softmax, argpartition, gather_qmm, the shared "
              "expert's quantized_matmul SwiGLU and sigmoid gate); per eval and amortized as above%s\n",
              small ? " (time-smoke: E 32, hidden 128, expert 64, 2 inputs; the numbers mean nothing)" : "");
  std::printf("| M | distinct experts | ours per eval (us) | graph per eval (us) | ratio | ours amortized (us) | "
              "graph amortized (us) | ratio | primitives ours | primitives graph |\n"
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const int iters = small ? 1 : 200, batches = small ? 1 : 25, warm = small ? 1 : 10, warm_batches = small ? 0 : 1;
  auto [m, e] = next_weights(small);
  for (int M : block_tokens(small)) {
    std::vector<array> xs = block_inputs(m, M, small);
    double distinct = 0;
    for (const auto& x : xs) {
      std::vector<uint32_t> ids = expert_sets(router_shim(x, m.router_w, m.K, 1)[0]);
      std::sort(ids.begin(), ids.end());
      distinct += double(std::unique(ids.begin(), ids.end()) - ids.begin()) / xs.size();
    }
    auto out = [&](bool ours, const array& x) { return ours ? block_shared_kernel(m, e, x) : block_shared_graph(m, e, x); };
    auto one = [&](bool ours) { return [&, ours](int i) { mx::eval(out(ours, xs[size_t(i) % xs.size()])); }; };
    auto every_input = [&](bool ours) {
      return [&, ours](int) {
        std::vector<array> outs;
        for (const auto& x : xs) outs.push_back(out(ours, x));
        mx::eval(outs);
      };
    };
    double ours = us_per_call(one(true), iters, warm), graph = us_per_call(one(false), iters, warm);
    double ours_amortized = us_per_call(every_input(true), batches, warm_batches) / xs.size();
    double graph_amortized = us_per_call(every_input(false), batches, warm_batches) / xs.size();
    PrimitiveCount po = count_primitives({out(true, xs[0])}), pg = count_primitives({out(false, xs[0])});
    std::printf("| %d | %.1f | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx | %d / %d | %d / %d |\n", M, distinct, ours,
                graph, graph / ours, ours_amortized, graph_amortized, graph_amortized / ours_amortized, po.all,
                po.compute, pg.all, pg.compute);
  }
}

// ---- GPU kernel launches per block, counted by CUPTI ----------------------

// CUPTI's activity API, opened at run time (libcupti is not linked, and its
// headers are not needed): the few declarations the count uses, with the
// values of CUDA's cupti_result.h and cupti_activity.h.
namespace cupti {
using Result = int;                       // CUptiResult
constexpr Result kSuccess = 0;            // CUPTI_SUCCESS
constexpr Result kMaxLimitReached = 12;   // CUPTI_ERROR_MAX_LIMIT_REACHED: no more records in the buffer
constexpr int kConcurrentKernel = 10;     // CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
constexpr uint32_t kFlushForced = 1;      // CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
struct Activity {                         // CUpti_Activity: every record starts with its kind
  int kind;
};
using RequestFn = void (*)(uint8_t** buffer, size_t* size, size_t* max_records);
using CompleteFn = void (*)(void* context, uint32_t stream_id, uint8_t* buffer, size_t size, size_t valid_size);
using RegisterCallbacks = Result (*)(RequestFn, CompleteFn);
using Enable = Result (*)(int kind);
using FlushAll = Result (*)(uint32_t flag);
using GetNextRecord = Result (*)(uint8_t* buffer, size_t valid_size, Activity** record);
using GetNumDroppedRecords = Result (*)(void* context, uint32_t stream_id, size_t* dropped);
using GetResultString = Result (*)(Result result, const char** text);
}  // namespace cupti

// Counts the kernels the GPU ran (CUDA graph nodes included), from CUPTI's
// concurrent-kernel records. start() before the CUDA work to be counted;
// take() returns the kernels since the last take().
class KernelCounter {
 public:
  // False, with the reason in `why`, when CUPTI cannot be loaded or enabled.
  bool start(std::string& why) {
    std::vector<std::string> names = {"libcupti.so.13", "libcupti.so", "libcupti.so.12"};
    if (const char* home = std::getenv("CUDA_HOME"))
      names.push_back(std::string(home) + "/extras/CUPTI/lib64/libcupti.so");
    void* lib = nullptr;
    for (const auto& n : names)
      if ((lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      const char* e = dlerror();
      why = std::string("cannot load libcupti (") + (e ? e : "not found") + ")";
      return false;
    }
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (!p) why = std::string("libcupti has no ") + name;
      return p;
    };
    auto reg = reinterpret_cast<cupti::RegisterCallbacks>(sym("cuptiActivityRegisterCallbacks"));
    auto enable = reinterpret_cast<cupti::Enable>(sym("cuptiActivityEnable"));
    flush_ = reinterpret_cast<cupti::FlushAll>(sym("cuptiActivityFlushAll"));
    next_ = reinterpret_cast<cupti::GetNextRecord>(sym("cuptiActivityGetNextRecord"));
    dropped_fn_ = reinterpret_cast<cupti::GetNumDroppedRecords>(sym("cuptiActivityGetNumDroppedRecords"));
    auto text = reinterpret_cast<cupti::GetResultString>(sym("cuptiGetResultString"));
    if (!reg || !enable || !flush_ || !next_ || !dropped_fn_ || !text) return false;
    auto failed = [&](const char* what, cupti::Result r) {
      const char* t = nullptr;
      text(r, &t);
      why = std::string(what) + " failed: " + (t ? t : std::to_string(r));
      return false;
    };
    if (cupti::Result r = reg(&request, &complete); r != cupti::kSuccess)
      return failed("cuptiActivityRegisterCallbacks", r);
    if (cupti::Result r = enable(cupti::kConcurrentKernel); r != cupti::kSuccess)
      return failed("cuptiActivityEnable", r);
    return true;
  }
  // Kernels since the last call, after the GPU is idle and CUPTI has handed
  // over every record; -1 when CUPTI dropped records.
  long take() {
    mx::synchronize();
    flush_(cupti::kFlushForced);
    long n = kernels_.exchange(0);
    return dropped_.exchange(0) ? -1 : n;
  }

 private:
  static void request(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = 1 << 20;
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
    *max_records = 0;
  }
  static void complete(void* context, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid_size) {
    cupti::Activity* record = nullptr;
    while (valid_size > 0 && next_(buffer, valid_size, &record) == cupti::kSuccess)
      kernels_ += record->kind == cupti::kConcurrentKernel;
    size_t dropped = 0;
    if (dropped_fn_(context, stream_id, &dropped) == cupti::kSuccess) dropped_ += dropped;
    std::free(buffer);
  }
  static inline cupti::FlushAll flush_ = nullptr;
  static inline cupti::GetNextRecord next_ = nullptr;
  static inline cupti::GetNumDroppedRecords dropped_fn_ = nullptr;
  static inline std::atomic<long> kernels_{0}, dropped_{0};
};

// `gpu launches`: the GPU kernels one eval of one block launches, ours and
// MLX's graph, after warm-up (MLX's CUDA graphs and JIT kernels built). Run
// as its own process so that CUPTI, started before any CUDA work, does not
// slow the timing. Without CUPTI (or on the CPU stream) the table says so,
// and nothing fails: the count is information, not a check.
static void block_launches(bool small, KernelCounter* counter, const std::string& why) {
  std::printf("\nGPU kernels per Qwen3-30B-A3B MoE block%s (one mx::eval of one block after warm-up, CUPTI "
              "concurrent-kernel records)%s%s\n",
              small ? " at tiny shapes" : "", counter ? "" : ": unavailable, ", counter ? "" : why.c_str());
  std::printf("| bits | M | ours | graph |\n|---:|---:|---:|---:|\n");
  for (int bits : {4, 8}) {
    Gated m = block_weights(small, bits);
    mx::eval(m.router_w, m.wg, m.sg, m.bg, m.wu, m.su, m.bu, m.wd, m.sd, m.bd);
    for (int M : block_tokens(small)) {
      std::vector<array> xs = block_inputs(m, M, small);
      long n[2] = {0, 0};
      for (int ours : {1, 0}) {
        auto block = [&](int i) {
          const array& x = xs[size_t(i) % xs.size()];
          mx::eval(ours ? block_ours(m, x).out : block_graph(m, x).out);
        };
        const int warm = small ? 0 : 3;
        for (int i = 0; i < warm; ++i) block(i);
        if (counter) counter->take();
        block(warm);
        if (counter) n[ours] = counter->take();
      }
      auto cell = [&](long v) {
        return !counter ? std::string("n/a") : v < 0 ? std::string("dropped") : std::to_string(v);
      };
      std::printf("| %d | %d | %s | %s |\n", bits, M, cell(n[1]).c_str(), cell(n[0]).c_str());
    }
  }
  std::printf("\nGPU kernels per Qwen3-Next-80B-A3B MoE block with its shared expert%s (4 bits, 8-bit router and "
              "gate row; as above)\n| M | ours | graph |\n|---:|---:|---:|\n",
              small ? " at tiny shapes" : "");
  auto [m, e] = next_weights(small);
  for (int M : block_tokens(small)) {
    std::vector<array> xs = block_inputs(m, M, small);
    long n[2] = {0, 0};
    for (int ours : {1, 0}) {
      auto block = [&](int i) {
        const array& x = xs[size_t(i) % xs.size()];
        mx::eval(ours ? block_shared_kernel(m, e, x) : block_shared_graph(m, e, x));
      };
      const int warm = small ? 0 : 3;
      for (int i = 0; i < warm; ++i) block(i);
      if (counter) counter->take();
      block(warm);
      if (counter) n[ours] = counter->take();
    }
    auto cell = [&](long v) { return !counter ? std::string("n/a") : v < 0 ? std::string("dropped") : std::to_string(v); };
    std::printf("| %d | %s | %s |\n", M, cell(n[1]).c_str(), cell(n[0]).c_str());
  }
}

// ---- timing: our kernels inside the MLX graph against MLX's graph ----------

static double time_us(const std::function<std::vector<array>()>& f, int iters) {
  for (int i = 0; i < 5; ++i) mx::eval(f());
  mx::synchronize();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) mx::eval(f());
  mx::synchronize();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
}

// `small`: tiny shapes and few iterations, to exercise this code on the CPU
// (`cpu time-smoke`); the numbers then mean nothing.
static void timing(bool small) {
  std::printf("\n| case | ours in the MLX graph (us) | MLX's own graph (us) | ratio |\n|---|---:|---:|---:|\n");
  auto row = [](const char* name, double ours, double theirs) {
    std::printf("| %s | %.1f | %.1f | %.2fx |\n", name, ours, theirs, theirs / ours);
  };
  const int it = small ? 2 : 200;
  const int n_dec = small ? 512 : 21504, n_pre = small ? 2048 : 1 << 22;
  const int d_model = small ? 256 : 4096, dm_scan = small ? 64 : 8192;
  {
    array x = make(values(n_dec, 1, 4.0f), {1, n_dec}, mx::bfloat16);
    mx::eval(x);
    row("xielu bf16 n=21504 (Apertus decode)", time_us([&] { return std::vector{xielu_shim(x, 0.8731f, 0.6042f, 0.5f, -1e-6f)}; }, it),
        time_us([&] { return std::vector{xielu_graph(x, 0.8731f, 0.6042f, 0.5f, -1e-6f)}; }, it));
    array xl = make(values(n_pre, 1, 4.0f), {n_pre / 8192 > 0 ? n_pre / 8192 : 1, n_pre >= 8192 ? 8192 : n_pre}, mx::bfloat16);
    mx::eval(xl);
    row("xielu bf16 n=4M (prefill)", time_us([&] { return std::vector{xielu_shim(xl, 0.8731f, 0.6042f, 0.5f, -1e-6f)}; }, it),
        time_us([&] { return std::vector{xielu_graph(xl, 0.8731f, 0.6042f, 0.5f, -1e-6f)}; }, it));
  }
  for (int rows : {1, small ? 4 : 512}) {
    const int D = d_model;
    Shape s = {1, rows, D};
    auto t = mx::bfloat16;
    array a = make(values(size_t(rows) * D, 1), s, t), b = make(values(size_t(rows) * D, 2), s, t),
          x = make(values(size_t(rows) * D, 3, 4.0f), s, t), w = make(values(D, 4, 0.5f), {D}, t),
          bias = make(values(D, 5, 0.1f), {D}, t);
    mx::eval(a, b, x, w, bias);
    std::string name = "add3_layer_norm bf16 d=" + std::to_string(D) + " rows=" + std::to_string(rows);
    row(name.c_str(), time_us([&] { return add3_shim(a, b, x, w, bias, 1e-5f); }, it), time_us([&] {
          array xn = mx::add(mx::add(a, b), x);
          return std::vector{xn, mx::fast::layer_norm(xn, w, bias, 1e-5f)};
        }, it));
  }
  for (int L : {1, small ? 4 : 64}) {
    const int B = 1, Dm = dm_scan, N = 16;
    auto t = mx::bfloat16;
    size_t nx = size_t(B) * L * Dm, nb = size_t(B) * L * N;
    array x = make(values(nx, 1), {B, L, Dm}, t), dt = make(values(nx, 2, 0.25f, 0.3f), {B, L, Dm}, t),
          bm = make(values(nb, 3), {B, L, N}, t), cm = make(values(nb, 4), {B, L, N}, t),
          a = make(values(size_t(Dm) * N, 5, 0.5f, -1.0f), {Dm, N}, mx::float32), dskip = make(values(Dm, 6), {Dm}, t),
          s0 = mx::zeros({B, Dm, N});
    mx::eval(x, dt, bm, cm, a, dskip, s0);
    std::string name = "mamba1_scan bf16 Dm=" + std::to_string(Dm) + " N=16 L=" + std::to_string(L) + " (graph: f32 step loop)";
    row(name.c_str(), time_us([&] { return mamba_shim(x, dt, bm, cm, a, dskip, s0); }, L == 1 ? it : (small ? 2 : 20)),
        time_us([&] { return mamba_graph(x, dt, bm, cm, a, dskip, s0); }, L == 1 ? it : (small ? 2 : 20)));
  }
  {
    Moe m = small ? make_moe(mx::bfloat16, 8, 6, 256, 128, 4, 64) : make_moe(mx::bfloat16, 128, 6, 2688, 1856, 4, 64);
    mx::eval(m.x, m.gate_w, m.corr_bias, m.w1, m.s1, m.b1, m.w2, m.s2, m.b2);
    auto block = [&](int path) {
      auto [idx, scores] = router(m);
      array routed = path == 0 ? routed_two_kernels(m, idx, scores)[2]
                     : path == 1 ? routed_one_kernel(m, idx, scores)
                                 : routed_gather_qmm(m, idx, scores);
      return std::vector{mx::add(routed, m.x)};
    };
    double gq = time_us([&] { return block(2); }, it);
    row("Nemotron MoE block bf16 E=128 K=6 (fc1+down kernels)", time_us([&] { return block(0); }, it), gq);
    row("Nemotron MoE block bf16 E=128 K=6 (routed forward)", time_us([&] { return block(1); }, it), gq);
  }
  block_timing(small);
  block_shared_timing(small);
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "cpu";
  const std::string extra = argc > 2 ? argv[2] : "";
  const bool want_timing = extra == "time" || extra == "time-smoke", launches = extra == "launches";
  if ((mode != "cpu" && mode != "gpu") || !(extra.empty() || want_timing || launches) || argc > 3) {
    std::cerr << "usage: " << argv[0] << " cpu|gpu [time|time-smoke|launches]\n";
    return 2;
  }
  g_gpu = mode == "gpu";
  // CUPTI starts before any CUDA work, so that it sees every kernel.
  KernelCounter counter;
  std::string no_count = "the CPU stream launches no GPU kernels";
  const bool counting = launches && g_gpu && counter.start(no_count);
  if (mlxcel_amdgpu_abi_version() != MLXCEL_AMDGPU_ABI_VERSION) {
    std::cout << "FAIL: the library's ABI version does not match the header's\n";
    return 1;
  }
  if (mlxcel_amdgpu_select_backend(g_gpu ? "cuda" : "cpu") != MLXCEL_AMDGPU_OK) {
    std::cout << "FAIL: cannot select the library's " << (g_gpu ? "cuda" : "cpu")
              << " backend: " << mlxcel_amdgpu_last_error() << "\n";
    return 1;
  }
  mx::set_default_device(g_gpu ? mx::Device::gpu : mx::Device::cpu);
  char desc[512];
  mlxcel_amdgpu_describe_device(desc, sizeof desc);
  std::cout << "MLX " << mx::version() << ", stream " << mx::default_stream(mx::default_device()) << "; library: " << desc
            << std::endl;
  if (launches) {
    try {
      // On the CPU stream nothing is counted: tiny shapes, as time-smoke's.
      block_launches(!g_gpu, counting ? &counter : nullptr, no_count);
    } catch (const std::exception& e) {
      ok(false, std::string("launches: unexpected exception: ") + e.what());
    }
    std::cout << (g_failures ? "FAIL" : "MLX shim driver: launch counts done") << std::endl;
    return g_failures ? 1 : 0;
  }
  struct Step {
    const char* name;
    void (*f)();
  };
  for (Step s : {Step{"xielu", test_xielu}, Step{"add3_layer_norm", test_add3}, Step{"mamba1_scan", test_mamba},
                 Step{"moe", test_moe}, Step{"gated moe", test_gated_moe}, Step{"moe router", test_router},
                 Step{"moe router vs the testkit reference", test_router_reference},
                 Step{"Qwen3 MoE block", test_block},
                 Step{"Qwen3 MoE block, quantized router", test_block_quantized_router},
                 Step{"Qwen3-Next MoE block, shared expert", test_block_shared_expert},
                 Step{"refusals", test_refusals}}) {
    int before = g_failures;
    auto t0 = std::chrono::steady_clock::now();
    try {
      s.f();
    } catch (const std::exception& e) {
      ok(false, std::string(s.name) + ": unexpected exception: " + e.what());
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::cout << (g_failures == before ? "ok   " : "FAIL ") << s.name << " (" << int(ms) << " ms)" << std::endl;
  }
  // Timed even after a failed check: the table says which paths ran, and the
  // exit status still reports the failure.
  if (want_timing) {
    try {
      timing(extra == "time-smoke");
      // The launch count's code too; the counts come from `gpu launches`.
      if (extra == "time-smoke") block_launches(true, nullptr, "time-smoke counts none");
    } catch (const std::exception& e) {
      ok(false, std::string("timing: unexpected exception: ") + e.what());
    }
  }
  if (g_failures) {
    std::cout << g_failures << " of " << g_checks << " checks FAILED" << std::endl;
    return 1;
  }
  std::cout << "MLX shim driver: all checks passed (" << g_checks << " checks)" << std::endl;
  return 0;
}
