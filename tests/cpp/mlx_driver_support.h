// What the two MLX shim drivers (mlx_driver.cpp, mlx_rocm_driver.cpp) share:
// the check counters, dtype names and codes, and the test data generator.
#pragma once

#include <cstdint>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <mlx/mlx.h>

#include "mlxcel_amdgpu.h"

namespace mx = mlx::core;
using mx::array;
using mx::Shape;
using TemplateArgs = std::vector<std::pair<std::string, mx::fast::TemplateArg>>;
using Bytes = std::vector<uint8_t>;

inline int g_failures = 0;
inline int g_checks = 0;

// Counts a check; prints it when it fails.
inline void ok(bool cond, const std::string& what) {
  ++g_checks;
  if (!cond) {
    ++g_failures;
    std::cout << "FAIL: " << what << std::endl;
  }
}

inline const char* dname(mx::Dtype t) {
  return t == mx::float32 ? "f32" : t == mx::float16 ? "f16" : t == mx::bfloat16 ? "bf16" : "?";
}

// The C ABI's dtype code of an activation dtype.
inline uint32_t abi(mx::Dtype t) {
  return t == mx::float32 ? MLXCEL_AMDGPU_F32 : t == mx::float16 ? MLXCEL_AMDGPU_F16 : MLXCEL_AMDGPU_BF16;
}

// Knuth's MMIX LCG, values in [-1, 1) * scale + offset (the references' data
// generator, host/reference/data.rs).
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  float next(float scale = 1.0f, float offset = 0.0f) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return (float((s >> 40) / double(1 << 24)) * 2.0f - 1.0f) * scale + offset;
  }
};

inline std::vector<float> values(size_t n, uint64_t seed, float scale = 1.0f, float offset = 0.0f) {
  Lcg g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = g.next(scale, offset);
  return v;
}
