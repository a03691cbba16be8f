// The MLX shim over mlxcel-amdgpu's C ABI; see mlxcel_amdgpu_mlx.h.
//
// Build flags (CMakeLists.txt beside this file):
//   MLXCEL_AMDGPU_SHIM_CUDA  eval_gpu through MLX 0.32's CUDA command encoder.
//   MLXCEL_AMDGPU_SHIM_ROCM  eval_gpu through the command encoder of mlxcel's
//                            MLX-ROCm fork (its mlx/backend/rocm/device.h and
//                            allocator.h); tested through a double of that API
//                            (tests/mlx_rocm_double) on the simulated gfx1151.
//   neither                  eval_gpu throws; eval_cpu works (what CI runs).
#include "mlxcel_amdgpu_mlx.h"

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <mlx/allocator.h>
#include <mlx/backend/cpu/encoder.h>
#include <mlx/ops.h>
#include <mlx/primitives.h>
#include <mlx/utils.h>

#include "mlxcel_amdgpu.h"

#if defined(MLXCEL_AMDGPU_SHIM_CUDA) && defined(MLXCEL_AMDGPU_SHIM_ROCM)
#error "MLXCEL_AMDGPU_SHIM_CUDA and MLXCEL_AMDGPU_SHIM_ROCM are exclusive"
#endif
#ifdef MLXCEL_AMDGPU_SHIM_CUDA
#include <mlx/backend/cuda/device.h>
#endif
#ifdef MLXCEL_AMDGPU_SHIM_ROCM
#include <mlx/backend/rocm/allocator.h>
#include <mlx/backend/rocm/device.h>
#endif

namespace mlxcel_amdgpu::shim {

namespace mx = mlx::core;

namespace {

using mx::array;
using mx::Shape;
using TemplateArgs = std::vector<std::pair<std::string, mx::fast::TemplateArg>>;

enum class Kernel { Xielu, Add3LayerNorm, Mamba1Scan, MoeFc1Relu2, MoeGateUp, MoeDown, MoeRoutedForward, MoeRouter, MoeBlock,
                    MoeBlockQuantizedRouter, MoeBlockSharedExpert, MoeBlockSharedExpertQuantizedRouter };

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Xielu: return "xielu";
    case Kernel::Add3LayerNorm: return "add3_layer_norm";
    case Kernel::Mamba1Scan: return "mamba1_scan";
    case Kernel::MoeFc1Relu2: return "moe_fc1_relu2";
    case Kernel::MoeGateUp: return "moe_gateup";
    case Kernel::MoeDown: return "moe_down";
    case Kernel::MoeRoutedForward: return "moe_routed_forward";
    case Kernel::MoeRouter: return "moe_router";
    case Kernel::MoeBlock: return "moe_block";
    case Kernel::MoeBlockQuantizedRouter: return "moe_block_quantized_router";
    case Kernel::MoeBlockSharedExpert: return "moe_block_shared_expert";
    case Kernel::MoeBlockSharedExpertQuantizedRouter: return "moe_block_shared_expert_quantized_router";
  }
  return "?";
}

std::string str(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << "]";
  return o.str();
}

std::string str(mx::Dtype t) {
  std::ostringstream o;
  o << t;
  return o.str();
}

[[noreturn]] void refuse(Kernel k, const std::string& what) {
  throw std::invalid_argument(std::string("[mlxcel_amdgpu::shim::") + kernel_name(k) + "] " + what);
}

// The C ABI's dtype code; only the three activation dtypes exist there.
std::optional<uint32_t> abi_dtype(mx::Dtype t) {
  if (t == mx::float32) return MLXCEL_AMDGPU_F32;
  if (t == mx::float16) return MLXCEL_AMDGPU_F16;
  if (t == mx::bfloat16) return MLXCEL_AMDGPU_BF16;
  return std::nullopt;
}

uint32_t to_u32(Kernel k, const char* what, int64_t v) {
  if (v < 0 || v > int64_t(UINT32_MAX)) refuse(k, std::string(what) + " = " + std::to_string(v) + " does not fit in 32 bits");
  return uint32_t(v);
}

std::string describe_device() {
  char buf[512];
  if (mlxcel_amdgpu_describe_device(buf, sizeof buf) != MLXCEL_AMDGPU_OK) return std::string("no device: ") + mlxcel_amdgpu_last_error();
  return buf;
}

// Predicates that answered false: the kernel cannot run on the library's
// device, which is not a wrong argument but a gate that was skipped.
[[noreturn]] void unavailable(Kernel k, mx::Dtype t) {
  throw std::runtime_error(std::string("[mlxcel_amdgpu::shim::") + kernel_name(k) + "] unavailable for " + str(t) +
                           " on the library's device (" + describe_device() +
                           "); gate the call on its _available predicate");
}

// The bytes of an evaluated array as the host holds them, read without a
// synchronization. On the MLX-ROCm fork array::data() queries (and may
// synchronize) the legacy stream or the whole device, which must not happen
// while a graph is built or a stream captured: there the host's copy is the
// host shadow of a pool buffer, else the unified memory of a default buffer.
// nullptr when the host holds no copy (a pool buffer only the GPU wrote).
const void* host_bytes(const array& a) {
#ifdef MLXCEL_AMDGPU_SHIM_ROCM
  const auto* buf = static_cast<const mx::rocm::RocmBuffer*>(a.buffer().ptr());
  const void* base = buf->host_shadow ? buf->host_shadow : (buf->device == -1 ? buf->data : nullptr);
  return base ? static_cast<const char*>(base) + a.offset() : nullptr;
#else
  return const_cast<array&>(a).data<void>();
#endif
}

// The evaluated one-element array a constant starts from, following `a`
// through the Full/Broadcast/Reshape nodes that only move one value around
// (what mlxcel's `full({1}, v, float32)` builds); else the op the walk stopped
// at (an AsType or anything else could change the value).
struct ConstantSource {
  std::optional<array> leaf;
  std::string stopped_at;
};

ConstantSource constant_source(array a) {
  for (int depth = 0; !a.is_available(); ++depth) {
    const std::string op = a.has_primitive() ? a.primitive().name() : "no primitive";
    if (depth == 8 || a.size() != 1 || a.inputs().size() != 1 ||
        (op != "Full" && op != "Broadcast" && op != "Reshape") || a.inputs()[0].dtype() != a.dtype() ||
        a.inputs()[0].size() != 1)
      return {std::nullopt, op};
    a = a.inputs()[0];
  }
  if (a.size() != 1) return {std::nullopt, "a " + std::to_string(a.size()) + "-element array"};
  return {a, ""};
}

// The value of a one-element scalar input, known while the graph is built
// (constant_source). The C ABI takes scalars by value, so they never enter the
// launch; one that is not such a constant is refused rather than evaluated,
// which would synchronize.
float scalar_input(Kernel k, const array& input, const char* name) {
  if (input.dtype() != mx::float32 || input.size() != 1 || input.ndim() > 1)
    refuse(k, std::string("input '") + name + "' must be a [1] float32 array, got " + str(input.shape()) + " " +
                  str(input.dtype()));
  ConstantSource source = constant_source(input);
  if (!source.leaf)
    refuse(k, std::string("input '") + name + "' must be a constant the host knows (full({1}, value, float32) or an "
                  "evaluated array); it is computed by " + source.stopped_at);
  const void* bytes = host_bytes(*source.leaf);
  if (!bytes)
    refuse(k, std::string("input '") + name + "' is a device buffer the host holds no copy of; pass it as "
                  "full({1}, value, float32)");
  float v;
  std::memcpy(&v, bytes, sizeof v);
  if (!std::isfinite(v)) refuse(k, std::string("input '") + name + "' must be finite, got " + std::to_string(v));
  return v;
}

// The value of `a` if it is a one-element constant (constant_source) of a
// float dtype, else nothing.
std::optional<float> constant_of(const array& a) {
  ConstantSource source = constant_source(a);
  const void* bytes = source.leaf ? host_bytes(*source.leaf) : nullptr;
  if (!bytes) return std::nullopt;
  if (a.dtype() == mx::float32) return *static_cast<const float*>(bytes);
  if (a.dtype() == mx::float16) return float(*static_cast<const mx::float16_t*>(bytes));
  if (a.dtype() == mx::bfloat16) return float(*static_cast<const mx::bfloat16_t*>(bytes));
  return std::nullopt;
}

