// Test double of mlxcel's MLX-ROCm fork (see include/mlx/backend/rocm/), over
// the stand-in HIP runtime. Linked into the test program together with MLX
// 0.32's CPU build, it also stands in for the two MLX functions the fork
// replaces: `allocator::allocator()` (every MLX buffer is a RocmBuffer) and
// `Buffer::raw_ptr()` (what array::data() gives the host). The program's own
// definitions take the place of libmlx.so's, which calls both through its PLT.
//
// Where the double departs from the fork, and why:
// - The simulated device's memory is not host memory, so every buffer has a
//   host copy once the host asks for its data, and raw_ptr() marks it written
//   (the host may write through it); a launch flushes it back first. In the
//   fork only pool buffers (MLX_ROCM_USE_ASYNC_POOL=1) have one; default
//   buffers are unified memory. raw_ptr() keeps the fork's synchronization
//   (a null-stream query, and sync, for default buffers; a device sync for
//   pool buffers) except during a decode capture, which it would invalidate.
//   A default buffer the host wrote reaches the device by a copy here, so a
//   capture must not be the first to use it (the copy would invalidate it);
//   in the fork that memory is shared and needs no copy.
// - The stand-in runs work when it is enqueued, so a committed batch is
//   complete when commit() returns: its temporaries and handlers go then.
// - Each commit instantiates, launches and destroys its graph; the fork keeps
//   executable graphs and updates them, which does not change what a kernel
//   node reads or when its arguments may go.
// - MLX_USE_HIP_GRAPHS and MLX_ROCM_USE_ASYNC_POOL are read at each use, so
//   one test can run both modes; MLX_ROCM_DOUBLE_REJECT_NODES=1 makes every
//   graph kernel node rejected, as ROCm rejects some kernels, which sends
//   add_module_kernel_node down the fork's fallback (commit, then launch).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/backend/rocm/allocator.h"
#include "mlx/backend/rocm/device.h"

