#!/usr/bin/env python3
"""PyTorch baselines (eager, bf16 data on cuda) for the kernels of docs/contracts.md, sections 5 and 6.

(a) Mamba1 selective scan as PyTorch's straightforward sequential loop over L, f32 math on
    bf16-rounded inputs (A and the state f32), y rounded to bf16 at the end:
        dA  = exp(dt[:, t, :, None] * A)
        s   = dA * s + (dt * x)[:, t, :, None] * B[:, t, None, :]
        y_t = (s * C[:, t, None, :]).sum(-1) + x[:, t] * D
    B=1, Dm=5120, N=16, L in {1, 512, 2048}.
        baseline torch mamba1_scan B=1 Dm=5120 N=16 L=<L> us=<t>

(b) The Nemotron-H routed experts (Din 2688, Dff 1856, E 128, K 6, gs 64, bits 4 and 8) from
    MLX-affine quantized weights, without a fused kernel: gather the 6 selected experts, unpack
    the packed words with shifts and masks, q * scale + bias in bf16, then per expert (batched
    over the 6) h = relu(W1 @ x)^2, part = W2 @ h, and the score-weighted sum.
        baseline torch moe_dequant_matmul bits=<b> us=<t>   whole forward, dequantization included
        baseline torch moe_matmul_only bits=<b> us=<t>      the same on pre-dequantized bf16 weights
    plus `..._l2flushed` variants of both with a 256 MiB write between timed runs (outside the
    events), so the weights come from HBM as at decode.

Every time is the median of per-run torch.cuda.Event timings after warm-up. Deterministic:
torch.manual_seed, no Python-side randomness.
"""
import sys

import torch

DEV = "cuda"
_flush_buf = None


def flush_l2():
    global _flush_buf
    if _flush_buf is None:
        _flush_buf = torch.empty(256 << 20, dtype=torch.uint8, device=DEV)
    _flush_buf.zero_()


def median_us(fn, reps, warmup=3, flush=False):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush:
            flush_l2()
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3)
    times.sort()
    n = len(times)
    return times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])


# ---- (a) Mamba1 scan ---------------------------------------------------------------------------

def mamba1_scan_loop(x, dt, A, Bm, Cm, D, state):
    """x, dt [B, L, Dm], Bm, Cm [B, L, N], D [Dm] (all f32 holding bf16 values), A [Dm, N] f32,
    state [B, Dm, N] f32. Returns y [B, L, Dm] bf16 and the final state f32."""
    L = x.shape[1]
    s = state
    y = torch.empty_like(x)
    for t in range(L):
        dA = torch.exp(dt[:, t, :, None] * A)
        s = dA * s + (dt[:, t] * x[:, t])[..., None] * Bm[:, t, None, :]
        y[:, t] = (s * Cm[:, t, None, :]).sum(-1) + x[:, t] * D
    return y.to(torch.bfloat16), s


def uniform(shape, lo, hi):
    return torch.rand(shape, device=DEV, dtype=torch.float32) * (hi - lo) + lo


def bf16_f32(t):
    return t.to(torch.bfloat16).float()


def check_mamba(x, dt, A, Bm, Cm, D, st, y, s_out):
    """A few channels against a float64 reference of the same bf16 inputs."""
    chans = torch.tensor([0, 1, 7, 2047, x.shape[2] - 1], device=DEV)
    xd, dtd = x[:, :, chans].double(), dt[:, :, chans].double()
    Ad, Dd, s = A[chans].double(), D[chans].double(), st[:, chans].double()
    Bd, Cd = Bm.double(), Cm.double()
    ys = []
    for t in range(x.shape[1]):
        s = torch.exp(dtd[:, t, :, None] * Ad) * s + (dtd[:, t] * xd[:, t])[..., None] * Bd[:, t, None, :]
        ys.append((s * Cd[:, t, None, :]).sum(-1) + xd[:, t] * Dd)
    want = torch.stack(ys, 1)
    ry = ((y[:, :, chans].double() - want).abs().max() / want.abs().max().clamp_min(1e-6)).item()
    rs = ((s_out[:, chans].double() - s).abs().max() / s.abs().max().clamp_min(1e-6)).item()
    return ry, rs


