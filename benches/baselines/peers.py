#!/usr/bin/env python3
"""The peers users run, timed at the consumers' shapes on one NVIDIA GPU.

- mamba-ssm (state-spaces/mamba): `selective_scan_cuda.fwd` for prefill (B 1, N 16, bf16,
  Dm 5120 at L 512 and 2048, Dm 8192 at L 512), built from its public sources by
  build_mamba_ssm.py, and its Triton `selective_state_update` for decode (one step, f32 state,
  dt_bias zeros as the issue says).
- PyTorch eager and torch.compile: xielu (the op-by-op graph of docs/contracts.md, section 3) and add3 +
  LayerNorm returning both outputs, every dtype, decode and prefill shapes.

Each peer is checked before it is timed (mamba-ssm and the state update against an f64 loop on
a small shape; the compiled functions against eager). Each is timed twice: one call at a time
from Python (the median of CUDA-event timings of single calls after warm-up, so Python's launch
cost is in it wherever it exceeds the GPU's time), and replayed from a CUDA graph of 10 calls
(`<peer>-graph`: the GPU's time per call). The inputs stay the same between calls, as for our
kernels in benches/kernels.rs (the MoE's L2-cold rotation is the exception there and is not a
peer here). Output lines:

    peer <peer>[-graph] <kernel> <dtype> <shape> us=<t>

Environment: MAMBA_SSM_SRC (the sources' root, holding csrc/ and mamba_ssm/), MAMBA_SSM_BUILD
(a scratch build directory outside the repo), MLXCEL_AMDGPU_BENCH_MAMBA (the prefill shapes, as
for benches/kernels.rs). Without MAMBA_SSM_SRC the mamba-ssm rows are skipped with a line saying
so, and the run fails at the end.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_baselines import median_us  # noqa: E402

DEV = "cuda"
failures = []


def graph_us(fn, calls=10, reps=30):
    """Microseconds per call of `fn` replayed from a CUDA graph of `calls` calls: the GPU's time
    without Python's launch cost (what a captured decode loop pays). The graph must compute:
    what its last call returns is poisoned with NaN before a replay and must be finite after."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(calls):
            out = fn()
    outs = [t for t in (out if isinstance(out, (tuple, list)) else [out]) if t.is_floating_point()]
    for t in outs:
        t.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    if not outs or not all(torch.isfinite(t).all().item() for t in outs):
        raise RuntimeError("the CUDA graph did not write its outputs")
    return median_us(g.replay, reps=reps, warmup=2) / calls


def emit(peer, kernel, dtype, shape, fn, reps=50):
    """Two lines: one call at a time from Python (`peer`), and replayed from a CUDA graph
    (`peer-graph`)."""
    print(f"peer {peer} {kernel} {dtype} {shape} us={median_us(fn, reps=reps):.2f}", flush=True)
    print(f"peer {peer}-graph {kernel} {dtype} {shape} us={graph_us(fn):.2f}", flush=True)


def dname(dt):
    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[dt]


# ---- xielu and add3 + LayerNorm: eager and torch.compile ------------------------------------

AP, AN, BE, EPS = 0.8731, 0.6042, 0.5, -1e-6


_scalars = {}


def xielu_graph(x):
    # docs/contracts.md, section 3, op by op in the dtype of x (the MLX graph mlxcel runs); the scalars are
    # made once per dtype, so that the function can be captured in a CUDA graph
    t = x.dtype
    if t not in _scalars:
        _scalars[t] = tuple(torch.tensor(v, dtype=t, device=x.device) for v in (AP, AN, BE, EPS))
    ap, an, be, ep = _scalars[t]
    pos = (x * x) * ap
    neg = (torch.expm1(torch.minimum(x, ep)) - x) * an
    return torch.where(x > 0, pos, neg) + x * be


def add3_layer_norm_graph(a, b, x, w, bias):
    x_new = (a + b) + x
    return x_new, F.layer_norm(x_new, (x_new.shape[-1],), w, bias, 1e-5)