// The template arguments of one call: every name read once, with the type
// mlxcel passes; leftovers are refused.
class Template {
 public:
  Template(Kernel k, const TemplateArgs& args) : k_(k) {
    for (const auto& [name, value] : args) {
      if (!values_.emplace(name, value).second) refuse(k_, "template argument '" + name + "' given twice");
    }
  }

  mx::Dtype dtype(const char* name) {
    auto v = take(name);
    if (!v) refuse(k_, std::string("missing template argument '") + name + "' (a dtype)");
    if (!std::holds_alternative<mx::Dtype>(*v)) refuse(k_, std::string("template argument '") + name + "' must be a dtype");
    return std::get<mx::Dtype>(*v);
  }

  // An int argument that must equal `expected` (a shape mlxcel also passes
  // as a template constant); optional ones may be absent.
  void int_equal(const char* name, int64_t expected, bool required) {
    auto v = take(name);
    if (!v) {
      if (required) refuse(k_, std::string("missing template argument '") + name + "' (= " + std::to_string(expected) + ")");
      return;
    }
    if (!std::holds_alternative<int>(*v)) refuse(k_, std::string("template argument '") + name + "' must be an int");
    if (std::get<int>(*v) != expected)
      refuse(k_, std::string("template argument '") + name + "' = " + std::to_string(std::get<int>(*v)) +
                     " disagrees with the inputs (" + std::to_string(expected) + ")");
  }

  int int_value(const char* name) {
    auto v = take(name);
    if (!v) refuse(k_, std::string("missing template argument '") + name + "'");
    if (!std::holds_alternative<int>(*v)) refuse(k_, std::string("template argument '") + name + "' must be an int");
    return std::get<int>(*v);
  }

  void done() {
    if (!values_.empty()) refuse(k_, "unexpected template argument '" + values_.begin()->first + "'");
  }

 private:
  std::optional<mx::fast::TemplateArg> take(const char* name) {
    auto it = values_.find(name);
    if (it == values_.end()) return std::nullopt;
    auto v = it->second;
    values_.erase(it);
    return v;
  }

  Kernel k_;
  std::map<std::string, mx::fast::TemplateArg> values_;
};

void expect_input(Kernel k, const array& a, const char* name, mx::Dtype dtype, const Shape& shape) {
  if (a.dtype() != dtype) refuse(k, std::string("input '") + name + "' must be " + str(dtype) + ", got " + str(a.dtype()));
  if (a.shape() != shape) refuse(k, std::string("input '") + name + "' must have shape " + str(shape) + ", got " + str(a.shape()));
}

void expect_outputs(Kernel k, const std::vector<Shape>& shapes, const std::vector<mx::Dtype>& dtypes,
                    const std::vector<Shape>& want_shapes, const std::vector<mx::Dtype>& want_dtypes) {
  if (shapes.size() != want_shapes.size() || dtypes.size() != want_dtypes.size())
    refuse(k, "expects " + std::to_string(want_shapes.size()) + " output shapes and dtypes, got " +
                  std::to_string(shapes.size()) + " and " + std::to_string(dtypes.size()));
  for (size_t i = 0; i < want_shapes.size(); ++i) {
    if (shapes[i] != want_shapes[i])
      refuse(k, "output " + std::to_string(i) + " must have shape " + str(want_shapes[i]) + ", got " + str(shapes[i]));
    if (dtypes[i] != want_dtypes[i])
      refuse(k, "output " + std::to_string(i) + " must be " + str(want_dtypes[i]) + ", got " + str(dtypes[i]));
  }
}

// What one launch needs besides its buffers.
struct Launch {
  Kernel kernel;
  uint32_t dtype = 0;
  float scalars[4] = {0, 0, 0, 0};  // xielu: alpha_p, alpha_n, beta, eps; add3: eps
  bool has_bias = false;            // add3
  uint64_t n = 0;                   // xielu
  uint32_t rows = 0, d = 0;         // add3
  uint32_t batch = 0, len = 0, dm = 0, state = 0;  // mamba1_scan
  MlxcelAmdgpuMoeShape moe{};
  uint32_t activation = 0;   // moe_gateup: 0 SwiGLU, 1 GeGLU
  size_t scratch_bytes = 0;  // moe_routed_forward; moe_router's logits; moe_block
  struct RouterShape {
    uint32_t m = 0, n_experts = 0, k = 0, din = 0, norm_topk_prob = 0;
    uint32_t bits = 0, group_size = 0;  // a quantized router's format
  } router{};  // moe_router; moe_block's m, norm_topk_prob and router format

  bool operator==(const Launch& o) const {
    return kernel == o.kernel && dtype == o.dtype && std::memcmp(scalars, o.scalars, sizeof scalars) == 0 &&
           has_bias == o.has_bias && n == o.n && rows == o.rows && d == o.d && batch == o.batch && len == o.len &&
           dm == o.dm && state == o.state && std::memcmp(&moe, &o.moe, sizeof moe) == 0 &&
           activation == o.activation && scratch_bytes == o.scratch_bytes &&
           std::memcmp(&router, &o.router, sizeof router) == 0;
  }
};

void check(Kernel k, MlxcelAmdgpuStatus status) {
  if (status != MLXCEL_AMDGPU_OK)
    throw std::runtime_error(std::string("[mlxcel_amdgpu::shim::") + kernel_name(k) + "] launch failed: " +
                             mlxcel_amdgpu_last_error());
}

// One C ABI call: `in` and `out` are the buffers in the getter's input and
// output order (bias present or not), `stream` the backend's stream or NULL.
MlxcelAmdgpuStatus call_abi(const Launch& l, const std::vector<void*>& in, const std::vector<void*>& out,
                            void* scratch, void* stream) {
  switch (l.kernel) {
    case Kernel::Xielu:
      return mlxcel_amdgpu_xielu(l.dtype, in[0], out[0], l.n, l.scalars[0], l.scalars[1], l.scalars[2], l.scalars[3],
                                 stream);
    case Kernel::Add3LayerNorm:
      return mlxcel_amdgpu_add3_layer_norm(l.dtype, in[0], in[1], in[2], in[3], l.has_bias ? in[4] : nullptr, out[0],
                                           out[1], l.rows, l.d, l.scalars[0], stream);
    case Kernel::Mamba1Scan:
      return mlxcel_amdgpu_mamba1_scan(l.dtype, in[0], in[1], in[2], in[3], static_cast<const float*>(in[4]), in[5],
                                       static_cast<const float*>(in[6]), out[0], static_cast<float*>(out[1]), l.batch,
                                       l.len, l.dm, l.state, stream);
    case Kernel::MoeFc1Relu2:
      return mlxcel_amdgpu_moe_fc1_relu2(l.dtype, l.moe, in[0], static_cast<const uint32_t*>(in[1]),
                                         static_cast<const uint32_t*>(in[2]), in[3], in[4],
                                         static_cast<float*>(out[0]), nullptr, stream);
    case Kernel::MoeGateUp:
      return mlxcel_amdgpu_moe_gateup(l.dtype, l.moe, l.activation, in[0], static_cast<const uint32_t*>(in[1]),
                                      static_cast<const uint32_t*>(in[2]), in[3], in[4],
                                      static_cast<const uint32_t*>(in[5]), in[6], in[7],
                                      static_cast<float*>(out[0]), nullptr, stream);
    case Kernel::MoeDown:
      return mlxcel_amdgpu_moe_down(l.dtype, l.moe, static_cast<const uint32_t*>(in[0]),
                                    static_cast<const uint32_t*>(in[1]), in[2], in[3],
                                    static_cast<const float*>(in[4]), static_cast<const float*>(in[5]),
                                    static_cast<float*>(out[0]), nullptr, stream);
    case Kernel::MoeRoutedForward:
      return mlxcel_amdgpu_moe_routed_forward(
          l.dtype, l.moe, in[0], static_cast<const uint32_t*>(in[1]), static_cast<const float*>(in[8]),
          static_cast<const uint32_t*>(in[2]), in[3], in[4], static_cast<const uint32_t*>(in[5]), in[6], in[7],
          out[0], scratch, l.scratch_bytes, nullptr, stream);
    case Kernel::MoeRouter:
      return mlxcel_amdgpu_moe_router(l.dtype, in[0], in[1], static_cast<float*>(scratch), static_cast<uint32_t*>(out[0]),
                                      static_cast<float*>(out[1]), l.router.m, l.router.n_experts, l.router.k,
                                      l.router.din, l.router.norm_topk_prob, stream);
    case Kernel::MoeBlock:
      return mlxcel_amdgpu_moe_block(l.dtype, l.moe, l.router.m, l.activation, l.router.norm_topk_prob, in[0], in[1],
                                     static_cast<const uint32_t*>(in[2]), in[3], in[4],
                                     static_cast<const uint32_t*>(in[5]), in[6], in[7],
                                     static_cast<const uint32_t*>(in[8]), in[9], in[10], out[0], scratch,
                                     l.scratch_bytes, nullptr, stream);
    case Kernel::MoeBlockQuantizedRouter:
      return mlxcel_amdgpu_moe_block_quantized_router(
          l.dtype, l.moe, l.router.m, l.router.bits, l.router.group_size, l.activation, l.router.norm_topk_prob, in[0],
          static_cast<const uint32_t*>(in[1]), in[2], in[3], static_cast<const uint32_t*>(in[4]), in[5], in[6],
          static_cast<const uint32_t*>(in[7]), in[8], in[9], static_cast<const uint32_t*>(in[10]), in[11], in[12],
          out[0], scratch, l.scratch_bytes, nullptr, stream);
    case Kernel::MoeBlockSharedExpert:
    case Kernel::MoeBlockSharedExpertQuantizedRouter: {
      // The router and the gate row take one input each when dense, three when quantized.
      const bool q = l.kernel == Kernel::MoeBlockSharedExpertQuantizedRouter;
      auto matrix = [&](size_t i) {
        return MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(in[i]), in[i + 1], in[i + 2]};
      };
      auto row = [&](size_t i) { return q ? matrix(i) : MlxcelAmdgpuQuantized{static_cast<const uint32_t*>(in[i]), nullptr, nullptr}; };
      const size_t gate_row = q ? 4 : 2, stacks = q ? 7 : 3;
      return mlxcel_amdgpu_moe_block_shared_expert(
          l.dtype, l.moe, l.router.m, l.router.bits, l.router.group_size, l.activation, l.router.norm_topk_prob, in[0],
          row(1), row(gate_row), matrix(stacks), matrix(stacks + 3), matrix(stacks + 6), matrix(stacks + 9),
          matrix(stacks + 12), matrix(stacks + 15), out[0], scratch, l.scratch_bytes, nullptr, stream);
    }
  }
  return MLXCEL_AMDGPU_INTERNAL;
}

