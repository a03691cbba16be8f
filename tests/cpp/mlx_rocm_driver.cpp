// The shim's ROCm branch (shim/mlx built with MLXCEL_AMDGPU_SHIM_ROCM) inside
// MLX 0.32 with the test double of mlxcel's MLX-ROCm fork
// (tests/mlx_rocm_double), on the simulated gfx1151 (the stand-in libamdhip64
// over rdna-sim). MLX's CPU build has no GPU scheduler, so this program
// evaluates each getter's primitive the way the fork's gpu::eval does
// (eval_gpu, the inputs kept as temporaries, then a commit) and builds the
// inputs on the CPU stream; every buffer is the double's.
//
// Checks, each against the C ABI called directly on the same inputs, bit for
// bit: every getter in every dtype; with HIP graphs on (kernel nodes), also
// when ROCm rejects the nodes (the fork's commit-then-launch fallback); with
// pool buffers whose host shadow the host wrote; a decode capture of several
// getters replayed many times after the memory around it was poisoned; the
// refusals of scalars the host cannot read without a synchronization. Run with
// RDNA_SIM_REQUIRE_DEVICE_FLAGS=1, the whole sequence (gates before any GPU
// work, first launch, decode) also shows that nothing creates a HIP queue
// before the fork has set the device's flags.
//
// Prints "MLX-ROCm shim driver: all checks passed" and exits 0, or FAIL lines and 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include <mlx/mlx.h>
#include <mlx/primitives.h>

#include "mlx/backend/rocm/allocator.h"
#include "mlx/backend/rocm/device.h"
#include "mlx_driver_support.h"
#include "mlxcel_amdgpu.h"
#include "mlxcel_amdgpu_mlx.h"

namespace shim = mlxcel_amdgpu::shim;

static const mx::Stream g_gpu(100, mx::Device(mx::Device::gpu, 0));

static void hip_ok(hipError_t e, const char* what) {
  if (e != hipSuccess) throw std::runtime_error(std::string(what) + ": " + hipGetErrorString(e));
}

// ---- inputs, built on the CPU stream into the double's buffers -------------

static array make(const std::vector<float>& v, Shape shape, mx::Dtype t) {
  array a = mx::astype(array(v.data(), std::move(shape), mx::float32), t, mx::Device::cpu);
  mx::eval(a);
  return a;
}

static array f32_scalar(float v) {
  return mx::full({1}, v, mx::float32, mx::Device::cpu);
}

// The bytes of an array as the device holds them (not through the host
// shadow, which a replay does not update).
static Bytes device_bytes(const array& a) {
  auto* b = static_cast<mx::rocm::RocmBuffer*>(const_cast<array&>(a).buffer().ptr());
  if (b->host_dirty) mx::rocm::allocator().flush_host_shadow(*b);
  Bytes out(a.nbytes());
  hip_ok(hipMemcpy(out.data(), static_cast<char*>(b->data) + a.offset(), out.size(), hipMemcpyDeviceToHost),
         "reading an output");
  return out;
}

// ---- the fork's gpu::eval of one getter's outputs ------------------------

static void eval_gpu(std::vector<array>& outs, bool commit = true) {
  array& first = outs[0];
  std::vector<array> inputs = first.inputs();
  for (auto& in : inputs) {
    if (in.is_available()) continue;
    // mx::contiguous of an evaluated row-contiguous array shares its buffer.
    const array& src = in.inputs().at(0);
    if (in.primitive().name() != std::string("Contiguous") || !src.is_available() || !src.flags().row_contiguous)
      throw std::logic_error("an input that this program cannot evaluate on the GPU stream");
    in.copy_shared_buffer(src);
    in.set_status(array::Status::available);
  }
  std::vector<array> outputs = first.outputs();
  first.primitive().eval_gpu(inputs, outputs);
  auto& encoder = mx::rocm::get_command_encoder(g_gpu);
  for (auto& in : inputs) encoder.add_temporary(in);
  if (commit) encoder.commit();
  for (auto& o : outputs) {
    o.set_status(array::Status::available);
    o.detach();
  }
  outs = outputs;
}

// ---- the C ABI on the same inputs ------------------------------------------