namespace mlx::core {

namespace rocm {

namespace {

void check(hipError_t status, const char* what) {
  if (status != hipSuccess)
    throw std::runtime_error(std::string("[mlx-rocm double] ") + what + ": " + hipGetErrorString(status));
}

bool env_is_one(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}

// The fork's ensure_device_flags: blocking-sync waits, set once before any
// HIP call that can create a queue on the device.
void ensure_device_flags(int device) {
  static bool done = false;
  if (done) return;
  check(hipSetDevice(device), "hipSetDevice");
  unsigned flags = 0;
  check(hipGetDeviceFlags(&flags), "hipGetDeviceFlags");
  if (!(flags & hipDeviceScheduleBlockingSync)) check(hipSetDeviceFlags(hipDeviceScheduleBlockingSync), "hipSetDeviceFlags");
  done = true;
}

// While a decode capture is open (g_capturing), the host does not read the
// device's memory; from its start until its graphs are destroyed
// (g_graph_active), frees wait, as in the fork: a captured graph keeps using
// the buffers its launches were given, whatever MLX has let go of since.
bool g_capturing = false;
bool g_graph_active = false;
std::vector<RocmBuffer*> g_deferred_frees;

void destroy_buffer(RocmBuffer* b) {
  if (b->data) check(hipFree(b->data), "hipFree");
  std::free(b->host_shadow);
  delete b;
}

}  // namespace

bool use_hip_graphs() {
  return env_is_one("MLX_USE_HIP_GRAPHS");
}

RocmAllocator& allocator() {
  static RocmAllocator a;
  return a;
}

Buffer RocmAllocator::malloc(size_t size) {
  auto* b = new RocmBuffer{nullptr, size, false, env_is_one("MLX_ROCM_USE_ASYNC_POOL") ? 0 : -1, nullptr, false, nullptr};
  if (size > 0) check(hipMalloc(&b->data, size), "hipMalloc");
  return Buffer(b);
}

void RocmAllocator::free(Buffer buffer) {
  auto* b = static_cast<RocmBuffer*>(buffer.ptr());
  if (!b) return;
  if (g_graph_active) {
    g_deferred_frees.push_back(b);
    return;
  }
  destroy_buffer(b);
}

size_t RocmAllocator::size(Buffer buffer) const {
  auto* b = static_cast<const RocmBuffer*>(buffer.ptr());
  return b ? b->size : 0;
}

void RocmAllocator::ensure_host_shadow(RocmBuffer& buf) {
  if (!buf.host_shadow) buf.host_shadow = std::calloc(buf.size ? buf.size : 1, 1);
  // Mid-capture the device's memory cannot be read without invalidating the
  // capture; a buffer the captured work writes is not the host's to read yet.
  if (!buf.host_dirty && buf.size > 0 && !g_capturing) check(hipMemcpy(buf.host_shadow, buf.data, buf.size, hipMemcpyDeviceToHost), "hipMemcpy (host shadow)");
}

void RocmAllocator::flush_host_shadow(RocmBuffer& buf) {
  if (!buf.host_shadow || !buf.host_dirty) return;
  if (buf.size > 0) check(hipMemcpy(buf.data, buf.host_shadow, buf.size, hipMemcpyHostToDevice), "hipMemcpy (flush)");
  buf.host_dirty = false;
}

CommandEncoder::CommandEncoder(int device) : device_(device) {
  ensure_device_flags(device);
  check(hipStreamCreateWithFlags(&stream_, hipStreamNonBlocking), "hipStreamCreateWithFlags");
}

CommandEncoder::~CommandEncoder() {
  decode_capture_destroy();
  if (build_graph_) (void)hipGraphDestroy(build_graph_);
  (void)hipStreamDestroy(stream_);
}

// The fork records inputs and outputs to order graph nodes; the double's nodes
// run in the order they are added, which is the order of the launches.
void CommandEncoder::set_input_array(const array&) {}
void CommandEncoder::set_output_array(const array&) {}

void CommandEncoder::add_module_kernel_node(void* func, dim3 grid_dim, dim3 block_dim, uint32_t smem_bytes,
                                            void** params, std::shared_ptr<void> args_keepalive) {
  if (!use_hip_graphs() || env_is_one("MLX_ROCM_DOUBLE_REJECT_NODES")) {
    // Eager, or the fork's fallback for a node ROCm rejects: the graph so far
    // is committed first, then the kernel launches at once.
    if (use_hip_graphs()) commit();
    check(hipModuleLaunchKernel(static_cast<hipFunction_t>(func), grid_dim.x, grid_dim.y, grid_dim.z, block_dim.x,
                                block_dim.y, block_dim.z, smem_bytes, stream_, params, nullptr),
          "hipModuleLaunchKernel");
    return;
  }
  if (!build_graph_) check(hipGraphCreate(&build_graph_, 0), "hipGraphCreate");
  hipKernelNodeParams kp{block_dim, nullptr, func, grid_dim, params, smem_bytes};
  hipGraphNode_t node = nullptr;
  check(hipGraphAddKernelNode(&node, build_graph_, nullptr, 0, &kp), "hipGraphAddKernelNode");
  if (args_keepalive) build_keepalive_.push_back(std::move(args_keepalive));
}

void CommandEncoder::add_temporary(const array& arr) {
  temporaries_.push_back(arr.data_shared_ptr());
}

void CommandEncoder::add_completed_handler(std::function<void()> task) {
  completed_handlers_.push_back(std::move(task));
}

void CommandEncoder::commit() {
  // What was gathered so far belongs to the batch committed now.
  std::vector<std::shared_ptr<void>> temporaries = std::move(temporaries_);
  std::vector<std::shared_ptr<void>> keepalive = std::move(build_keepalive_);
  std::vector<std::function<void()>> handlers = std::move(completed_handlers_);
  temporaries_.clear();
  build_keepalive_.clear();
  completed_handlers_.clear();
  if (build_graph_) {
    hipGraph_t graph = build_graph_;
    build_graph_ = nullptr;
    hipGraphExec_t exec = nullptr;
    check(hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0), "hipGraphInstantiate");
    hipError_t launched = hipGraphLaunch(exec, stream_);
    (void)hipGraphExecDestroy(exec);
    (void)hipGraphDestroy(graph);
    check(launched, "hipGraphLaunch");
  }
  // The batch is complete (the stand-in runs work when it is enqueued).
  for (auto& h : handlers) h();
}

void CommandEncoder::synchronize() {
  commit();
  check(hipStreamSynchronize(stream_), "hipStreamSynchronize");
}

bool CommandEncoder::decode_capture_begin() {
  commit();
  if (hipStreamBeginCapture(stream_, hipStreamCaptureModeThreadLocal) != hipSuccess) return false;
  g_capturing = true;
  g_graph_active = true;
  return true;
}

bool CommandEncoder::decode_capture_end_record(int slot) {
  slot &= 1;
  commit();
  hipGraph_t graph = nullptr;
  hipError_t ended = hipStreamEndCapture(stream_, &graph);
  g_capturing = false;
  if (ended != hipSuccess || !graph) return false;
  if (capture_exec_[slot]) (void)hipGraphExecDestroy(capture_exec_[slot]);
  if (capture_graph_[slot]) (void)hipGraphDestroy(capture_graph_[slot]);
  capture_graph_[slot] = graph;
  if (hipGraphInstantiate(&capture_exec_[slot], graph, nullptr, nullptr, 0) != hipSuccess) return false;
  return hipGraphLaunch(capture_exec_[slot], stream_) == hipSuccess;
}

bool CommandEncoder::decode_capture_replay(int slot) {
  slot &= 1;
  return capture_exec_[slot] && hipGraphLaunch(capture_exec_[slot], stream_) == hipSuccess;
}

void CommandEncoder::decode_capture_destroy() {
  for (int i = 0; i < 2; ++i) {
    if (capture_exec_[i]) (void)hipGraphExecDestroy(capture_exec_[i]);
    if (capture_graph_[i]) (void)hipGraphDestroy(capture_graph_[i]);
    capture_exec_[i] = nullptr;
    capture_graph_[i] = nullptr;
  }
  g_graph_active = false;
  std::vector<RocmBuffer*> frees = std::move(g_deferred_frees);
  g_deferred_frees.clear();
  for (auto* b : frees) destroy_buffer(b);
}

CommandEncoder& get_command_encoder(Stream s) {
  static std::map<int, std::unique_ptr<CommandEncoder>> encoders;
  auto it = encoders.find(s.index);
  if (it == encoders.end()) it = encoders.emplace(s.index, std::make_unique<CommandEncoder>(0)).first;
  return *it->second;
}

}  // namespace rocm

namespace allocator {

Allocator& allocator() {
  return rocm::allocator();
}

void* Buffer::raw_ptr() {
  if (!ptr_) return nullptr;
  auto& b = *static_cast<rocm::RocmBuffer*>(ptr_);
  rocm::ensure_device_flags(0);
  // The fork's synchronization, left out while a decode capture is open,
  // where it would invalidate the capture (as the fork's capture flag does).
  if (!rocm::g_capturing) {
    if (b.device == -1) {
      if (hipStreamQuery(nullptr) != hipSuccess) (void)hipStreamSynchronize(nullptr);
    } else {
      (void)hipDeviceSynchronize();
    }
  }
  rocm::allocator().ensure_host_shadow(b);
  b.host_dirty = true;
  return b.host_shadow;
}

}  // namespace allocator

}  // namespace mlx::core