def bench_mamba():
    ok = True
    Bsz, Dm, N = 1, 5120, 16
    for L in (1, 512, 2048):
        torch.manual_seed(1000 + L)
        x = bf16_f32(uniform((Bsz, L, Dm), -1, 1))
        dt = bf16_f32(uniform((Bsz, L, Dm), 0.05, 0.55))
        Bm = bf16_f32(uniform((Bsz, L, N), -1, 1))
        Cm = bf16_f32(uniform((Bsz, L, N), -1, 1))
        D = bf16_f32(uniform((Dm,), -1, 1))
        A = uniform((Dm, N), -1.5, -0.5)
        st = uniform((Bsz, Dm, N), -0.5, 0.5)

        y, s_out = mamba1_scan_loop(x, dt, A, Bm, Cm, D, st)
        ry, rs = check_mamba(x, dt, A, Bm, Cm, D, st, y, s_out)
        good = ry < 1e-2 and rs < 1e-4
        ok &= good
        print(f"check torch mamba1_scan L={L}: y max_err/max|y|={ry:.3g} "
              f"state max_err/max|s|={rs:.3g} {'ok' if good else 'FAILED'}", file=sys.stderr, flush=True)

        reps, warm = {1: (50, 5), 512: (10, 2), 2048: (5, 1)}[L]
        us = median_us(lambda: mamba1_scan_loop(x, dt, A, Bm, Cm, D, st), reps, warmup=warm)
        print(f"baseline torch mamba1_scan B={Bsz} Dm={Dm} N={N} L={L} us={us:.2f}", flush=True)
    return ok


# ---- (b) MoE -----------------------------------------------------------------------------------