// The library's device must belong to the backend MLX runs the primitive on:
// its pointers are that backend's (host pointers on the CPU stream).
void require_backend(Kernel k, const char* backend) {
  std::string d = describe_device();
  std::string prefix = std::string(backend) + ":";
  if (d.compare(0, prefix.size(), prefix) != 0)
    throw std::runtime_error(std::string("[mlxcel_amdgpu::shim::") + kernel_name(k) + "] MLX runs it on the " +
                             backend + " backend but the library's device is " + d +
                             " (select it with mlxcel_amdgpu_select_backend)");
}

void require_row_contiguous(Kernel k, const std::vector<array>& arrays) {
  // Inputs pass through mx::contiguous when the graph is built; this only
  // catches a defect in that.
  for (const auto& a : arrays)
    if (!a.flags().row_contiguous) throw std::logic_error(std::string(kernel_name(k)) + ": an input is not row-contiguous");
}

// A buffer of `bytes` (a multiple of 4) for a launch's scratch, held by an
// array so the command encoder can keep it alive as a temporary.
array make_scratch(size_t bytes) {
  array tmp({int(bytes / 4)}, mx::float32, nullptr, {});
  tmp.set_data(mx::allocator::malloc(bytes));
  return tmp;
}

// What eval_* does first on every backend (the CPU, CUDA and ROCm command
// encoders take the same calls): gives the outputs their memory and registers
// the inputs and outputs with the encoder. Returns the launch's scratch (none
// for 0 bytes), which a GPU launch hands over with hand_over_scratch.
template <class Encoder>
std::optional<array> prepare_launch(Encoder& encoder, const std::vector<array>& inputs, std::vector<array>& outputs,
                                    size_t scratch_bytes) {
  for (auto& o : outputs) o.set_data(mx::allocator::malloc(o.nbytes()));
  for (const auto& in : inputs) encoder.set_input_array(in);
  for (auto& o : outputs) encoder.set_output_array(o);
  if (scratch_bytes == 0) return std::nullopt;
  return make_scratch(scratch_bytes);
}

// The addresses a GPU launch passes to the C ABI, in the getter's input and
// output order, and the scratch array they point into (kept alive until the
// launch is enqueued).
struct GpuBuffers {
  std::vector<void*> in, out;
  void* scratch = nullptr;
  std::optional<array> scratch_array;
};

// Makes the launch's scratch a temporary of the encoder, which frees it when
// the batch holding the launch is done, and lets go of it here. Called only
// after the launch is enqueued: a ROCm encoder may commit while it enqueues
// (a graph split, or a kernel node ROCm rejects), and a commit hands the
// temporaries gathered so far to the batch before the launch.
template <class Encoder>
void hand_over_scratch(Encoder& encoder, GpuBuffers& b) {
  if (!b.scratch_array) return;
  encoder.add_temporary(*b.scratch_array);
  b.scratch_array.reset();
}

// prepare_launch on a GPU encoder, then every buffer's address through `ptr`
// (the backend's device address of an array).
template <class Encoder, class Ptr>
GpuBuffers gpu_buffers(Encoder& encoder, const std::vector<array>& inputs, std::vector<array>& outputs,
                       size_t scratch_bytes, Ptr ptr) {
  GpuBuffers b;
  b.scratch_array = prepare_launch(encoder, inputs, outputs, scratch_bytes);
  for (const auto& a : inputs) b.in.push_back(ptr(a));
  for (const auto& a : outputs) b.out.push_back(ptr(a));
  if (b.scratch_array) b.scratch = ptr(*b.scratch_array);
  return b;
}

// The MLX primitive of every kernel: eval_* allocates the outputs and hands
// the launch to the backend's command encoder, which orders it with MLX's
// own work on that stream.
class AbiKernel : public mx::Primitive {
 public:
  AbiKernel(mx::Stream s, Launch launch) : mx::Primitive(s), launch_(launch) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    const Kernel k = launch_.kernel;
    require_backend(k, "cpu");
    require_row_contiguous(k, inputs);
    auto& encoder = mx::cpu::get_command_encoder(stream());
    std::optional<array> scratch = prepare_launch(encoder, inputs, outputs, launch_.scratch_bytes);
    // The task runs on the stream's thread after the inputs' tasks; only
    // there may their contents be read. The arrays (the scratch too) travel
    // with it so their buffers outlive it.
    encoder.dispatch([launch = launch_, ins = inputs, outs = outputs, scratch]() mutable {
      std::vector<void*> in, out;
      for (auto& a : ins) in.push_back(a.data<void>());
      for (auto& a : outs) out.push_back(a.data<void>());
      check(launch.kernel, call_abi(launch, in, out, scratch ? scratch->data<void>() : nullptr, nullptr));
    });
  }

  void eval_gpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    const Kernel k = launch_.kernel;
    require_row_contiguous(k, inputs);
#if defined(MLXCEL_AMDGPU_SHIM_CUDA)
    require_backend(k, "cuda");
    auto& encoder = mx::cu::get_command_encoder(stream());
    GpuBuffers b = gpu_buffers(encoder, inputs, outputs, launch_.scratch_bytes, device_ptr);
    // Our kernels are launched on the encoder's stream while it captures, so
    // they become one child graph node of MLX's CUDA graph, ordered by the
    // input and output registration above like MLX's own library calls.
    {
      auto capture = encoder.capture_context();
      MlxcelAmdgpuStatus status =
          call_abi(launch_, b.in, b.out, b.scratch, static_cast<void*>(static_cast<cudaStream_t>(encoder.stream())));
      if (status != MLXCEL_AMDGPU_OK) capture.discard = true;
      check(k, status);
    }
    hand_over_scratch(encoder, b);