def bench_torch():
    xielu_c = torch.compile(xielu_graph, dynamic=False)
    add3_c = torch.compile(add3_layer_norm_graph, dynamic=False)
    g = torch.Generator(device=DEV).manual_seed(7)
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        for n in (21504, 1 << 26):
            x = (torch.rand(n, generator=g, device=DEV) * 24 - 12).to(dt)
            want = xielu_graph(x)
            got = xielu_c(x)
            err = ((got.float() - want.float()).norm() / want.float().norm()).item()
            print(f"check torch.compile xielu {dname(dt)} n={n}: nRMS vs eager {err:.2e}", flush=True)
            if not err < 2e-2:
                failures.append(f"torch.compile xielu {dname(dt)} n={n} nRMS {err:.2e}")
            emit("torch-eager", "xielu", dname(dt), f"n={n}", lambda: xielu_graph(x))
            emit("torch-compile", "xielu", dname(dt), f"n={n}", lambda: xielu_c(x))
        for rows in (1, 8192):
            d = 4096
            a, b, x = (torch.randn(rows, d, generator=g, device=DEV).to(dt) for _ in range(3))
            w = (1 + 0.1 * torch.randn(d, generator=g, device=DEV)).to(dt)
            bias = (0.1 * torch.randn(d, generator=g, device=DEV)).to(dt)
            want = add3_layer_norm_graph(a, b, x, w, bias)
            got = add3_c(a, b, x, w, bias)
            err = max(((g_.float() - w_.float()).norm() / w_.float().norm()).item() for g_, w_ in zip(got, want))
            print(f"check torch.compile add3_layer_norm {dname(dt)} rows={rows}: nRMS vs eager {err:.2e}", flush=True)
            if not err < 2e-2:
                failures.append(f"torch.compile add3_layer_norm {dname(dt)} rows={rows} nRMS {err:.2e}")
            shape = f"rows={rows} D={d}"
            emit("torch-eager", "add3_layer_norm", dname(dt), shape, lambda: add3_layer_norm_graph(a, b, x, w, bias))
            emit("torch-compile", "add3_layer_norm", dname(dt), shape, lambda: add3_c(a, b, x, w, bias))


# ---- mamba-ssm -----------------------------------------------------------------------------


def scan_f64(u, delta, A, B, C, D):
    # u, delta [b, dm, L]; A [dm, n]; B, C [b, 1, n, L] (one group); D [dm]: the recurrence in
    # f64, state from 0
    u, delta, A, B, C, D = (t.double() for t in (u, delta, A, B[:, 0], C[:, 0], D))
    bsz, dm, L = u.shape
    s = torch.zeros(bsz, dm, A.shape[1], dtype=torch.float64, device=u.device)
    ys = []
    for t in range(L):
        dA = torch.exp(delta[:, :, t, None] * A)
        s = dA * s + (delta[:, :, t] * u[:, :, t])[:, :, None] * B[:, None, :, t]
        ys.append((s * C[:, None, :, t]).sum(-1) + u[:, :, t] * D)
    return torch.stack(ys, -1), s


def scan_inputs(g, dm, L, n, dt=torch.bfloat16):
    u = torch.randn(1, dm, L, generator=g, device=DEV).to(dt)
    delta = (0.001 + 0.1 * torch.rand(1, dm, L, generator=g, device=DEV)).to(dt)
    A = -torch.exp(torch.randn(dm, n, generator=g, device=DEV) * 0.5)
    B = torch.randn(1, 1, n, L, generator=g, device=DEV).to(dt)
    C = torch.randn(1, 1, n, L, generator=g, device=DEV).to(dt)
    D = torch.randn(dm, generator=g, device=DEV)
    return u, delta, A, B, C, D


def mamba_shapes():
    """The prefill shapes (Dm, L): the consumers', or MLXCEL_AMDGPU_BENCH_MAMBA's list
    (`DMxL,DMxL,..`, as benches/kernels.rs reads it)."""
    listed = os.environ.get("MLXCEL_AMDGPU_BENCH_MAMBA")
    if not listed:
        return [(5120, 512), (5120, 2048), (8192, 512)]
    shapes = []
    for shape in listed.split(","):
        dm, _, L = shape.partition("x")
        if not (dm.isdigit() and L.isdigit() and int(dm) > 0 and int(L) > 0):
            sys.exit(f"MLXCEL_AMDGPU_BENCH_MAMBA: {shape!r} is not DMxL with both above zero (e.g. 5120x512)")
        shapes.append((int(dm), int(L)))
    return shapes


