// Stand-in for rocBLAS's public header, for scripts/check-shim-against-fork-headers.sh
// only. The fork's mlx/backend/rocm/{device,utils}.h include <rocblas/rocblas.h>
// but use just two names from it: the handle type (a member of rocm::Device)
// and the status type (a parameter of check_rocblas_error). Declaring those two
// lets the fork's headers parse on a machine without rocBLAS; nothing here is
// called, so no value or function of the real library is needed.
#pragma once

// An opaque library context, passed around by pointer as in the real API.
struct mlxcel_check_rocblas_context;
typedef struct mlxcel_check_rocblas_context* rocblas_handle;

// The status the library's calls return; only its type is used.
typedef enum rocblas_status_ {
  rocblas_status_success = 0,
} rocblas_status;
