// Test double of mlxcel's MLX-ROCm fork: the command encoder API that the shim
// uses, with the fork's declarations (mlx/backend/rocm/device.h of
// NripeshN/mlx rocm-support at 75915908, as copied into mlxcel's overlay).
// Our own declarations, checked against the fork's header by
// scripts/check-shim-against-fork-headers.sh; implemented in fork_double.cpp
// over the stand-in HIP runtime (hip-standin), which runs the kernels on the
// simulated gfx1151.
//
// What the double keeps of the fork's behaviour, because the shim's
// correctness depends on it:
// - start-up: the first encoder sets the device's flags
//   (hipDeviceScheduleBlockingSync) before it creates its stream;
// - launch_kernel commits (splits) the graph being built before running the
//   launch when HIP graphs are on (MLX_USE_HIP_GRAPHS), and runs it at once
//   otherwise;
// - commit hands the temporaries gathered so far to the batch it commits,
//   whose completion frees them;
// - add_module_kernel_node adds a kernel node that keeps `params` by pointer
//   (CLR does not copy them) and holds `args_keepalive` only until commit
//   instantiates and launches the graph;
// - decode capture records the stream into one graph and replays it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <hip/hip_runtime.h>

#include "mlx/array.h"
#include "mlx/stream.h"

namespace mlx::core::rocm {

bool use_hip_graphs();

class CommandEncoder {
 public:
  explicit CommandEncoder(int device);
  ~CommandEncoder();

  CommandEncoder(const CommandEncoder&) = delete;
  CommandEncoder& operator=(const CommandEncoder&) = delete;

  void set_input_array(const array& arr);
  void set_output_array(const array& arr);

  template <typename F>
  void launch_kernel(F&& func);

  void add_module_kernel_node(void* func, dim3 grid_dim, dim3 block_dim, uint32_t smem_bytes, void** params,
                              std::shared_ptr<void> args_keepalive);

  void add_temporary(const array& arr);
  void add_completed_handler(std::function<void()> task);
  void commit();
  void synchronize();

  bool decode_capture_begin();
  bool decode_capture_end_record(int slot);
  bool decode_capture_replay(int slot);
  void decode_capture_destroy();

 private:
  hipStream_t stream_{nullptr};
  int device_;
  // The open batch: its graph (graph mode) and what its completion releases.
  hipGraph_t build_graph_{nullptr};
  std::vector<std::shared_ptr<void>> build_keepalive_;
  std::vector<std::shared_ptr<void>> temporaries_;
  std::vector<std::function<void()>> completed_handlers_;
  hipGraphExec_t capture_exec_[2]{nullptr, nullptr};
  hipGraph_t capture_graph_[2]{nullptr, nullptr};
};

CommandEncoder& get_command_encoder(Stream s);

template <typename F>
void CommandEncoder::launch_kernel(F&& func) {
  // As in the fork: an op that is not a graph node splits the graph.
  if (use_hip_graphs()) commit();
  func(stream_);
}

}  // namespace mlx::core::rocm
