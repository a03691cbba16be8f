// The test double's declarations of the fork's API (the double's
// mlx/backend/rocm/device.h and allocator.h) against the fork's real headers.
// check-shim-against-fork-headers.sh compiles this with the real headers on
// the include path and the double's two files named by DOUBLE_DEVICE_H and
// DOUBLE_ALLOCATOR_H. Every check is a static_assert: a member function's
// type, a free function's type, RocmBuffer's layout. The double's own class
// names stand for the fork's (to_real below), so a member taking
// `RocmBuffer&` in the double matches one taking the fork's `RocmBuffer&`.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include <mlx/backend/rocm/allocator.h>
#include <mlx/backend/rocm/device.h>

// The double declares the fork's namespace; give it another name here so
// that both can be seen at once. Both use the same MLX and HIP headers,
// already included above.
#define rocm rocm_double
#include DOUBLE_DEVICE_H
#include DOUBLE_ALLOCATOR_H
#undef rocm

namespace real = mlx::core::rocm;
namespace dbl = mlx::core::rocm_double;

// A type of the double's rewritten with the fork's class in place of the
// double's class of the same name.
template <class T>
struct to_real {
  using type = T;
};
template <class T>
using to_real_t = typename to_real<T>::type;
template <>
struct to_real<dbl::CommandEncoder> {
  using type = real::CommandEncoder;
};
template <>
struct to_real<dbl::RocmAllocator> {
  using type = real::RocmAllocator;
};
template <>
struct to_real<dbl::RocmBuffer> {
  using type = real::RocmBuffer;
};
template <class T>
struct to_real<const T> {
  using type = const to_real_t<T>;
};
template <class T>
struct to_real<T*> {
  using type = to_real_t<T>*;
};
template <class T>
struct to_real<T&> {
  using type = to_real_t<T>&;
};
template <class T>
struct to_real<T&&> {
  using type = to_real_t<T>&&;
};
template <class R, class... A>
struct to_real<R(A...)> {
  using type = to_real_t<R>(to_real_t<A>...);
};
template <class R, class... A>
struct to_real<R(A...) const> {
  using type = to_real_t<R>(to_real_t<A>...) const;
};
template <class R, class... A>
struct to_real<R(A...) noexcept> {
  using type = to_real_t<R>(to_real_t<A>...) noexcept;
};
template <class R, class... A>
struct to_real<R(A...) const noexcept> {
  using type = to_real_t<R>(to_real_t<A>...) const noexcept;
};
template <class F, class C>
struct to_real<F C::*> {
  using type = to_real_t<F> to_real_t<C>::*;
};

#define SAME_TYPE(fork_entity, double_entity)                                                 \
  static_assert(std::is_same_v<decltype(fork_entity), to_real_t<decltype(double_entity)>>, \
                "the double's " #double_entity " does not have the type of the fork's " #fork_entity)
#define SAME_MEMBER(Class, member) SAME_TYPE(&real::Class::member, &dbl::Class::member)
#define SAME_FUNCTION(name) SAME_TYPE(&real::name, &dbl::name)

// The callable the shim hands launch_kernel: it receives the encoder's stream.
struct Launch {
  void operator()(hipStream_t) const {}
};

// CommandEncoder: what the shim and the double's callers use.
SAME_MEMBER(CommandEncoder, set_input_array);
SAME_MEMBER(CommandEncoder, set_output_array);
SAME_MEMBER(CommandEncoder, launch_kernel<Launch>);
SAME_MEMBER(CommandEncoder, add_module_kernel_node);
SAME_MEMBER(CommandEncoder, add_temporary);
SAME_MEMBER(CommandEncoder, add_completed_handler);
SAME_MEMBER(CommandEncoder, commit);
SAME_MEMBER(CommandEncoder, synchronize);
SAME_MEMBER(CommandEncoder, decode_capture_begin);
SAME_MEMBER(CommandEncoder, decode_capture_end_record);
SAME_MEMBER(CommandEncoder, decode_capture_replay);
SAME_MEMBER(CommandEncoder, decode_capture_destroy);
static_assert(!std::is_copy_constructible_v<dbl::CommandEncoder> &&
                  !std::is_copy_constructible_v<real::CommandEncoder>,
              "CommandEncoder is not copyable in the fork; the double must not be either");

SAME_FUNCTION(get_command_encoder);
SAME_FUNCTION(use_hip_graphs);

// RocmAllocator and RocmBuffer.
static_assert(std::is_base_of_v<mlx::core::allocator::Allocator, real::RocmAllocator> &&
                  std::is_base_of_v<mlx::core::allocator::Allocator, dbl::RocmAllocator>,
              "RocmAllocator derives from MLX's allocator::Allocator in the fork and in the double");
SAME_MEMBER(RocmAllocator, flush_host_shadow);
SAME_MEMBER(RocmAllocator, ensure_host_shadow);
SAME_FUNCTION(allocator);

static_assert(sizeof(real::RocmBuffer) == sizeof(dbl::RocmBuffer), "RocmBuffer: size differs");
static_assert(alignof(real::RocmBuffer) == alignof(dbl::RocmBuffer), "RocmBuffer: alignment differs");
static_assert(std::is_standard_layout_v<real::RocmBuffer> && std::is_standard_layout_v<dbl::RocmBuffer>,
              "RocmBuffer: offsetof needs standard layout");
#define SAME_FIELD(field)                                                                          \
  static_assert(offsetof(real::RocmBuffer, field) == offsetof(dbl::RocmBuffer, field),             \
                "RocmBuffer: offset of " #field " differs");                                       \
  static_assert(std::is_same_v<decltype(real::RocmBuffer::field), decltype(dbl::RocmBuffer::field)>, \
                "RocmBuffer: type of " #field " differs")
SAME_FIELD(data);
SAME_FIELD(size);
SAME_FIELD(is_managed);
SAME_FIELD(device);
SAME_FIELD(host_shadow);
SAME_FIELD(host_dirty);
SAME_FIELD(alloc_stream);
