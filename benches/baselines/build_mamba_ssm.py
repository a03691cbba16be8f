#!/usr/bin/env python3
"""Builds mamba-ssm's `selective_scan_cuda` extension, forward only, from its public sources
(state-spaces/mamba, packed by `cargo xtask gpu-pack bench`) with torch's cpp_extension, for
the GPU present: the binding file and the three forward files of csrc/selective_scan, plus
mamba_ssm_bwd_refused.cu (ours), which defines the backward entry points the binding names so
that calling them raises instead of running. The nvcc flags are the ones mamba-ssm's setup.py
passes, with one target architecture. About a minute on 16 cores for sm_90.

    python3 build_mamba_ssm.py <mamba source root> <build dir>
"""
import os
import sys


def build(src, build_dir):
    import torch
    from torch.utils.cpp_extension import load

    here = os.path.dirname(os.path.abspath(__file__))
    cs = os.path.join(src, "csrc", "selective_scan")
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    os.makedirs(build_dir, exist_ok=True)
    os.environ.setdefault("MAX_JOBS", str(os.cpu_count() or 4))
    sources = [os.path.join(cs, f) for f in (
        "selective_scan.cpp",
        "selective_scan_fwd_fp32.cu",
        "selective_scan_fwd_fp16.cu",
        "selective_scan_fwd_bf16.cu",
    )] + [os.path.join(here, "mamba_ssm_bwd_refused.cu")]
    nvcc = [
        "-O3", "-std=c++17",
        "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT162_OPERATORS__", "-U__CUDA_NO_BFLOAT162_CONVERSIONS__",
        "--expt-relaxed-constexpr", "--expt-extended-lambda", "--use_fast_math",
        f"-gencode=arch=compute_{arch},code=sm_{arch}",
    ]
    return load(
        name="selective_scan_cuda",
        sources=sources,
        extra_cflags=["-O3", "-std=c++17"],
        extra_cuda_cflags=nvcc,
        extra_include_paths=[cs],
        build_directory=build_dir,
        verbose=False,
    )


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    build(sys.argv[1], sys.argv[2])
    print("built selective_scan_cuda")