def bench_mamba_ssm():
    src = os.environ.get("MAMBA_SSM_SRC")
    if not src:
        print("skip mamba-ssm: MAMBA_SSM_SRC is not set", flush=True)
        failures.append("mamba-ssm not run (MAMBA_SSM_SRC unset)")
        return
    from build_mamba_ssm import build

    ext = build(src, os.environ.get("MAMBA_SSM_BUILD", "/tmp/mamba-ssm-build"))
    g = torch.Generator(device=DEV).manual_seed(11)
    n = 16
    # check: selective_scan_cuda.fwd against the f64 loop
    u, delta, A, B, C, D = scan_inputs(g, 64, 300, n)
    out = ext.fwd(u, delta, A, B, C, D, None, None, False)[0]
    want, _ = scan_f64(u, delta, A, B, C, D)
    err = ((out.double() - want).norm() / want.norm()).item()
    print(f"check mamba-ssm selective_scan_fwd bf16 Dm=64 L=300: nRMS vs f64 {err:.2e}", flush=True)
    if not err < 1e-2:
        failures.append(f"mamba-ssm selective_scan_fwd nRMS {err:.2e}")
    for dm, L in mamba_shapes():
        u, delta, A, B, C, D = scan_inputs(g, dm, L, n)
        fwd = lambda: ext.fwd(u, delta, A, B, C, D, None, None, False)  # noqa: E731
        emit("mamba-ssm", "selective_scan_fwd", "bf16", f"B=1 Dm={dm} N={n} L={L}", fwd, reps=30)

    sys.path.insert(0, src)
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    # check: one step against the f64 recurrence from a random state
    for batch, dm in ((1, 64), (1, 5120), (1, 8192), (8, 8192)):
        state = torch.randn(batch, dm, n, generator=g, device=DEV)
        x = torch.randn(batch, dm, generator=g, device=DEV).to(torch.bfloat16)
        dt = (0.001 + 0.1 * torch.rand(batch, dm, generator=g, device=DEV)).to(torch.bfloat16)
        A = -torch.exp(torch.randn(dm, n, generator=g, device=DEV) * 0.5)
        B = torch.randn(batch, n, generator=g, device=DEV).to(torch.bfloat16)
        C = torch.randn(batch, n, generator=g, device=DEV).to(torch.bfloat16)
        D = torch.randn(dm, generator=g, device=DEV)
        dt_bias = torch.zeros(dm, device=DEV)
        if dm == 64:
            s = state.clone()
            y = selective_state_update(s, x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=False)
            s64 = torch.exp(dt.double()[:, :, None] * A.double()) * state.double() + (
                dt.double() * x.double()
            )[:, :, None] * B.double()[:, None, :]
            y64 = (s64 * C.double()[:, None, :]).sum(-1) + x.double() * D.double()
            e_y = ((y.double() - y64).norm() / y64.norm()).item()
            e_s = ((s.double() - s64).norm() / s64.norm()).item()
            print(f"check mamba-ssm selective_state_update: nRMS vs f64 y {e_y:.2e}, state {e_s:.2e}", flush=True)
            if not (e_y < 1e-2 and e_s < 1e-4):
                failures.append(f"selective_state_update y {e_y:.2e} state {e_s:.2e}")
            continue
        step = lambda: selective_state_update(state, x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=False)  # noqa: E731
        emit("mamba-ssm-triton", "selective_state_update", "bf16", f"B={batch} Dm={dm} N={n} L=1", step)


def main():
    if not torch.cuda.is_available():
        sys.exit("peers.py needs a CUDA device")
    import triton

    print(f"# torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}", flush=True)
    bench_mamba_ssm()
    bench_torch()
    if failures:
        print("FAILED: " + "; ".join(failures), flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
