"""An RL job written the way Ray users write one: a vLLM generator actor and two DDP trainer actors.

The driver creates three actors that join one Gloo world over a TCP init method (trainers are ranks 0 and 1,
the generator rank 2). Every step the generator samples ``samples`` responses for each prompt with
long-tailed ``max_tokens`` caps set per prompt (one prompt per step is hard: its samples run 20-25x the
median cap; stop tokens end the others' samples early) and scores them; the batch goes to the trainers as a
Ray object; each trainer takes half, computes group-normalised advantages and a policy-gradient loss and
runs one DDP step (Gloo all-reduces its gradients); then trainer 0 sends its parameters to the generator in
flat buckets (``dist.send``), and the generator saves them and reloads vLLM with
``llm.collective_rpc("reload_weights")``. ``--samples 8,4`` alternates settings step by step.

    python examples/ray_rl/train.py [--steps 7] [--prompts 4] [--samples 8,4] [--out truth.json]
        [--runtime-env-pythonpath DIR]   # runtime_env={"env_vars": {"PYTHONPATH": DIR}}, as verl's launcher does
        [--address HOST:PORT] [--pin RES,RES,RES]   # join a cluster; actors need custom resource RES each

``--out`` writes what the job itself counted (requests and output tokens per step, bytes of each
collective it issued, parameter bytes): the ground truth a recording is compared with.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import ray
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tiny_rl"))
import tiny_llama  # after the path line above: the tiny random Llama the CPU examples share

PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples",
           "the reward model", "short ones wait"]
STOP_IDS = list(tiny_llama.STOP_IDS)  # a value: actors are pickled with it, tiny_llama is not importable there
TRAINERS, GENERATOR = (0, 1), 2
BUCKET_BYTES = 256 * 1024  # weight sync: parameters flattened into send buckets of about this size
MAX_NEW = 200  # the response-length limit the hard prompt's samples reach
SHORT_MAX = 12  # the other prompts' caps are 4 to this
HARD_PARAMS = {"ignore_eos": True}  # no stop token ends a hard prompt's samples
TARGET = 7  # the reward: how often the response uses this token id
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "0",
       "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def caps(step: int, prompts: int, seed: int = 0) -> list[int]:
    """Each prompt's max_tokens: one hard prompt per step at 80-100% of MAX_NEW, the others 4-12 (median 8).

    The cap belongs to the prompt, so its samples are alike and fewer samples of it are a subset of more, as
    in a real RL batch where a prompt's difficulty sets its lengths. One hard prompt per step, whose samples
    run to their cap (HARD_PARAMS), stands for the longest rollouts of a batch of thousands, which hit the
    response-length limit nearly every step: with one request in eight capped long and stop tokens free to
    end any sample, a 16-request step's longest sample ranged from 12 to 200 tokens, and a setting's 10-step
    mean had a standard error of 11-21% (2026-11-24), more than the replay error being measured."""
    rng = random.Random(seed * 100_003 + step)
    drawn = [int(MAX_NEW * rng.uniform(0.8, 1.0)), *(rng.randint(4, SHORT_MAX) for _ in range(prompts - 1))]
    rng.shuffle(drawn)
    return drawn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@ray.remote(num_cpus=0)
class Trainer:
    def __init__(self, rank: int, model_dir: str, lr: float) -> None:
        self.rank, self.model_dir, self.lr = rank, model_dir, lr

    def address(self) -> str:
        """Rank 0 hosts the TCP rendezvous on its own node."""
        return f"tcp://{ray.util.get_node_ip_address()}:{free_port()}"

    def join(self, init_method: str) -> None:
        from torch.nn.parallel import DistributedDataParallel
        from transformers import LlamaForCausalLM

        torch.set_num_threads(1)
        dist.init_process_group("gloo", init_method=init_method, rank=self.rank, world_size=3)
        self.train_group = dist.new_group(list(TRAINERS))
        torch.manual_seed(0)
        self.model = LlamaForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        self.ddp = DistributedDataParallel(self.model, process_group=self.train_group)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr)

    def train(self, batch: list[tuple]) -> float:
        rewards = torch.tensor([b[2] for b in batch])
        groups = torch.tensor([b[3] for b in batch])
        adv = torch.zeros_like(rewards)
        for g in groups.unique():  # GRPO: each response against its own prompt's group
            m = groups == g
            adv[m] = (rewards[m] - rewards[m].mean()) / (rewards[m].std(unbiased=False) + 1e-4)
        loss = torch.zeros(())
        for i in range(TRAINERS.index(self.rank), len(batch), len(TRAINERS)):
            prompt, completion = batch[i][0], batch[i][1]
            ids = torch.tensor([prompt + completion])
            logits = self.ddp(input_ids=ids).logits[0, len(prompt) - 1 : -1]
            logp = torch.log_softmax(logits, -1).gather(1, torch.tensor(completion)[:, None]).sum()
            loss = loss - adv[i] * logp / len(batch)
        self.opt.zero_grad()
        loss.backward()  # one backward a step: DDP all-reduces every gradient bucket once
        self.opt.step()
        return float(loss)

    def send_weights(self) -> list[int]:
        """Trainer 0: every parameter to the generator, flattened into buckets; returns each bucket's bytes."""
        sizes = []
        for bucket in buckets(self.model):
            flat = torch.cat([t.detach().reshape(-1) for _, t in bucket])
            dist.send(flat, dst=GENERATOR)
            sizes.append(flat.numel() * flat.element_size())
        return sizes