#elif defined(MLXCEL_AMDGPU_SHIM_ROCM)
    require_backend(k, "hip");
    auto& encoder = mx::rocm::get_command_encoder(stream());
    GpuBuffers b = gpu_buffers(encoder, inputs, outputs, launch_.scratch_bytes, rocm_device_ptr);
    if (mx::rocm::use_hip_graphs()) {
      // The launches become kernel nodes of the graph the encoder builds,
      // without splitting it; the described arguments live until the
      // encoder lets go of the graph that reads them.
      std::shared_ptr<MlxcelAmdgpuLaunchList> list = describe(k, b);
      const size_t n = mlxcel_amdgpu_launch_list_len(list.get());
      for (size_t i = 0; i < n; ++i) {
        MlxcelAmdgpuLaunchDesc d;
        check(k, mlxcel_amdgpu_launch_list_get(list.get(), i, &d));
        encoder.add_module_kernel_node(d.function, dim3(d.grid[0], d.grid[1], d.grid[2]),
                                       dim3(d.block[0], d.block[1], d.block[2]), d.shared_mem_bytes, d.kernel_params,
                                       list);
      }
    } else {
      // Enqueued on the encoder's stream; when that stream is being captured
      // (mlxcel's decode capture), the library keeps the arguments alive for
      // the graph's replays.
      encoder.launch_kernel(
          [&](hipStream_t s) { check(k, call_abi(launch_, b.in, b.out, b.scratch, static_cast<void*>(s))); });
    }
    hand_over_scratch(encoder, b);
#else
    (void)outputs;
    throw std::runtime_error(std::string("[mlxcel_amdgpu::shim::") + kernel_name(k) +
                             "] this shim was built without a GPU backend (MLXCEL_AMDGPU_SHIM_CUDA or "
                             "MLXCEL_AMDGPU_SHIM_ROCM); only the CPU stream works");
#endif
  }

  const char* name() const override {
    return name_for(launch_.kernel);
  }

  bool is_equivalent(const mx::Primitive& other) const override {
    const auto* o = dynamic_cast<const AbiKernel*>(&other);
    return o && o->launch_ == launch_;
  }

 private:
  static const char* name_for(Kernel k) {
    switch (k) {
      case Kernel::Xielu: return "MlxcelAmdgpuXielu";
      case Kernel::Add3LayerNorm: return "MlxcelAmdgpuAdd3LayerNorm";
      case Kernel::Mamba1Scan: return "MlxcelAmdgpuMamba1Scan";
      case Kernel::MoeFc1Relu2: return "MlxcelAmdgpuMoeFc1Relu2";
      case Kernel::MoeGateUp: return "MlxcelAmdgpuMoeGateUp";
      case Kernel::MoeDown: return "MlxcelAmdgpuMoeDown";
      case Kernel::MoeRoutedForward: return "MlxcelAmdgpuMoeRoutedForward";
      case Kernel::MoeRouter: return "MlxcelAmdgpuMoeRouter";
      case Kernel::MoeBlock: return "MlxcelAmdgpuMoeBlock";
      case Kernel::MoeBlockQuantizedRouter: return "MlxcelAmdgpuMoeBlockQuantizedRouter";
      case Kernel::MoeBlockSharedExpert: return "MlxcelAmdgpuMoeBlockSharedExpert";
      case Kernel::MoeBlockSharedExpertQuantizedRouter: return "MlxcelAmdgpuMoeBlockSharedExpertQuantizedRouter";
    }
    return "MlxcelAmdgpu";
  }

#if defined(MLXCEL_AMDGPU_SHIM_CUDA)
  // The device address of a buffer. Array::data() would move a CUDA buffer to
  // unified memory for the host; the kernels need the device pointer.
  static void* device_ptr(const array& a) {
    auto* buf = static_cast<const mx::cu::CudaBuffer*>(a.buffer().ptr());
    return static_cast<char*>(buf->data) + a.offset();
  }
#endif
#if defined(MLXCEL_AMDGPU_SHIM_ROCM)
  // The device address of a buffer, as the fork's own kernels take it
  // (gpu_ptr): a host shadow the host wrote is flushed to the device first.
  // array::data() would instead synchronize the legacy stream (default
  // buffers) or the device, and hand back the host shadow (pool buffers).
  static void* rocm_device_ptr(const array& a) {
    auto* buf = static_cast<mx::rocm::RocmBuffer*>(const_cast<array&>(a).buffer().ptr());
    if (buf->host_dirty) mx::rocm::allocator().flush_host_shadow(*buf);
    return static_cast<char*>(buf->data) + a.offset();
  }

  // This launch's kernel launches, described by the library instead of
  // enqueued; the list (and the arguments it owns) is released with the
  // last reference.
  std::shared_ptr<MlxcelAmdgpuLaunchList> describe(Kernel k, const GpuBuffers& b) const {
    check(k, mlxcel_amdgpu_describe_begin());
    MlxcelAmdgpuStatus status = call_abi(launch_, b.in, b.out, b.scratch, nullptr);
    MlxcelAmdgpuLaunchList* list = nullptr;
    MlxcelAmdgpuStatus ended = mlxcel_amdgpu_describe_end(&list);
    std::shared_ptr<MlxcelAmdgpuLaunchList> owned(list, mlxcel_amdgpu_launch_list_release);
    check(k, status);
    check(k, ended);
    return owned;
  }
#endif

  Launch launch_;
};

// The arrays a getter returns: the primitive over row-contiguous copies of
// the buffers it reads (mx::contiguous shares a buffer that already is).
std::vector<array> make_outputs(const mx::Stream& s, const Launch& launch, std::vector<Shape> shapes,
                                const std::vector<mx::Dtype>& dtypes, const std::vector<array>& buffers,
                                bool verbose) {
  std::vector<array> inputs;
  for (const auto& b : buffers) inputs.push_back(mx::contiguous(b, false, s));
  if (verbose) std::cerr << "[mlxcel_amdgpu::shim::" << kernel_name(launch.kernel) << "] on " << describe_device() << "\n";
  return array::make_arrays(std::move(shapes), dtypes, std::make_shared<AbiKernel>(s, launch), inputs);
}

// One call of a getter's function: the arguments of MLX's
// CustomKernelFunction that a kernel reads, after the checks every kernel
// makes (the input count, no init_value). The grid and threadgroup arguments
// are MLX's for Metal kernels; ours are launched by the library.
struct Call {
  Kernel k;
  const std::vector<array>& inputs;
  const std::vector<Shape>& shapes;
  const std::vector<mx::Dtype>& dtypes;
  Template t;
  bool verbose;
  mx::StreamOrDevice sd;

  // The primitive's outputs over `buffers` (see make_outputs).
  std::vector<array> outputs(const Launch& l, const std::vector<array>& buffers) const {
    return make_outputs(mx::to_stream(sd), l, shapes, dtypes, buffers, verbose);
  }
};

using Body = std::vector<array> (*)(Call&);

// The function of the getter of `K`: `N_INPUTS` inputs, then `BODY`, made once.
template <Kernel K, size_t N_INPUTS, Body BODY>
CustomKernelFunction& kernel_function() {
  static CustomKernelFunction f = [](const std::vector<array>& inputs, const std::vector<Shape>& shapes,
                                     const std::vector<mx::Dtype>& dtypes, std::tuple<int, int, int>,
                                     std::tuple<int, int, int>, TemplateArgs targs, std::optional<float> init_value,
                                     bool verbose, mx::StreamOrDevice sd) {
    if (inputs.size() != N_INPUTS)
      refuse(K, "expects " + std::to_string(N_INPUTS) + " inputs, got " + std::to_string(inputs.size()));
    // The kernels write every output element; an initial value would be a
    // promise they do not keep.
    if (init_value) refuse(K, "init_value is not supported (every output element is written)");
    Call c{K, inputs, shapes, dtypes, Template(K, targs), verbose, sd};
    return BODY(c);
  };
  return f;
}

mx::Dtype activation_dtype(Call& c) {
  mx::Dtype d = c.t.dtype("T");
  if (!abi_dtype(d)) refuse(c.k, "template argument 'T' must be float32, float16 or bfloat16, got " + str(d));
  return d;
}