struct Direct {
  std::vector<void*> owned;
  void* up(const array& a) {
    void* p = nullptr;
    hip_ok(hipMalloc(&p, a.nbytes()), "hipMalloc");
    owned.push_back(p);
    Bytes b = device_bytes(a);
    hip_ok(hipMemcpy(p, b.data(), b.size(), hipMemcpyHostToDevice), "hipMemcpy");
    return p;
  }
  void* out(size_t bytes) {
    void* p = nullptr;
    hip_ok(hipMalloc(&p, bytes), "hipMalloc");
    owned.push_back(p);
    return p;
  }
  Bytes down(void* p, size_t bytes) {
    Bytes b(bytes);
    hip_ok(hipMemcpy(b.data(), p, bytes, hipMemcpyDeviceToHost), "hipMemcpy");
    return b;
  }
  ~Direct() {
    for (void* p : owned) (void)hipFree(p);
  }
};

static void same(const std::string& what, const Bytes& got, const Bytes& want) {
  size_t differ = got.size() == want.size() ? 0 : 1;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) differ += got[i] != want[i];
  ok(differ == 0, what + ": " + std::to_string(differ) + " bytes differ from the C ABI");
}

static void abi_ok(MlxcelAmdgpuStatus s, const std::string& what) {
  ok(s == MLXCEL_AMDGPU_OK, what + ": the C ABI returned " + std::to_string(s) + ": " + mlxcel_amdgpu_last_error());
}

// ---- the getters, called as mlxcel calls them, and their C ABI twins

static const std::tuple<int, int, int> kGrid{7, 7, 7};  // ignored by the shim

struct Case {
  std::string name;
  std::function<std::vector<array>()> shim;            // the getter's outputs, unevaluated
  std::function<std::vector<Bytes>()> direct;          // the C ABI's outputs
};

struct Inputs {
  mx::Dtype t;
  array x, a, b, w, bias;                               // xielu, add3
  array mx_, mdt, mbm, mcm, ma, md, ms;                 // mamba1_scan
  array mx1, idx, w1, s1, b1, w2, s2, b2, act, scores;  // MoE
  array rx, rwr;                                        // moe_router
  array bx, bwr;                                        // moe_block (with the MoE stacks)
  array bqw, bqs, bqb;                                  // moe_block_quantized_router: bwr at 8 bits
  std::vector<array> shared_gu, shared_down;            // the shared expert's gate (and up) and down matrices
  array bsg;                                            // its gate row [1, Din]
  std::vector<array> bsg_q;                             // the gate row at 8 bits
};

static constexpr int kRows = 3, kD = 256;
static constexpr int kB = 1, kL = 9, kDm = 40, kN = 16;
static constexpr int kE = 4, kK = 2, kDin = 128, kDff = 64, kBits = 4, kGs = 32;
static constexpr int kRouterM = 3, kRouterE = 24, kRouterK = 4, kRouterDin = 72;
static constexpr int kBlockM = 3, kRouterBits = 8, kRouterGs = 64;