def buckets(model: torch.nn.Module) -> list[list[tuple[str, torch.Tensor]]]:
    """The state dict in name order, cut into consecutive buckets of about BUCKET_BYTES."""
    out: list[list[tuple[str, torch.Tensor]]] = [[]]
    size = 0
    for name, t in sorted(model.state_dict().items()):
        if out[-1] and size + t.numel() * 4 > BUCKET_BYTES:
            out.append([])
            size = 0
        out[-1].append((name, t))
        size += t.numel() * 4
    return out


@ray.remote(num_cpus=0)
class Generator:
    def __init__(self, model_dir: str) -> None:
        self.model_dir = model_dir

    def join(self, init_method: str) -> int:
        from transformers import LlamaForCausalLM
        from vllm import LLM

        dist.init_process_group("gloo", init_method=init_method, rank=GENERATOR, world_size=3)
        dist.new_group(list(TRAINERS))  # every rank of the world takes part in creating a group
        self.llm = LLM(model=self.model_dir, dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
        self.shapes = LlamaForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)  # a template
        self.weights = Path(tempfile.mkdtemp(prefix="ray_rl_weights_"))
        return sum(p.numel() * 4 for p in self.shapes.state_dict().values())

    def generate(self, step: int, prompts: int, samples: int, seed: int = 0) -> tuple[list[tuple], list[int]]:
        from vllm import SamplingParams

        texts = [PROMPTS[(step * prompts + i) % len(PROMPTS)] for i in range(prompts)]
        requests = [t for t in texts for _ in range(samples)]
        per_request = [cap for cap in caps(step, prompts, seed) for _ in range(samples)]
        params = [SamplingParams(max_tokens=cap, temperature=1.0, seed=seed * 1_000_003 + step * 10_000 + i,
                                 **(HARD_PARAMS if cap > SHORT_MAX else {"stop_token_ids": STOP_IDS}))
                  for i, cap in enumerate(per_request)]
        outs = self.llm.generate(requests, params, use_tqdm=False)
        batch = []
        for i, o in enumerate(outs):
            tokens = list(o.outputs[0].token_ids)
            batch.append((list(o.prompt_token_ids), tokens, sum(t == TARGET for t in tokens) / max(len(tokens), 1),
                          i // samples))
        return batch, [len(b[1]) for b in batch]

    def receive_weights(self) -> None:
        from safetensors.torch import save_file

        received = {}
        for bucket in buckets(self.shapes):
            flat = torch.empty(sum(t.numel() for _, t in bucket), dtype=torch.float32)
            dist.recv(flat, src=TRAINERS[0])
            offset = 0
            for name, t in bucket:
                received[name] = flat[offset : offset + t.numel()].view_as(t).clone()
                offset += t.numel()
        save_file(received, str(self.weights / "model.safetensors"))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(self.weights)})

    def close(self) -> str:
        """Stop the engine and remove the weights folder; returns the folder's path."""
        self.llm.llm_engine.engine_core.shutdown()  # its engine process is not a daemon
        dist.destroy_process_group()
        shutil.rmtree(self.weights, ignore_errors=True)
        return str(self.weights)


def samples_list(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",")]
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"samples per prompt must be >= 1, got {text!r}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=samples_list, default=[8, 4], help="a cycle such as 8,4, step by step")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0, help="seeds the token caps and the sampling")
    parser.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "rltrace_tiny_llama")
    parser.add_argument("--runtime-env-pythonpath", help="set the job's runtime_env PYTHONPATH, as verl does")
    parser.add_argument("--address", help="an existing Ray cluster to join (default: start a local one)")
    parser.add_argument("--pin", help="three custom resources: generator, trainer 0, trainer 1 need one each")
    parser.add_argument("--out", type=Path, help="write the job's own counts here (JSON)")
    args = parser.parse_args()
    os.environ.update({k: v for k, v in ENV.items() if k not in os.environ})
    tiny_llama.build(args.model_dir)
    env_vars = dict(ENV)
    if args.runtime_env_pythonpath:
        env_vars["PYTHONPATH"] = args.runtime_env_pythonpath
    joining = bool(args.address or os.environ.get("RAY_ADDRESS"))
    ray.init(address=args.address, runtime_env={"env_vars": env_vars}, log_to_driver=False,
             **({} if joining else {"num_cpus": 2, "include_dashboard": False}))
    pins = [{r: 0.01} for r in args.pin.split(",")] if args.pin else [{}] * 3
    started = time.perf_counter()
    generator = Generator.options(resources=pins[0]).remote(str(args.model_dir))
    trainers = [Trainer.options(resources=pins[1 + r]).remote(r, str(args.model_dir), args.lr) for r in TRAINERS]
    init = ray.get(trainers[0].address.remote())
    param_bytes = ray.get([generator.join.remote(init)] + [t.join.remote(init) for t in trainers])[0]
    truth: dict = {"steps": [], "param_bytes": param_bytes}
    for step in range(args.steps):
        samples = args.samples[step % len(args.samples)]
        batch, lengths = ray.get(generator.generate.remote(step, args.prompts, samples, args.seed))
        batch_ref = ray.put(batch)
        ray.get([t.train.remote(batch_ref) for t in trainers])
        sent, _ = ray.get([trainers[0].send_weights.remote(), generator.receive_weights.remote()])
        truth["steps"].append({"requests": len(lengths), "output_tokens": lengths, "sync_bucket_bytes": sent})
    truth["weights_dir"] = ray.get(generator.close.remote())
    truth["run_s"] = time.perf_counter() - started
    if args.out:
        args.out.write_text(json.dumps(truth))
    print(json.dumps({"steps": args.steps, "requests": sum(s["requests"] for s in truth["steps"]),
                      "run_s": round(truth["run_s"], 1)}))


if __name__ == "__main__":
    main()