std::vector<array> xielu(Call& c) {
  const Kernel k = c.k;
  mx::Dtype T = activation_dtype(c);
  const array& x = c.inputs[0];
  if (x.ndim() != 1) refuse(k, "input 'x' must be flat ([n]), got " + str(x.shape()));
  expect_input(k, x, "x", T, x.shape());
  c.t.int_equal("n", int64_t(x.size()), false);
  c.t.done();
  expect_outputs(k, c.shapes, c.dtypes, {x.shape()}, {T});
  Launch l{k};
  l.dtype = *abi_dtype(T);
  l.n = x.size();
  const char* names[4] = {"alpha_p", "alpha_n", "beta", "eps"};
  for (int i = 0; i < 4; ++i) l.scalars[i] = scalar_input(k, c.inputs[1 + i], names[i]);
  if (!mlxcel_amdgpu_xielu_available(l.dtype)) unavailable(k, T);
  return c.outputs(l, {x});
}

std::vector<array> add3_layer_norm(Call& c) {
  const Kernel k = c.k;
  const std::vector<array>& inputs = c.inputs;
  mx::Dtype T = activation_dtype(c);
  const array& x = inputs[2];
  if (x.ndim() < 1 || x.shape().back() < 1) refuse(k, "input 'rx' must have a non-empty last axis, got " + str(x.shape()));
  const int64_t D = x.shape().back();
  expect_input(k, inputs[0], "ra", T, x.shape());
  expect_input(k, inputs[1], "rb", T, x.shape());
  expect_input(k, x, "rx", T, x.shape());
  expect_input(k, inputs[3], "w", T, {int(D)});
  c.t.int_equal("D", D, true);
  c.t.int_equal("W_STRIDE", 1, true);
  const int b_stride = c.t.int_value("B_STRIDE");
  c.t.done();
  const array& bias = inputs[4];
  if (b_stride == 1) {
    expect_input(k, bias, "bias", T, {int(D)});
  } else if (b_stride == 0) {
    if (bias.dtype() != T || bias.size() != 1)
      refuse(k, "input 'bias' with B_STRIDE 0 must be one " + str(T) + " element, got " + str(bias.shape()) + " " +
                    str(bias.dtype()));
  } else {
    refuse(k, "template argument 'B_STRIDE' must be 0 or 1, got " + std::to_string(b_stride));
  }
  expect_outputs(k, c.shapes, c.dtypes, {x.shape(), x.shape()}, {T, T});
  Launch l{k};
  l.dtype = *abi_dtype(T);
  l.scalars[0] = scalar_input(k, inputs[5], "eps");
  if (l.scalars[0] < 0) refuse(k, "input 'eps' must not be negative");
  const int64_t rows = int64_t(x.size()) / D;
  l.rows = to_u32(k, "rows", rows);
  l.d = to_u32(k, "D", D);
  if (!mlxcel_amdgpu_add3_layer_norm_available(l.dtype)) unavailable(k, T);
  if (!mlxcel_amdgpu_add3_layer_norm_supports(l.dtype, l.rows, l.d))
    refuse(k, "shape not supported: D = " + std::to_string(D) + " (at most " + std::to_string(MLXCEL_AMDGPU_ADD3_MAX_D) +
                  "), rows = " + std::to_string(rows) + " (at most " + std::to_string(MLXCEL_AMDGPU_ADD3_MAX_ROWS) + ")");
  std::vector<array> buffers = {inputs[0], inputs[1], x, inputs[3]};
  if (b_stride == 1) {
    l.has_bias = true;
    buffers.push_back(bias);
  } else {
    // mlxcel passes zeros({1}) when the norm has no bias: that is the C ABI's
    // NULL bias (+0.0). Any other broadcast scalar is expanded to a row.
    auto v = constant_of(bias);
    if (!(v && *v == 0.0f)) {
      l.has_bias = true;
      buffers.push_back(mx::broadcast_to(mx::reshape(bias, {1}, c.sd), {int(D)}, c.sd));
    }
  }
  return c.outputs(l, buffers);
}

std::vector<array> mamba1_scan(Call& c) {
  const Kernel k = c.k;
  const std::vector<array>& inputs = c.inputs;
  mx::Dtype T = activation_dtype(c);
  const array& X = inputs[0];
  const array& Bm = inputs[2];
  if (X.ndim() != 3) refuse(k, "input 'X' must be [B, L, Dm], got " + str(X.shape()));
  if (Bm.ndim() != 3) refuse(k, "input 'Bm' must be [B, L, N], got " + str(Bm.shape()));
  const int B = X.shape(0), L = X.shape(1), Dm = X.shape(2), N = Bm.shape(2);
  expect_input(k, X, "X", T, {B, L, Dm});
  expect_input(k, inputs[1], "DT", T, {B, L, Dm});
  expect_input(k, Bm, "Bm", T, {B, L, N});
  expect_input(k, inputs[3], "Cm", T, {B, L, N});
  expect_input(k, inputs[4], "A", mx::float32, {Dm, N});
  expect_input(k, inputs[5], "Dp", T, {Dm});
  expect_input(k, inputs[6], "state_in", mx::float32, {B, Dm, N});
  c.t.int_equal("N", N, true);
  c.t.int_equal("Dm", Dm, true);
  c.t.done();
  expect_outputs(k, c.shapes, c.dtypes, {{B, L, Dm}, {B, Dm, N}}, {T, mx::float32});
  Launch l{k};
  l.dtype = *abi_dtype(T);
  l.batch = to_u32(k, "B", B);
  l.len = to_u32(k, "L", L);
  l.dm = to_u32(k, "Dm", Dm);
  l.state = to_u32(k, "N", N);
  if (!mlxcel_amdgpu_mamba1_scan_available(l.dtype)) unavailable(k, T);
  if (!mlxcel_amdgpu_mamba1_scan_supports(l.dtype, l.batch, l.len, l.dm, l.state))
    refuse(k, "shape not supported: B = " + std::to_string(B) + " (1.." + std::to_string(MLXCEL_AMDGPU_MAMBA1_MAX_BATCH) +
                  "), L = " + std::to_string(L) + " (at least 1), Dm = " + std::to_string(Dm) + ", N = " +
                  std::to_string(N) + " (1.." + std::to_string(MLXCEL_AMDGPU_MAMBA1_MAX_N) + ")");
  return c.outputs(l, inputs);
}

// The MoE template arguments (shared by the three MoE getters) and the
// checks of the expert stacks they imply.
struct MoeArgs {
  mx::Dtype T;
  MlxcelAmdgpuMoeShape shape;

  // The launch of this shape and dtype.
  Launch launch(Kernel k) const {
    Launch l{k};
    l.dtype = *abi_dtype(T);
    l.moe = shape;
    return l;
  }
};

// The size of `a` (any shape: mlxcel passes the router's [1, K] or [K]
// indices and scores as they come, and x as [1, Din] or [Din]).
void expect_elements(Kernel k, const array& a, const char* name, mx::Dtype dtype, int64_t count) {
  if (a.dtype() != dtype) refuse(k, std::string("input '") + name + "' must be " + str(dtype) + ", got " + str(a.dtype()));
  if (int64_t(a.size()) != count)
    refuse(k, std::string("input '") + name + "' must hold " + std::to_string(count) + " elements, got " + str(a.shape()));
}

// Which shapes a MoE getter takes: fc1 and gate/up 4 or 8 bits, down also 6.
const char* bits_taken(Kernel k) {
  return k == Kernel::MoeDown ? "4, 6 or 8" : "4 or 8";
}

MoeArgs moe_args(Call& c, const array& indices, const array& any_w) {
  const Kernel k = c.k;
  Template& t = c.t;
  mx::Dtype T = activation_dtype(c);
  if (any_w.ndim() != 3) refuse(k, "the weight stacks must be [E, rows, words], got " + str(any_w.shape()));
  const int K = t.int_value("K");
  const int din = t.int_value("Din"), dff = t.int_value("Dff");
  const int bits = t.int_value("bits"), gs = t.int_value("group_size");
  expect_elements(k, indices, "indices", mx::uint32, K);
  MlxcelAmdgpuMoeShape s{to_u32(k, "E", any_w.shape(0)), to_u32(k, "K", K), to_u32(k, "Din", din),
                         to_u32(k, "Dff", dff),         to_u32(k, "bits", bits), to_u32(k, "group_size", gs)};
  uint32_t code = *abi_dtype(T);
  bool available = k == Kernel::MoeFc1Relu2 || k == Kernel::MoeRoutedForward ? mlxcel_amdgpu_moe_available(code)
                                                                              : mlxcel_amdgpu_moe_gated_available(code);
  if (!available) unavailable(k, T);
  bool supported = k == Kernel::MoeGateUp ? mlxcel_amdgpu_moe_gateup_supports(code, s)
                   : k == Kernel::MoeDown ? mlxcel_amdgpu_moe_down_supports(code, s)
                                          : mlxcel_amdgpu_moe_supports(code, s);
  if (!supported)
    refuse(k, "shape not supported: bits " + std::to_string(bits) + " (" + bits_taken(k) + "), group_size " +
                  std::to_string(gs) + " (32, 64 or 128), Din " + std::to_string(din) + " and Dff " +
                  std::to_string(dff) + " (multiples of group_size, at most " +
                  std::to_string(MLXCEL_AMDGPU_MOE_MAX_COLS) + "), K " + std::to_string(K) + ", E " +
                  std::to_string(any_w.shape(0)));
  return {T, s};
}