static Inputs make_inputs(mx::Dtype t) {
  auto q1 = mx::quantize(make(values(size_t(kE) * kDff * kDin, 11, 0.05f), {kE, kDff, kDin}, t), kGs, kBits);
  auto q2 = mx::quantize(make(values(size_t(kE) * kDin * kDff, 12, 0.05f), {kE, kDin, kDff}, t), kGs, kBits);
  array bwr = make(values(size_t(kE) * kDin, 21, 0.1f), {kE, kDin}, t);
  auto qr = mx::quantize(bwr, kRouterGs, kRouterBits);
  auto shared_gu = mx::quantize(make(values(size_t(kDff) * kDin, 22, 0.05f), {kDff, kDin}, t), kGs, kBits);
  auto shared_down = mx::quantize(make(values(size_t(kDin) * kDff, 23, 0.05f), {kDin, kDff}, t), kGs, kBits);
  array bsg = make(values(kDin, 24, 0.1f), {1, kDin}, t);
  auto bsg_q = mx::quantize(bsg, kRouterGs, kRouterBits);
  for (auto* q : {&q1, &q2, &qr, &shared_gu, &shared_down, &bsg_q}) mx::eval(*q);
  std::vector<uint32_t> ids = {3, 1};
  array idx(ids.data(), {kK}, mx::uint32);
  size_t nx = size_t(kB) * kL * kDm, nb = size_t(kB) * kL * kN;
  return {t,
          make(values(1000, 1, 4.0f), {1000}, t),
          make(values(kRows * kD, 2), {kRows, kD}, t),
          make(values(kRows * kD, 3), {kRows, kD}, t),
          make(values(kD, 4, 0.5f, 1.0f), {kD}, t),
          make(values(kD, 5, 0.1f), {kD}, t),
          make(values(nx, 6), {kB, kL, kDm}, t),
          make(values(nx, 7, 0.25f, 0.3f), {kB, kL, kDm}, t),
          make(values(nb, 8), {kB, kL, kN}, t),
          make(values(nb, 9), {kB, kL, kN}, t),
          make(values(size_t(kDm) * kN, 10, 0.5f, -1.0f), {kDm, kN}, mx::float32),
          make(values(kDm, 13), {kDm}, t),
          make(values(size_t(kB) * kDm * kN, 14, 0.5f), {kB, kDm, kN}, mx::float32),
          make(values(kDin, 15), {kDin}, t),
          idx,
          q1[0], q1[1], q1[2], q2[0], q2[1], q2[2],
          make(values(size_t(kK) * kDff, 16, 0.5f, 0.5f), {kK, kDff}, mx::float32),
          make(values(kK, 17, 0.2f, 0.5f), {kK}, mx::float32),
          make(values(size_t(kRouterM) * kRouterDin, 18), {kRouterM, kRouterDin}, t),
          make(values(size_t(kRouterE) * kRouterDin, 19, 0.1f), {kRouterE, kRouterDin}, t),
          make(values(size_t(kBlockM) * kDin, 20), {kBlockM, kDin}, t),
          bwr,
          qr[0], qr[1], qr[2],
          shared_gu, shared_down, bsg, bsg_q};
}

static TemplateArgs moe_ta(mx::Dtype t) {
  return {{"T", t}, {"K", kK}, {"Din", kDin}, {"Dff", kDff}, {"bits", kBits}, {"group_size", kGs}};
}

// The block's case called through the C ABI: mlxcel_amdgpu_moe_block, or with `quantized_router`
// mlxcel_amdgpu_moe_block_quantized_router on the 8-bit router.
static std::vector<Bytes> block_direct(const Inputs& in, bool quantized_router) {
  Direct d;
  MlxcelAmdgpuMoeShape shape{kE, kK, kDin, kDff, kBits, kGs};
  size_t scratch_bytes = 0;
  abi_ok(mlxcel_amdgpu_moe_block_scratch_bytes(shape, kBlockM, &scratch_bytes), "moe_block_scratch_bytes");
  const size_t out_bytes = size_t(kBlockM) * kDin * mx::size_of(in.t);
  void *out = d.out(out_bytes), *scratch = d.out(scratch_bytes);
  auto u32 = [&](const array& a) { return static_cast<const uint32_t*>(d.up(a)); };
  if (quantized_router)
    abi_ok(mlxcel_amdgpu_moe_block_quantized_router(
               abi(in.t), shape, kBlockM, kRouterBits, kRouterGs, 0, 1, d.up(in.bx), u32(in.bqw), d.up(in.bqs),
               d.up(in.bqb), u32(in.w1), d.up(in.s1), d.up(in.b1), u32(in.w1), d.up(in.s1), d.up(in.b1), u32(in.w2),
               d.up(in.s2), d.up(in.b2), out, scratch, scratch_bytes, nullptr, nullptr),
           "moe_block_quantized_router");
  else
    abi_ok(mlxcel_amdgpu_moe_block(abi(in.t), shape, kBlockM, 0, 1, d.up(in.bx), d.up(in.bwr), u32(in.w1),
                                   d.up(in.s1), d.up(in.b1), u32(in.w1), d.up(in.s1), d.up(in.b1), u32(in.w2),
                                   d.up(in.s2), d.up(in.b2), out, scratch, scratch_bytes, nullptr, nullptr),
           "moe_block");
  return {d.down(out, out_bytes)};
}

