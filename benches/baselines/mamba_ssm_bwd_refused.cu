// The backward entry points that mamba-ssm's selective_scan.cpp binds, for a forward-only
// build of the peer (build_mamba_ssm.py): each raises instead of running, so that the
// benchmark can never time or use a backward pass it did not build.
#include <c10/util/Exception.h>
#include <c10/util/Half.h>
#include <c10/util/BFloat16.h>
#include <c10/util/complex.h>
#include <cuda_runtime.h>

#include "selective_scan.h"

template <typename input_t, typename weight_t>
void selective_scan_bwd_cuda(SSMParamsBwd &params, cudaStream_t stream) {
    TORCH_CHECK(false, "this build of selective_scan_cuda has the forward pass only (benches/baselines)");
}

template void selective_scan_bwd_cuda<float, float>(SSMParamsBwd &, cudaStream_t);
template void selective_scan_bwd_cuda<float, c10::complex<float>>(SSMParamsBwd &, cudaStream_t);
template void selective_scan_bwd_cuda<c10::Half, float>(SSMParamsBwd &, cudaStream_t);
template void selective_scan_bwd_cuda<c10::Half, c10::complex<float>>(SSMParamsBwd &, cudaStream_t);
template void selective_scan_bwd_cuda<c10::BFloat16, float>(SSMParamsBwd &, cudaStream_t);
template void selective_scan_bwd_cuda<c10::BFloat16, c10::complex<float>>(SSMParamsBwd &, cudaStream_t);