// An expert stack in MLX's affine format: w [E, rows, cols*bits/32] u32,
// scales and biases [E, rows, cols/gs] of T.
void expect_stack(Kernel k, const std::vector<array>& in, size_t at, const char* w, const char* s, const char* b,
                  const MoeArgs& m, int rows, int cols) {
  const int E = int(m.shape.n_experts);
  expect_input(k, in[at], w, mx::uint32, {E, rows, int(cols * m.shape.bits / 32)});
  expect_input(k, in[at + 1], s, m.T, {E, rows, int(cols / m.shape.group_size)});
  expect_input(k, in[at + 2], b, m.T, {E, rows, int(cols / m.shape.group_size)});
}

// One expert's matrix at in[at..at + 3] (a shared expert's): codes [rows,
// cols*bits/32] u32, scales and biases [rows, cols/group_size] T.
void expect_matrix(Kernel k, const std::vector<array>& in, size_t at, const char* w, const char* s, const char* b,
                   const MoeArgs& m, int rows, int cols) {
  expect_input(k, in[at], w, mx::uint32, {rows, int(cols * m.shape.bits / 32)});
  expect_input(k, in[at + 1], s, m.T, {rows, int(cols / m.shape.group_size)});
  expect_input(k, in[at + 2], b, m.T, {rows, int(cols / m.shape.group_size)});
}

// The inputs moe_fc1_relu2 and moe_routed_forward begin with: x [Din],
// indices [K] and the fc1 stack; their shape and dtype.
MoeArgs fc1_inputs(Call& c) {
  MoeArgs m = moe_args(c, c.inputs[1], c.inputs[2]);
  c.t.done();
  const int din = m.shape.din, dff = m.shape.dff;
  expect_elements(c.k, c.inputs[0], "x", m.T, din);
  expect_stack(c.k, c.inputs, 2, "fc1_w", "fc1_s", "fc1_b", m, dff, din);
  return m;
}

std::vector<array> moe_fc1_relu2(Call& c) {
  MoeArgs m = fc1_inputs(c);
  expect_outputs(c.k, c.shapes, c.dtypes, {{int(m.shape.k), int(m.shape.dff)}}, {mx::float32});
  return c.outputs(m.launch(c.k), c.inputs);
}

// mlxcel's gate/up step of its SwiGLU and GeGLU experts: inputs {x, indices,
// gate_w, gate_s, gate_b, up_w, up_s, up_b}, template argument "act" the
// activation (0 SwiGLU, 1 GeGLU).
std::vector<array> moe_gateup(Call& c) {
  const Kernel k = c.k;
  const std::vector<array>& inputs = c.inputs;
  MoeArgs m = moe_args(c, inputs[1], inputs[2]);
  const int act = c.t.int_value("act");
  c.t.done();
  if (act != 0 && act != 1) refuse(k, "template argument 'act' = " + std::to_string(act) + " is not 0 (SwiGLU) or 1 (GeGLU)");
  const int K = m.shape.k, din = m.shape.din, dff = m.shape.dff;
  expect_elements(k, inputs[0], "x", m.T, din);
  expect_stack(k, inputs, 2, "gate_w", "gate_s", "gate_b", m, dff, din);
  expect_stack(k, inputs, 5, "up_w", "up_s", "up_b", m, dff, din);
  if (inputs[5].shape(0) != int(m.shape.n_experts))
    refuse(k, "input 'up_w' holds " + std::to_string(inputs[5].shape(0)) + " experts, 'gate_w' " +
                  std::to_string(m.shape.n_experts));
  expect_outputs(k, c.shapes, c.dtypes, {{K, dff}}, {mx::float32});
  Launch l = m.launch(k);
  l.activation = uint32_t(act);
  return c.outputs(l, inputs);
}

std::vector<array> moe_down(Call& c) {
  const Kernel k = c.k;
  const std::vector<array>& inputs = c.inputs;
  MoeArgs m = moe_args(c, inputs[0], inputs[1]);
  c.t.done();
  const int K = m.shape.k, din = m.shape.din, dff = m.shape.dff;
  expect_stack(k, inputs, 1, "down_w", "down_s", "down_b", m, din, dff);
  expect_input(k, inputs[4], "act_g", mx::float32, {K, dff});
  expect_elements(k, inputs[5], "scores", mx::float32, K);
  expect_outputs(k, c.shapes, c.dtypes, {{K, din}}, {mx::float32});
  return c.outputs(m.launch(k), inputs);
}

std::vector<array> moe_routed_forward(Call& c) {
  const Kernel k = c.k;
  const std::vector<array>& inputs = c.inputs;
  MoeArgs m = fc1_inputs(c);
  const int K = m.shape.k, din = m.shape.din, dff = m.shape.dff;
  expect_stack(k, inputs, 5, "down_w", "down_s", "down_b", m, din, dff);
  if (inputs[5].shape(0) != int(m.shape.n_experts))
    refuse(k, "input 'down_w' holds " + std::to_string(inputs[5].shape(0)) + " experts, 'fc1_w' " +
                  std::to_string(m.shape.n_experts));
  expect_elements(k, inputs[8], "scores", mx::float32, K);
  expect_outputs(k, c.shapes, c.dtypes, {{din}}, {m.T});
  Launch l = m.launch(k);
  if (mlxcel_amdgpu_moe_scratch_bytes(m.shape.k, m.shape.din, m.shape.dff, &l.scratch_bytes) != MLXCEL_AMDGPU_OK)
    refuse(k, std::string("no scratch size: ") + mlxcel_amdgpu_last_error());
  return c.outputs(l, inputs);
}

// The router of the routed experts: inputs {x [M, Din] T, W_r [E, Din] T},
// outputs {ids [M, K] u32, scores [M, K] f32}, template arguments {"T", "K",
// "norm_topk_prob" (0 or 1)}. The f32 logits [M, E] between the two launches
// are the launch's scratch.
std::vector<array> moe_router(Call& c) {
  const Kernel k = c.k;
  mx::Dtype T = activation_dtype(c);
  const array& x = c.inputs[0];
  const array& wr = c.inputs[1];
  if (x.ndim() != 2) refuse(k, "input 'x' must be [M, Din], got " + str(x.shape()));
  if (wr.ndim() != 2) refuse(k, "input 'W_r' must be [E, Din], got " + str(wr.shape()));
  const int M = x.shape(0), din = x.shape(1), E = wr.shape(0);
  expect_input(k, x, "x", T, {M, din});
  expect_input(k, wr, "W_r", T, {E, din});
  const int K = c.t.int_value("K");
  const int norm = c.t.int_value("norm_topk_prob");
  c.t.done();
  if (norm != 0 && norm != 1)
    refuse(k, "template argument 'norm_topk_prob' = " + std::to_string(norm) + " is not 0 or 1");
  Launch l{k};
  l.dtype = *abi_dtype(T);
  l.router = {to_u32(k, "M", M), to_u32(k, "E", E), to_u32(k, "K", K), to_u32(k, "Din", din), uint32_t(norm)};
  expect_outputs(k, c.shapes, c.dtypes, {{M, K}, {M, K}}, {mx::uint32, mx::float32});
  if (!mlxcel_amdgpu_moe_router_available(l.dtype)) unavailable(k, T);
  if (!mlxcel_amdgpu_moe_router_supports(l.dtype, l.router.m, l.router.n_experts, l.router.k, l.router.din))
    refuse(k, "shape not supported: M " + std::to_string(M) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_ROUTER_MAX_TOKENS) + "), E " + std::to_string(E) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS) + "), K " + std::to_string(K) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_ROUTER_MAX_K) + ", at most E), Din " + std::to_string(din) +
                  " (at least 1)");
  l.scratch_bytes = size_t(M) * size_t(E) * 4;
  return c.outputs(l, c.inputs);
}