// The block with a shared expert (its gate and up matrices one array, as the stacks' w1 is both)
// through the C ABI: mlxcel_amdgpu_moe_block_shared_expert, dense or with the 8-bit router and
// gate row.
static std::vector<Bytes> block_shared_direct(const Inputs& in, bool quantized_router) {
  Direct d;
  MlxcelAmdgpuMoeShape shape{kE, kK, kDin, kDff, kBits, kGs};
  size_t scratch_bytes = 0;
  abi_ok(mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(shape, kBlockM, &scratch_bytes),
         "moe_block_shared_expert_scratch_bytes");
  const size_t out_bytes = size_t(kBlockM) * kDin * mx::size_of(in.t);
  void *out = d.out(out_bytes), *scratch = d.out(scratch_bytes);
  auto m = [&](const array& w, const array& sc, const array& b) {
    return MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(d.up(w)), d.up(sc), d.up(b)};
  };
  auto of = [&](const std::vector<array>& w) { return m(w[0], w[1], w[2]); };
  auto dense = [&](const array& w) { return MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(d.up(w)), nullptr, nullptr}; };
  const uint32_t bits = quantized_router ? kRouterBits : 0, gs = quantized_router ? kRouterGs : 0;
  abi_ok(mlxcel_amdgpu_moe_block_shared_expert(
             abi(in.t), shape, kBlockM, bits, gs, 0, 1, d.up(in.bx),
             quantized_router ? m(in.bqw, in.bqs, in.bqb) : dense(in.bwr),
             quantized_router ? of(in.bsg_q) : dense(in.bsg), m(in.w1, in.s1, in.b1), m(in.w1, in.s1, in.b1),
             m(in.w2, in.s2, in.b2), of(in.shared_gu), of(in.shared_gu), of(in.shared_down), out, scratch,
             scratch_bytes, nullptr, nullptr),
         "moe_block_shared_expert");
  return {d.down(out, out_bytes)};
}

