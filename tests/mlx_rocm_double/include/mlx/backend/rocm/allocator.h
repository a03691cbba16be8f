// Test double of mlxcel's MLX-ROCm fork: the allocator API that the shim and
// the double use, with the fork's declarations (mlx/backend/rocm/allocator.h
// of NripeshN/mlx rocm-support at 75915908, as copied into mlxcel's overlay).
// Our own declarations, checked against the fork's header by
// scripts/check-shim-against-fork-headers.sh; implemented in fork_double.cpp
// over the stand-in HIP runtime.
#pragma once

#include <cstddef>

#include "mlx/allocator.h"

namespace mlx::core::rocm {

using allocator::Buffer;

// The fork's buffer: device memory, and for pool buffers (device >= 0) a host
// copy that array::data() hands the host and that a kernel launch must flush
// back first when the host wrote it (host_dirty).
struct RocmBuffer {
  void* data;
  size_t size;
  bool is_managed;
  int device;  // -1 for unified / non-pool
  void* host_shadow;
  bool host_dirty;
  void* alloc_stream;
};

class RocmAllocator : public allocator::Allocator {
 public:
  Buffer malloc(size_t size) override;
  void free(Buffer buffer) override;
  size_t size(Buffer buffer) const override;

  void ensure_host_shadow(RocmBuffer& buf);
  void flush_host_shadow(RocmBuffer& buf);

 private:
  RocmAllocator() = default;
  friend RocmAllocator& allocator();
};

RocmAllocator& allocator();

}  // namespace mlx::core::rocm