def dequantize(w, scales, biases, bits, gs):
    """MLX affine: w int32 [..., rows, cols*bits/32] (u32 bits), scales/biases bf16
    [..., rows, cols/gs] -> bf16 [..., rows, cols]; value j of a word in bits [j*bits, (j+1)*bits)."""
    vpw = 32 // bits
    shifts = torch.arange(0, 32, bits, device=w.device, dtype=torch.int32)
    q = (w.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)       # [..., rows, words, vpw]
    rows, words = w.shape[-2], w.shape[-1]
    cols = words * vpw
    q = q.reshape(*w.shape[:-2], rows, cols // gs, gs).to(torch.bfloat16)
    wf = q * scales.unsqueeze(-1) + biases.unsqueeze(-1)
    return wf.reshape(*w.shape[:-2], rows, cols)


def moe_forward_quant(x, idx, scores, w1, s1, b1, w2, s2, b2, bits, gs):
    W1 = dequantize(w1[idx], s1[idx], b1[idx], bits, gs)              # [K, Dff, Din] bf16
    h = torch.matmul(W1, x).relu().square()                            # [K, Dff]
    W2 = dequantize(w2[idx], s2[idx], b2[idx], bits, gs)              # [K, Din, Dff]
    part = torch.matmul(W2, h.unsqueeze(-1)).squeeze(-1)               # [K, Din]
    return (part.float() * scores[:, None]).sum(0).to(torch.bfloat16)


def moe_forward_dense(x, scores, W1, W2):
    h = torch.matmul(W1, x).relu().square()
    part = torch.matmul(W2, h.unsqueeze(-1)).squeeze(-1)
    return (part.float() * scores[:, None]).sum(0).to(torch.bfloat16)


def random_words(shape):
    # uniformly random 32-bit patterns, stored as int32 (torch has no general uint32 arithmetic)
    return (torch.randint(0, 1 << 32, shape, device=DEV, dtype=torch.int64) - (1 << 31)).to(torch.int32)


def check_dequant(w, s, b, bits, gs, e, row):
    """One row of dequantize() against plain Python integer arithmetic: max error over the row
    divided by max |weight| (dequantize rounds q*s and the sum to bf16: ~2^-8 expected)."""
    got = dequantize(w[e, row:row + 1], s[e, row:row + 1], b[e, row:row + 1], bits, gs)[0].float().tolist()
    words = [v & 0xFFFFFFFF for v in w[e, row].tolist()]
    sc, bi = s[e, row].float().tolist(), b[e, row].float().tolist()
    vpw = 32 // bits
    want = []
    for c in range(len(words) * vpw):
        q = (words[c // vpw] >> ((c % vpw) * bits)) & ((1 << bits) - 1)
        want.append(q * sc[c // gs] + bi[c // gs])
    return max(abs(g - v) for g, v in zip(got, want)) / max(1e-30, max(abs(v) for v in want))


def bench_moe():
    ok = True
    Din, Dff, E, K, gs = 2688, 1856, 128, 6, 64
    for bits in (4, 8):
        torch.manual_seed(2000 + bits)
        # scales ~ 1/(2^bits sqrt(cols)) so the real weights are of order 1/sqrt(cols); biases
        # centre the codes
        sm1, sm2 = 2 / (2 ** bits * Din ** 0.5), 2 / (2 ** bits * Dff ** 0.5)
        w1 = random_words((E, Dff, Din * bits // 32))
        s1 = uniform((E, Dff, Din // gs), 0.5 * sm1, sm1).to(torch.bfloat16)
        b1 = uniform((E, Dff, Din // gs), -1.5 * sm1 * 2 ** (bits - 1), -0.5 * sm1 * 2 ** (bits - 1)).to(torch.bfloat16)
        w2 = random_words((E, Din, Dff * bits // 32))
        s2 = uniform((E, Din, Dff // gs), 0.5 * sm2, sm2).to(torch.bfloat16)
        b2 = uniform((E, Din, Dff // gs), -1.5 * sm2 * 2 ** (bits - 1), -0.5 * sm2 * 2 ** (bits - 1)).to(torch.bfloat16)
        x = uniform((Din,), -1, 1).to(torch.bfloat16)
        idx = torch.tensor([3, 17, 42, 77, 100, 127], device=DEV, dtype=torch.int64)
        scores = uniform((K,), 0.1, 0.3)

        # correctness: dequantize vs integer arithmetic (bf16 rounding of the product and the sum
        # -> relative 2^-7 allowed), and the forward vs a float64 dense reference
        dq = check_dequant(w1, s1, b1, bits, gs, 42, 5)
        out = moe_forward_quant(x, idx, scores, w1, s1, b1, w2, s2, b2, bits, gs)
        W1d = dequantize(w1[idx], s1[idx], b1[idx], bits, gs)
        W2d = dequantize(w2[idx], s2[idx], b2[idx], bits, gs)
        # reference weights in f64 straight from the codes (no bf16 rounding of q*s+b)
        def deq64(w, s, b):
            vpw = 32 // bits
            sh = torch.arange(0, 32, bits, device=DEV, dtype=torch.int64)
            q = ((w.to(torch.int64) & 0xFFFFFFFF).unsqueeze(-1) >> sh) & ((1 << bits) - 1)
            q = q.reshape(*w.shape[:-1], -1, gs).double()
            return (q * s.double().unsqueeze(-1) + b.double().unsqueeze(-1)).reshape(*w.shape[:-1], -1)
        h = (deq64(w1[idx], s1[idx], b1[idx]) @ x.double()).relu().square()
        want = ((deq64(w2[idx], s2[idx], b2[idx]) @ h.unsqueeze(-1)).squeeze(-1) * scores.double()[:, None]).sum(0)
        d = out.double() - want
        nrms = (d.square().mean().sqrt() / want.square().mean().sqrt()).item()
        good = dq < 1e-2 and nrms < 5e-2
        ok &= good
        print(f"check torch moe bits={bits}: dequant max rel err={dq:.3g}, forward nrms vs f64={nrms:.3g} "
              f"(bf16 weights and activations) {'ok' if good else 'FAILED'}", file=sys.stderr, flush=True)

        fq = lambda: moe_forward_quant(x, idx, scores, w1, s1, b1, w2, s2, b2, bits, gs)
        fd = lambda: moe_forward_dense(x, scores, W1d, W2d)
        t_q = median_us(fq, 50, warmup=5)
        t_qc = median_us(fq, 50, warmup=5, flush=True)
        t_d = median_us(fd, 50, warmup=5)
        t_dc = median_us(fd, 50, warmup=5, flush=True)
        print(f"baseline torch moe_dequant_matmul bits={bits} us={t_q:.2f}", flush=True)
        print(f"baseline torch moe_dequant_matmul_l2flushed bits={bits} us={t_qc:.2f}", flush=True)
        print(f"baseline torch moe_matmul_only bits={bits} us={t_d:.2f}", flush=True)
        print(f"baseline torch moe_matmul_only_l2flushed bits={bits} us={t_dc:.2f}", flush=True)
        del w1, s1, b1, w2, s2, b2, W1d, W2d
        torch.cuda.empty_cache()
    return ok


def main():
    if not torch.cuda.is_available():
        print("torch_baselines.py needs a CUDA device", file=sys.stderr)
        return 1
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()}", file=sys.stderr, flush=True)
    ok = bench_mamba()
    ok &= bench_moe()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