static std::vector<Case> cases(const Inputs& in) {
  const mx::Dtype t = in.t;
  const size_t es = mx::size_of(t);
  std::vector<Case> c;
  c.push_back({"xielu",
               [=] {
                 return shim::xielu_kernel()({in.x, f32_scalar(0.8f), f32_scalar(0.6f), f32_scalar(0.5f),
                                              f32_scalar(-1e-6f)},
                                             {in.x.shape()}, {t}, kGrid, kGrid, {{"T", t}}, std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 void* out = d.out(in.x.nbytes());
                 abi_ok(mlxcel_amdgpu_xielu(abi(t), d.up(in.x), out, in.x.size(), 0.8f, 0.6f, 0.5f, -1e-6f, nullptr),
                        "xielu");
                 return std::vector<Bytes>{d.down(out, in.x.nbytes())};
               }});
  c.push_back({"add3_layer_norm",
               [=] {
                 return shim::add3_layer_norm_kernel()(
                     {in.a, in.b, in.a, in.w, in.bias, f32_scalar(1e-5f)}, {in.a.shape(), in.a.shape()}, {t, t}, kGrid,
                     kGrid, {{"T", t}, {"D", kD}, {"W_STRIDE", 1}, {"B_STRIDE", 1}}, std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 size_t bytes = in.a.nbytes();
                 void *xn = d.out(bytes), *h = d.out(bytes), *a = d.up(in.a);
                 abi_ok(mlxcel_amdgpu_add3_layer_norm(abi(t), a, d.up(in.b), a, d.up(in.w), d.up(in.bias), xn, h,
                                                      kRows, kD, 1e-5f, nullptr),
                        "add3_layer_norm");
                 return std::vector<Bytes>{d.down(xn, bytes), d.down(h, bytes)};
               }});
  c.push_back({"mamba1_scan",
               [=] {
                 return shim::mamba1_scan_kernel()({in.mx_, in.mdt, in.mbm, in.mcm, in.ma, in.md, in.ms},
                                                   {in.mx_.shape(), in.ms.shape()}, {t, mx::float32}, kGrid, kGrid,
                                                   {{"T", t}, {"N", kN}, {"Dm", kDm}}, std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 void *y = d.out(in.mx_.nbytes()), *s = d.out(in.ms.nbytes());
                 abi_ok(mlxcel_amdgpu_mamba1_scan(abi(t), d.up(in.mx_), d.up(in.mdt), d.up(in.mbm), d.up(in.mcm),
                                                  static_cast<const float*>(d.up(in.ma)), d.up(in.md),
                                                  static_cast<const float*>(d.up(in.ms)), y, static_cast<float*>(s),
                                                  kB, kL, kDm, kN, nullptr),
                        "mamba1_scan");
                 return std::vector<Bytes>{d.down(y, in.mx_.nbytes()), d.down(s, in.ms.nbytes())};
               }});
  const MlxcelAmdgpuMoeShape shape{kE, kK, kDin, kDff, kBits, kGs};
  c.push_back({"moe_fc1_relu2",
               [=] {
                 return shim::moe_fc1_relu2_kernel()({in.mx1, in.idx, in.w1, in.s1, in.b1}, {{kK, kDff}},
                                                     {mx::float32}, kGrid, kGrid, moe_ta(t), std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 void* act = d.out(size_t(kK) * kDff * 4);
                 abi_ok(mlxcel_amdgpu_moe_fc1_relu2(abi(t), shape, d.up(in.mx1), static_cast<const uint32_t*>(d.up(in.idx)),
                                                    static_cast<const uint32_t*>(d.up(in.w1)), d.up(in.s1), d.up(in.b1),
                                                    static_cast<float*>(act), nullptr, nullptr),
                        "moe_fc1_relu2");
                 return std::vector<Bytes>{d.down(act, size_t(kK) * kDff * 4)};
               }});
  c.push_back({"moe_down",
               [=] {
                 return shim::moe_down_kernel()({in.idx, in.w2, in.s2, in.b2, in.act, in.scores}, {{kK, kDin}},
                                                {mx::float32}, kGrid, kGrid, moe_ta(t), std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 void* part = d.out(size_t(kK) * kDin * 4);
                 abi_ok(mlxcel_amdgpu_moe_down(abi(t), shape, static_cast<const uint32_t*>(d.up(in.idx)),
                                               static_cast<const uint32_t*>(d.up(in.w2)), d.up(in.s2), d.up(in.b2),
                                               static_cast<const float*>(d.up(in.act)),
                                               static_cast<const float*>(d.up(in.scores)), static_cast<float*>(part),
                                               nullptr, nullptr),
                        "moe_down");
                 return std::vector<Bytes>{d.down(part, size_t(kK) * kDin * 4)};
               }});
  c.push_back({"moe_routed_forward",
               [=] {
                 return shim::moe_routed_forward_kernel()(
                     {in.mx1, in.idx, in.w1, in.s1, in.b1, in.w2, in.s2, in.b2, in.scores}, {{kDin}}, {t}, kGrid,
                     kGrid, moe_ta(t), std::nullopt, false, g_gpu);
               },
               [=] {
                 Direct d;
                 size_t scratch_bytes = 0;
                 abi_ok(mlxcel_amdgpu_moe_scratch_bytes(kK, kDin, kDff, &scratch_bytes), "moe_scratch_bytes");
                 void *out = d.out(size_t(kDin) * es), *scratch = d.out(scratch_bytes);
                 abi_ok(mlxcel_amdgpu_moe_routed_forward(
                            abi(t), shape, d.up(in.mx1), static_cast<const uint32_t*>(d.up(in.idx)),
                            static_cast<const float*>(d.up(in.scores)), static_cast<const uint32_t*>(d.up(in.w1)),
                            d.up(in.s1), d.up(in.b1), static_cast<const uint32_t*>(d.up(in.w2)), d.up(in.s2),
                            d.up(in.b2), out, scratch, scratch_bytes, nullptr, nullptr),
                        "moe_routed_forward");
                 return std::vector<Bytes>{d.down(out, size_t(kDin) * es)};
               }});
  c.push_back({"moe_router",
               [=] {
                 return shim::moe_router_kernel()({in.rx, in.rwr}, {{kRouterM, kRouterK}, {kRouterM, kRouterK}},
                                                  {mx::uint32, mx::float32}, kGrid, kGrid,
                                                  {{"T", t}, {"K", kRouterK}, {"norm_topk_prob", 1}}, std::nullopt,
                                                  false, g_gpu);
               },
               [=] {
                 Direct d;
                 const size_t out_bytes = size_t(kRouterM) * kRouterK * 4;
                 void *logits = d.out(size_t(kRouterM) * kRouterE * 4), *ids = d.out(out_bytes),
                      *scores = d.out(out_bytes);
                 abi_ok(mlxcel_amdgpu_moe_router(abi(t), d.up(in.rx), d.up(in.rwr), static_cast<float*>(logits),
                                                 static_cast<uint32_t*>(ids), static_cast<float*>(scores), kRouterM,
                                                 kRouterE, kRouterK, kRouterDin, 1, nullptr),
                        "moe_router");
                 return std::vector<Bytes>{d.down(ids, out_bytes), d.down(scores, out_bytes)};
               }});
  // The whole block over the MoE stacks (w1 as gate and up, w2 as down), three tokens; then the
  // same block with its router quantized (8 bits, group 64).
  c.push_back({"moe_block",
               [=] {
                 TemplateArgs ta = {{"T", t}, {"K", kK}, {"bits", kBits}, {"group_size", kGs}, {"act", 0},
                                    {"norm_topk_prob", 1}};
                 return shim::moe_block_kernel()(
                     {in.bx, in.bwr, in.w1, in.s1, in.b1, in.w1, in.s1, in.b1, in.w2, in.s2, in.b2},
                     {{kBlockM, kDin}}, {t}, kGrid, kGrid, ta, std::nullopt, false, g_gpu);
               },
               [=] { return block_direct(in, false); }});
  c.push_back({"moe_block_quantized_router",
               [=] {
                 TemplateArgs ta = {{"T", t},   {"K", kK},
                                    {"bits", kBits},          {"group_size", kGs},
                                    {"act", 0},               {"norm_topk_prob", 1},
                                    {"router_bits", kRouterBits}, {"router_group_size", kRouterGs}};
                 return shim::moe_block_quantized_router_kernel()(
                     {in.bx, in.bqw, in.bqs, in.bqb, in.w1, in.s1, in.b1, in.w1, in.s1, in.b1, in.w2, in.s2, in.b2},
                     {{kBlockM, kDin}}, {t}, kGrid, kGrid, ta, std::nullopt, false, g_gpu);
               },
               [=] { return block_direct(in, true); }});
  // The block with a shared expert, dense, then with the 8-bit router and gate row.
  for (bool q : {false, true}) {
    c.push_back({q ? "moe_block_shared_expert_quantized_router" : "moe_block_shared_expert",
                 [=] {
                   TemplateArgs ta = {{"T", t}, {"K", kK}, {"bits", kBits}, {"group_size", kGs}, {"act", 0},
                                      {"norm_topk_prob", 1}};
                   std::vector<array> ins{in.bx};
                   if (q) {
                     ta.push_back({"router_bits", kRouterBits});
                     ta.push_back({"router_group_size", kRouterGs});
                     for (const auto& a : {in.bqw, in.bqs, in.bqb}) ins.push_back(a);
                     for (const auto& a : in.bsg_q) ins.push_back(a);
                   } else {
                     ins.push_back(in.bwr);
                     ins.push_back(in.bsg);
                   }
                   for (const auto& a : {in.w1, in.s1, in.b1, in.w1, in.s1, in.b1, in.w2, in.s2, in.b2}) ins.push_back(a);
                   for (const auto* w : {&in.shared_gu, &in.shared_gu, &in.shared_down})
                     for (const auto& a : *w) ins.push_back(a);
                   auto& kernel = q ? shim::moe_block_shared_expert_quantized_router_kernel()
                                    : shim::moe_block_shared_expert_kernel();
                   return kernel(ins, {{kBlockM, kDin}}, {t}, kGrid, kGrid, ta, std::nullopt, false, g_gpu);
                 },
                 [=] { return block_shared_direct(in, q); }});
  }
  return c;
}

// Runs every case through the shim (`mode` names the setting) and compares.
static void run_all(const std::string& mode, const Inputs& in) {
  for (const auto& c : cases(in)) {
    const std::string name = c.name + " " + dname(in.t) + " (" + mode + ")";
    try {
      std::vector<array> outs = c.shim();
      eval_gpu(outs);
      std::vector<Bytes> want = c.direct();
      for (size_t i = 0; i < outs.size(); ++i) same(name + " output " + std::to_string(i), device_bytes(outs[i]), want[i]);
    } catch (const std::exception& e) {
      ok(false, name + ": " + e.what());
    }
  }
}

static void set_env(const char* name, bool on) {
  if (on)
    setenv(name, "1", 1);
  else
    unsetenv(name);
}

// ---- decode capture and replay ---------------------------------------------

// Overwrites dead stack frames (where a launch's arguments lived if nothing
// kept them) and recycled heap blocks with 0xA5.
__attribute__((noinline)) static void poison_stack_and_heap() {
  volatile unsigned char frame[256 << 10];
  for (size_t i = 0; i < sizeof frame; ++i) frame[i] = 0xA5;
  std::vector<void*> blocks;
  for (size_t size = 16; size <= 4096; size *= 2)
    for (int i = 0; i < 64; ++i) {
      void* p = std::malloc(size);
      std::memset(p, 0xA5, size);
      blocks.push_back(p);
    }
  for (void* p : blocks) std::free(p);
}

static void test_capture_and_replay(const Inputs& in) {
  auto& encoder = mx::rocm::get_command_encoder(g_gpu);
  std::vector<Case> all = cases(in);
  // xielu, add3_layer_norm, moe_routed_forward, moe_router, moe_block
  std::vector<Case> captured = {all[0], all[1], all[5], all[6], all[7]};
  std::vector<std::vector<array>> outs;
  // A decode step runs once before it is captured, which here also brings
  // the inputs' host copies to the device: the double's copy would be a
  // legacy-stream call inside the capture.
  for (const auto& c : captured) {
    std::vector<array> warm = c.shim();
    eval_gpu(warm);
  }
  ok(encoder.decode_capture_begin(), "decode_capture_begin");
  try {
    for (const auto& c : captured) {
      outs.push_back(c.shim());
      eval_gpu(outs.back());
    }
  } catch (const std::exception& e) {
    ok(false, std::string("capturing: ") + e.what());
  }
  ok(encoder.decode_capture_end_record(0), "decode_capture_end_record: the capture is valid and runs");
  if (outs.size() != captured.size()) return;
  std::vector<std::vector<Bytes>> want;
  for (const auto& c : captured) want.push_back(c.direct());
  for (size_t k = 0; k < captured.size(); ++k)
    for (size_t i = 0; i < outs[k].size(); ++i)
      same("captured " + captured[k].name + " output " + std::to_string(i), device_bytes(outs[k][i]), want[k][i]);
  const int kReplays = 12;
  for (int r = 0; r < kReplays; ++r) {
    // Each replay must write the outputs again, from arguments that nothing
    // but the library kept.
    for (auto& o : outs)
      for (auto& a : o) {
        auto* b = static_cast<mx::rocm::RocmBuffer*>(a.buffer().ptr());
        Bytes junk(a.nbytes(), 0xFF);
        hip_ok(hipMemcpy(b->data, junk.data(), junk.size(), hipMemcpyHostToDevice), "poisoning an output");
      }
    poison_stack_and_heap();
    ok(encoder.decode_capture_replay(0), "decode_capture_replay " + std::to_string(r));
    for (size_t k = 0; k < captured.size(); ++k)
      for (size_t i = 0; i < outs[k].size(); ++i)
        same("replay " + std::to_string(r) + " of " + captured[k].name + " output " + std::to_string(i),
             device_bytes(outs[k][i]), want[k][i]);
  }
  encoder.decode_capture_destroy();
}

// ---- graph mode, several launches in one batch ------------------------------

static void test_one_graph_of_several_launches(const Inputs& in) {
  auto& encoder = mx::rocm::get_command_encoder(g_gpu);
  std::vector<Case> all = cases(in);
  std::vector<std::vector<array>> outs;
  try {
    for (const auto& c : all) {
      outs.push_back(c.shim());
      eval_gpu(outs.back(), /*commit=*/false);
    }
    poison_stack_and_heap();
    encoder.commit();
  } catch (const std::exception& e) {
    ok(false, std::string("one graph of every getter: ") + e.what());
    return;
  }
  for (size_t k = 0; k < all.size(); ++k) {
    std::vector<Bytes> want = all[k].direct();
    for (size_t i = 0; i < outs[k].size(); ++i)
      same("one graph: " + all[k].name + " output " + std::to_string(i), device_bytes(outs[k][i]), want[i]);
  }
}

// ---- refusals ---------------------------------------------------------------

static void refused(const std::string& what, const std::string& needle, const std::function<void()>& f) {
  try {
    f();
    ok(false, what + ": not refused");
  } catch (const std::invalid_argument& e) {
    ok(std::string(e.what()).find(needle) != std::string::npos,
       what + ": the message \"" + e.what() + "\" does not name \"" + needle + "\"");
  } catch (const std::exception& e) {
    ok(false, what + ": refused with the wrong exception: " + e.what());
  }
}

static void test_refusals(const Inputs& in) {
  auto xielu_with = [&](const array& alpha_p) {
    return shim::xielu_kernel()({in.x, alpha_p, f32_scalar(0.6f), f32_scalar(0.5f), f32_scalar(-1e-6f)},
                                {in.x.shape()}, {in.t}, kGrid, kGrid, {{"T", in.t}}, std::nullopt, false, g_gpu);
  };
  refused("a scalar computed by an op", "'alpha_p'", [&] { xielu_with(mx::exp(f32_scalar(0.1f), mx::Device::cpu)); });
  // A scalar only the GPU wrote, in a pool buffer: the host holds no copy.
  set_env("MLX_ROCM_USE_ASYNC_POOL", true);
  array one = make(values(1, 21), {1}, mx::float32);
  std::vector<array> gpu_scalar = shim::xielu_kernel()(
      {one, f32_scalar(0.8f), f32_scalar(0.6f), f32_scalar(0.5f), f32_scalar(-1e-6f)}, {{1}}, {mx::float32}, kGrid,
      kGrid, {{"T", mx::float32}}, std::nullopt, false, g_gpu);
  eval_gpu(gpu_scalar);
  refused("a scalar in a pool buffer only the GPU wrote", "host holds no copy", [&] { xielu_with(gpu_scalar[0]); });
  set_env("MLX_ROCM_USE_ASYNC_POOL", false);
  refused("a wrong dtype on the GPU stream", "input 'w'", [&] {
    shim::add3_layer_norm_kernel()({in.a, in.b, in.a, mx::astype(in.w, mx::float16, mx::Device::cpu), in.bias,
                                    f32_scalar(1e-5f)},
                                   {in.a.shape(), in.a.shape()}, {in.t, in.t}, kGrid, kGrid,
                                   {{"T", in.t}, {"D", kD}, {"W_STRIDE", 1}, {"B_STRIDE", 1}}, std::nullopt, false,
                                   g_gpu);
  });
}

int main() {
  try {
    // mlxcel decides its gates before MLX has touched the GPU: the answers
    // must come without creating a HIP queue.
    ok(shim::xielu_available() && shim::add3_layer_norm_available() && shim::mamba1_scan_available() &&
           shim::moe_available() && shim::moe_router_available() && shim::moe_block_available() &&
           shim::moe_block_quantized_router_available() && shim::moe_block_shared_expert_available(),
       std::string("the gates answer true on the simulated gfx1151 before any GPU work: ") + mlxcel_amdgpu_last_error());
    ok(mlxcel_amdgpu_abi_version() == MLXCEL_AMDGPU_ABI_VERSION, "the library's ABI version is the header's");

    for (mx::Dtype t : {mx::float32, mx::float16, mx::bfloat16}) run_all("eager", make_inputs(t));
    unsigned flags = 0;
    hip_ok(hipGetDeviceFlags(&flags), "hipGetDeviceFlags");
    ok(flags & hipDeviceScheduleBlockingSync, "the fork double set the device flags");

    Inputs bf16 = make_inputs(mx::bfloat16);
    set_env("MLX_USE_HIP_GRAPHS", true);
    run_all("HIP graphs: kernel nodes", bf16);
    test_one_graph_of_several_launches(bf16);
    set_env("MLX_ROCM_DOUBLE_REJECT_NODES", true);
    run_all("HIP graphs: nodes rejected, commit then launch", bf16);
    set_env("MLX_ROCM_DOUBLE_REJECT_NODES", false);
    set_env("MLX_USE_HIP_GRAPHS", false);

    set_env("MLX_ROCM_USE_ASYNC_POOL", true);
    Inputs pooled = make_inputs(mx::float16);
    run_all("pool buffers, host shadows written by the host", pooled);
    set_env("MLX_ROCM_USE_ASYNC_POOL", false);

    test_capture_and_replay(make_inputs(mx::float32));
    test_refusals(make_inputs(mx::float32));
  } catch (const std::exception& e) {
    ok(false, std::string("uncaught: ") + e.what());
  }
  std::cout << g_checks << " checks, " << g_failures << " failed" << std::endl;
  if (g_failures) return 1;
  std::cout << "MLX-ROCm shim driver: all checks passed" << std::endl;
  return 0;
}
