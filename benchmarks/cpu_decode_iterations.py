"""Per-iteration decode time against running batch, measured on a real vLLM engine (examples/tiny_rl's model).

    python benchmarks/cpu_decode_iterations.py [--batches 4 8 16 32 64] [--repeats 3] [--logprobs 0]

Why: the replay's trace fit (docs/replay-fidelity.md) sees a request's *mean* time per token against its
mean running batch, and on the tiny RL recordings it cannot resolve the batch slope (kept only at >= 3
standard errors). This times each ``LLMEngine.step`` call (one engine-core iteration) with the engine's
unfinished requests at its start, over generate() calls of each batch size, and fits
tau(B) = a + b x B by least squares on every iteration after the first ``--warmup``. Its slope's standard
error says whether iteration-level records would make the slope measurable. It also fits
tau = a + b x B + c x F, F the requests of the same generate() call that have already finished: the calls
of several sizes separate c from b, which a recording of one batch size cannot (docs/replay-fidelity.md).
Run on an idle machine; the figures are this machine's, not a GPU's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _bench import at_least
from rltrace.replay.costmodels.calibrate import fit_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "tiny_rl"))
import tiny_llama


def measure(batches: list[int], repeats: int, logprobs: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(running requests at the iteration's start, requests of its generate() call, iteration seconds) of
    every engine step."""
    from vllm import LLM, SamplingParams  # vLLM is a test extra; only this benchmark's run needs it

    model = tiny_llama.build(Path(tempfile.mkdtemp(prefix="rltrace_iter_")) / "model")
    llm = LLM(model=str(model), dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
    engine, rows = llm.llm_engine, []
    step = engine.step
    call = [0]

    def timed_step():  # one engine-core iteration, as examples/tiny_rl's generate() drives it
        running = engine.get_num_unfinished_requests()
        started = time.perf_counter()
        out = step()
        rows.append((running, call[0], time.perf_counter() - started))
        return out

    engine.step = timed_step
    try:
        for repeat in range(repeats):
            for n in batches:
                call[0] = n
                params = [SamplingParams(max_tokens=96, temperature=1.0, stop_token_ids=tiny_llama.STOP_IDS,
                                         logprobs=logprobs, seed=repeat * 10_000 + i) for i in range(n)]
                llm.generate(["the policy samples a response"] * n, params, use_tqdm=False)
    finally:
        engine.engine_core.shutdown()
    data = np.array(rows, dtype=float)
    return data[:, 0], data[:, 1], data[:, 2]


def fit_plane(batch: np.ndarray, finished: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Least squares ``seconds = a + b x batch + c x finished``: the coefficients and their standard errors."""
    design = np.column_stack([np.ones_like(batch), batch, finished])
    coef, *_ = np.linalg.lstsq(design, seconds, rcond=None)
    residual = seconds - design @ coef
    cov = np.linalg.inv(design.T @ design) * (residual @ residual / (len(seconds) - 3))
    return coef, np.sqrt(np.diag(cov))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=at_least(1), nargs="+", default=[4, 8, 16, 32, 64])
    parser.add_argument("--repeats", type=at_least(1), default=3)
    parser.add_argument("--logprobs", type=int, default=None, help="ask for sampled-token logprobs (tiny_rl: 0)")
    parser.add_argument("--warmup", type=at_least(0), default=200, help="first iterations left out (engine warm-up)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    running, calls, seconds = measure(args.batches, args.repeats, args.logprobs)
    if len(running) <= args.warmup + 2:  # a line needs iterations past the warm-up (a ZeroDivisionError)
        raise SystemExit(f"cpu_decode_iterations.py: {len(running)} iterations, --warmup {args.warmup} leaves too few "
                         "to fit: more --batches or --repeats, or a smaller --warmup")
    batch, calls, tau = running[args.warmup:], calls[args.warmup:], seconds[args.warmup:]
    keep = batch >= 1
    batch, calls, tau = batch[keep], calls[keep], tau[keep]
    base, slope, stderr = fit_line(batch, tau)  # a straight line in the batch (the replay fits more terms)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"{len(tau)} iterations: tau(B) = {base * 1e3:.3f} ms + {slope * 1e6:.1f} us x B "
          f"(slope standard error {stderr * 1e6:.1f} us: {slope / stderr:.0f} standard errors)")
    coef, se = fit_plane(batch, calls - batch, tau)
    print(f"with the call's finished requests F: tau = {coef[0] * 1e3:.3f} ms + {coef[1] * 1e6:.1f} us x B "
          f"(+- {se[1] * 1e6:.1f}) + {coef[2] * 1e6:.1f} us x F (+- {se[2] * 1e6:.1f})")
    print(f"{'running':>8} {'iterations':>10} {'median ms':>10}")
    for b in sorted({int(x) for x in batch}):
        at = tau[batch == b]
        if len(at) >= 20:  # the rest are transitions between batch sizes: too few to show a median
            print(f"{b:>8} {len(at):>10} {np.median(at) * 1e3:>10.3f}")


if __name__ == "__main__":
    main()
