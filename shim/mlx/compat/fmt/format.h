// Parsing stand-in for <fmt/format.h>, used only when no real fmt is found.
//
// MLX 0.32's CUDA headers (mlx/backend/cuda/lru_cache.h, which device.h
// includes) name fmt::format inside a template the shim never instantiates,
// but the wheel ships no fmt. This declaration lets them parse; it is added
// with -idirafter, so a real fmt on the include path wins, and it is never
// called: an instantiation would fail to link rather than format wrongly.
#pragma once

#include <string>

namespace fmt {
template <typename... Args>
std::string format(const char* pattern, Args&&... args);
}  // namespace fmt