// The whole block of a gated MoE layer (Qwen3 MoE): inputs {x [M, Din] T,
// the router, gate_w, gate_s, gate_b, up_w, up_s, up_b, down_w, down_s,
// down_b}, output {[M, Din] T}, template arguments {"T", "K", "bits",
// "group_size", "act", "norm_topk_prob"}; E, Din and Dff come from the
// shapes. The router is W_r [E, Din] T, or with `quantized_router` three
// inputs router_w [E, Din*router_bits/32] u32, router_s and router_b [E,
// Din/router_group_size] T and the template arguments "router_bits" and
// "router_group_size". With `shared` (Qwen3-Next's shared expert), the
// shared expert's gate row follows the router in its format (W_sg [1, Din] T,
// or expert_gate_w [1, Din*router_bits/32] u32, expert_gate_s and
// expert_gate_b [1, Din/router_group_size] T), and its matrices follow the
// routed stacks: shared_gate_w, _s, _b and shared_up_w, _s, _b [Dff, ...],
// shared_down_w, _s, _b [Din, ...], one expert of the stacks' format. The
// router's logits, ids and scores, the experts' act and part and the down
// launch's arrival counts are the launch's scratch.
std::vector<array> moe_block_of(Call& c, bool quantized_router, bool shared) {
  const Kernel k = c.k;
  const std::vector<array>& in = c.inputs;
  const size_t router_inputs = quantized_router ? 3 : 1;
  const size_t stacks = 1 + router_inputs * (shared ? 2 : 1);  // the first input after the router's (and gate row's)
  mx::Dtype T = activation_dtype(c);
  const array& x = in[0];
  const array& wr = in[1];
  const char* wr_name = quantized_router ? "router_w" : "W_r";
  if (x.ndim() != 2) refuse(k, "input 'x' must be [M, Din], got " + str(x.shape()));
  if (wr.ndim() != 2) refuse(k, std::string("input '") + wr_name + "' must be [E, Din], got " + str(wr.shape()));
  if (in[stacks].ndim() != 3)
    refuse(k, "input 'gate_w' must be [E, Dff, Din*bits/32], got " + str(in[stacks].shape()));
  const int M = x.shape(0), din = x.shape(1), E = wr.shape(0), dff = in[stacks].shape(1);
  expect_input(k, x, "x", T, {M, din});
  const int K = c.t.int_value("K");
  const int bits = c.t.int_value("bits"), gs = c.t.int_value("group_size");
  const int act = c.t.int_value("act");
  const int norm = c.t.int_value("norm_topk_prob");
  const int rbits = quantized_router ? c.t.int_value("router_bits") : 0;
  const int rgs = quantized_router ? c.t.int_value("router_group_size") : 0;
  c.t.done();
  if (act != 0 && act != 1) refuse(k, "template argument 'act' = " + std::to_string(act) + " is not 0 (SwiGLU) or 1 (GeGLU)");
  if (norm != 0 && norm != 1)
    refuse(k, "template argument 'norm_topk_prob' = " + std::to_string(norm) + " is not 0 or 1");
  Launch l{k};
  l.dtype = *abi_dtype(T);
  l.moe = {to_u32(k, "E", E),     to_u32(k, "K", K),       to_u32(k, "Din", din),
           to_u32(k, "Dff", dff), to_u32(k, "bits", bits), to_u32(k, "group_size", gs)};
  l.activation = uint32_t(act);
  l.router.m = to_u32(k, "M", M);
  l.router.norm_topk_prob = uint32_t(norm);
  if (quantized_router) {
    l.router.bits = to_u32(k, "router_bits", rbits);
    l.router.group_size = to_u32(k, "router_group_size", rgs);
  }
  bool available, supported;
  if (shared) {
    available = mlxcel_amdgpu_moe_block_shared_expert_available(l.dtype, l.router.bits);
    supported = mlxcel_amdgpu_moe_block_shared_expert_supports(l.dtype, l.moe, l.router.m, l.router.bits,
                                                               l.router.group_size);
  } else if (quantized_router) {
    available = mlxcel_amdgpu_moe_block_quantized_router_available(l.dtype);
    supported = mlxcel_amdgpu_moe_block_quantized_router_supports(l.dtype, l.moe, l.router.m, l.router.bits,
                                                                  l.router.group_size);
  } else {
    available = mlxcel_amdgpu_moe_block_available(l.dtype);
    supported = mlxcel_amdgpu_moe_block_supports(l.dtype, l.moe, l.router.m);
  }
  if (!available) unavailable(k, T);
  if (!supported) {
    const std::string router_limits =
        quantized_router ? ", router_bits " + std::to_string(rbits) + " (4 or 8), router_group_size " +
                               std::to_string(rgs) + " (32, 64 or 128, dividing Din)"
                         : "";
    refuse(k, "shape not supported: M " + std::to_string(M) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_MAX_BATCH_TOKENS) + "), K " + std::to_string(K) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_ROUTER_MAX_K) + ", at most E), E " + std::to_string(E) + " (1.." +
                  std::to_string(MLXCEL_AMDGPU_MOE_ROUTER_MAX_EXPERTS) + "), bits " + std::to_string(bits) +
                  " (4 or 8), group_size " + std::to_string(gs) + " (32, 64 or 128), Din " + std::to_string(din) +
                  " and Dff " + std::to_string(dff) + " (multiples of group_size, at most " +
                  std::to_string(MLXCEL_AMDGPU_MOE_MAX_COLS) + ")" + router_limits);
  }
  // The router's rows and, with a shared expert, its gate's one row, in the router's format.
  auto expect_router_rows = [&](size_t at, int rows, const char* w, const char* s, const char* b) {
    if (quantized_router) {
      expect_input(k, in[at], w, mx::uint32, {rows, din * rbits / 32});
      expect_input(k, in[at + 1], s, T, {rows, din / rgs});
      expect_input(k, in[at + 2], b, T, {rows, din / rgs});
    } else {
      expect_input(k, in[at], w, T, {rows, din});
    }
  };
  expect_router_rows(1, E, wr_name, "router_s", "router_b");
  if (shared) {
    if (quantized_router)
      expect_router_rows(4, 1, "expert_gate_w", "expert_gate_s", "expert_gate_b");
    else
      expect_router_rows(2, 1, "W_sg", "", "");
  }
  MoeArgs m{T, l.moe};
  expect_stack(k, in, stacks, "gate_w", "gate_s", "gate_b", m, dff, din);
  expect_stack(k, in, stacks + 3, "up_w", "up_s", "up_b", m, dff, din);
  expect_stack(k, in, stacks + 6, "down_w", "down_s", "down_b", m, din, dff);
  if (shared) {
    expect_matrix(k, in, stacks + 9, "shared_gate_w", "shared_gate_s", "shared_gate_b", m, dff, din);
    expect_matrix(k, in, stacks + 12, "shared_up_w", "shared_up_s", "shared_up_b", m, dff, din);
    expect_matrix(k, in, stacks + 15, "shared_down_w", "shared_down_s", "shared_down_b", m, din, dff);
  }
  expect_outputs(k, c.shapes, c.dtypes, {{M, din}}, {T});
  MlxcelAmdgpuStatus sized = shared ? mlxcel_amdgpu_moe_block_shared_expert_scratch_bytes(l.moe, l.router.m, &l.scratch_bytes)
                                    : mlxcel_amdgpu_moe_block_scratch_bytes(l.moe, l.router.m, &l.scratch_bytes);
  if (sized != MLXCEL_AMDGPU_OK) refuse(k, std::string("no scratch size: ") + mlxcel_amdgpu_last_error());
  return c.outputs(l, in);
}

std::vector<array> moe_block(Call& c) {
  return moe_block_of(c, false, false);
}

std::vector<array> moe_block_quantized_router(Call& c) {
  return moe_block_of(c, true, false);
}

std::vector<array> moe_block_shared_expert(Call& c) {
  return moe_block_of(c, false, true);
}

std::vector<array> moe_block_shared_expert_quantized_router(Call& c) {
  return moe_block_of(c, true, true);
}

bool predicate(mx::Dtype t, bool (*f)(uint32_t)) {
  auto code = abi_dtype(t);
  return code && f(*code);
}

bool fits_u32(int64_t v) {
  return v >= 0 && v <= int64_t(UINT32_MAX);
}

// The C ABI's shape of a gate's arguments, or none when one does not fit in a u32 (a negative
// one included): the gates then answer false, as the launch would refuse it.
std::optional<MlxcelAmdgpuMoeShape> abi_shape(int64_t n_experts, int64_t k, int64_t din, int64_t dff, int64_t bits,
                                              int64_t group_size) {
  for (int64_t v : {n_experts, k, din, dff, bits, group_size})
    if (!fits_u32(v)) return std::nullopt;
  return MlxcelAmdgpuMoeShape{uint32_t(n_experts), uint32_t(k),    uint32_t(din),
                              uint32_t(dff),       uint32_t(bits), uint32_t(group_size)};
}

}  // namespace

// The getter `name`_kernel() of the header: kernel `kind`, `n_inputs` inputs, body `name`.
#define MLXCEL_AMDGPU_GETTER(name, kind, n_inputs) \
  CustomKernelFunction& name##_kernel() { return kernel_function<Kernel::kind, n_inputs, name>(); }

MLXCEL_AMDGPU_GETTER(xielu, Xielu, 5)
MLXCEL_AMDGPU_GETTER(add3_layer_norm, Add3LayerNorm, 6)
MLXCEL_AMDGPU_GETTER(mamba1_scan, Mamba1Scan, 7)
MLXCEL_AMDGPU_GETTER(moe_fc1_relu2, MoeFc1Relu2, 5)
MLXCEL_AMDGPU_GETTER(moe_gateup, MoeGateUp, 8)
MLXCEL_AMDGPU_GETTER(moe_down, MoeDown, 6)
MLXCEL_AMDGPU_GETTER(moe_routed_forward, MoeRoutedForward, 9)
MLXCEL_AMDGPU_GETTER(moe_router, MoeRouter, 2)
MLXCEL_AMDGPU_GETTER(moe_block, MoeBlock, 11)
MLXCEL_AMDGPU_GETTER(moe_block_quantized_router, MoeBlockQuantizedRouter, 13)
MLXCEL_AMDGPU_GETTER(moe_block_shared_expert, MoeBlockSharedExpert, 21)
MLXCEL_AMDGPU_GETTER(moe_block_shared_expert_quantized_router, MoeBlockSharedExpertQuantizedRouter, 25)
#undef MLXCEL_AMDGPU_GETTER

bool xielu_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_xielu_available);
}
bool add3_layer_norm_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_add3_layer_norm_available);
}
bool add3_layer_norm_supports(Dtype t, int64_t rows, int64_t d) {
  auto code = abi_dtype(t);
  return code && fits_u32(rows) && fits_u32(d) && mlxcel_amdgpu_add3_layer_norm_supports(*code, rows, d);
}
bool mamba1_scan_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_mamba1_scan_available);
}
bool mamba1_scan_supports(Dtype t, int64_t batch, int64_t len, int64_t dm, int64_t n) {
  auto code = abi_dtype(t);
  return code && fits_u32(batch) && fits_u32(len) && fits_u32(dm) && fits_u32(n) &&
         mlxcel_amdgpu_mamba1_scan_supports(*code, batch, len, dm, n);
}
bool moe_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_moe_available);
}
bool moe_supports(Dtype t, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int bits, int group_size) {
  auto code = abi_dtype(t);
  auto s = abi_shape(n_experts, k, din, dff, bits, group_size);
  return code && s && mlxcel_amdgpu_moe_supports(*code, *s);
}

bool moe_gated_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_moe_gated_available);
}
bool moe_gated_supports(Dtype t, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int gate_up_bits,
                        int down_bits, int group_size) {
  auto code = abi_dtype(t);
  auto s = abi_shape(n_experts, k, din, dff, gate_up_bits, group_size);
  if (!code || !s || !fits_u32(down_bits)) return false;
  MlxcelAmdgpuMoeShape d = *s;
  d.bits = uint32_t(down_bits);
  return mlxcel_amdgpu_moe_gateup_supports(*code, *s) && mlxcel_amdgpu_moe_down_supports(*code, d);
}

bool moe_router_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_moe_router_available);
}
bool moe_router_supports(Dtype t, int64_t m, int64_t n_experts, int64_t k, int64_t din) {
  auto code = abi_dtype(t);
  return code && fits_u32(m) && fits_u32(n_experts) && fits_u32(k) && fits_u32(din) &&
         mlxcel_amdgpu_moe_router_supports(*code, uint32_t(m), uint32_t(n_experts), uint32_t(k), uint32_t(din));
}

bool moe_block_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_moe_block_available);
}
bool moe_block_supports(Dtype t, int64_t m, int64_t n_experts, int64_t k, int64_t din, int64_t dff, int bits,
                        int group_size) {
  auto code = abi_dtype(t);
  auto s = abi_shape(n_experts, k, din, dff, bits, group_size);
  return code && s && fits_u32(m) && mlxcel_amdgpu_moe_block_supports(*code, *s, uint32_t(m));
}
bool moe_block_quantized_router_available(Dtype t) {
  return predicate(t, mlxcel_amdgpu_moe_block_quantized_router_available);
}
bool moe_block_quantized_router_supports(Dtype t, int64_t m, int64_t n_experts, int64_t k, int64_t din, int64_t dff,
                                         int bits, int group_size, int router_bits, int router_group_size) {
  auto code = abi_dtype(t);
  auto s = abi_shape(n_experts, k, din, dff, bits, group_size);
  return code && s && fits_u32(m) && fits_u32(router_bits) && fits_u32(router_group_size) &&
         mlxcel_amdgpu_moe_block_quantized_router_supports(*code, *s, uint32_t(m), uint32_t(router_bits),
                                                           uint32_t(router_group_size));
}

bool moe_block_shared_expert_available(Dtype t, int router_bits) {
  auto code = abi_dtype(t);
  return code && router_bits >= 0 && mlxcel_amdgpu_moe_block_shared_expert_available(*code, uint32_t(router_bits));
}
bool moe_block_shared_expert_supports(Dtype t, int64_t m, int64_t n_experts, int64_t k, int64_t din, int64_t dff,
                                      int bits, int group_size, int router_bits, int router_group_size) {
  auto code = abi_dtype(t);
  auto s = abi_shape(n_experts, k, din, dff, bits, group_size);
  return code && s && fits_u32(m) && fits_u32(router_bits) && fits_u32(router_group_size) &&
         mlxcel_amdgpu_moe_block_shared_expert_supports(*code, *s, uint32_t(m), uint32_t(router_bits),
                                                        uint32_t(router_group_size));
}

bool xielu_available() {
  return xielu_available(mx::float32) && xielu_available(mx::float16) && xielu_available(mx::bfloat16);
}
bool add3_layer_norm_available() {
  return add3_layer_norm_available(mx::float32) && add3_layer_norm_available(mx::float16) &&
         add3_layer_norm_available(mx::bfloat16);
}
bool mamba1_scan_available() {
  return mamba1_scan_available(mx::float32) && mamba1_scan_available(mx::float16) &&
         mamba1_scan_available(mx::bfloat16);
}
bool moe_available() {
  return moe_available(mx::float32) && moe_available(mx::float16) && moe_available(mx::bfloat16);
}
bool moe_gated_available() {
  return moe_gated_available(mx::float32) && moe_gated_available(mx::float16) && moe_gated_available(mx::bfloat16);
}
bool moe_router_available() {
  return moe_router_available(mx::float32) && moe_router_available(mx::float16) && moe_router_available(mx::bfloat16);
}

bool moe_block_available() {
  return moe_block_available(mx::float32) && moe_block_available(mx::float16) && moe_block_available(mx::bfloat16);
}
bool moe_block_quantized_router_available() {
  return moe_block_quantized_router_available(mx::float32) && moe_block_quantized_router_available(mx::float16) &&
         moe_block_quantized_router_available(mx::bfloat16);
}
bool moe_block_shared_expert_available() {
  for (Dtype t : {mx::float32, mx::float16, mx::bfloat16})
    for (int router_bits : {0, 8})
      if (!moe_block_shared_expert_available(t, router_bits)) return false;
  return true;
}

}  // namespace mlxcel_amdgpu::shim
