"""A real, unmodified TRL GRPO run on CPU: a random 2-layer Llama with a local tokenizer, Hugging Face generation.

TRL's ``GRPOTrainer`` does everything (sampling with ``model.generate``, rewards, group advantages, the policy
loss, AdamW); this script only builds the tiny model (``examples/tiny_rl/tiny_llama.py``), a prompt dataset and
one reward function. The reward function also writes what TRL handed it, TRL's own completion token ids, one
JSON line per call (``--lengths``): the step and rank, and every completion's length, so a recording of the
run can be checked against TRL's numbers rather than against our own reading of its tensors.

    python examples/trl_grpo/train.py --model-dir DIR --out DIR/run [--steps 3] [--prompts 4] [--generations 4]
    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no --dynamo_backend no \
        examples/trl_grpo/train.py --model-dir DIR ...

(two ranks over Gloo on a machine without a GPU, as tests/test_record_trl.py runs it; accelerate refuses ``--cpu``
beside ``--multi_gpu``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tiny_rl"))
import tiny_llama

PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples",
           "the reward model", "short ones wait", "a response and", "after every step"]
TARGET = 7  # the reward: how often the completion uses this token id (any fixed id works)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True, help="TRL's output_dir (nothing is saved there)")
    parser.add_argument("--lengths", type=Path, help="JSON lines: TRL's completion lengths per reward call")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=4, help="prompts per step, over all ranks")
    parser.add_argument("--generations", type=int, default=4, help="completions per prompt (GRPO group size)")
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args()

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model_dir = tiny_llama.build(args.model_dir) if rank == 0 else args.model_dir

    def reward(completions: list, completion_ids: list[list[int]], trainer_state: object, **_: object) -> list[float]:
        if args.lengths is not None:
            line = {"step": trainer_state.global_step, "rank": rank, "lengths": [len(c) for c in completion_ids]}
            with args.lengths.open("a") as f:
                f.write(json.dumps(line) + "\n")
        return [sum(t == TARGET for t in ids) / max(len(ids), 1) for ids in completion_ids]

    per_device = args.prompts * args.generations // world
    config = GRPOConfig(
        output_dir=str(args.out), use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
        max_steps=args.steps, per_device_train_batch_size=per_device, num_generations=args.generations,
        max_completion_length=args.max_tokens, learning_rate=1e-3, seed=0, dataloader_num_workers=0,
        disable_tqdm=True,
    )
    # distinct prompts, so a GRPO group is exactly one prompt's completions (suffixes from the tokenizer's own
    # corpus: characters it never saw would be dropped, and two prompts would tokenize the same)
    suffixes = ["", " first", " again", " later", " once more", " at last", " then", " after that"]
    prompts = [PROMPTS[i % len(PROMPTS)] + suffixes[i // len(PROMPTS) % len(suffixes)]
               for i in range(args.steps * args.prompts)]
    dataset = Dataset.from_dict({"prompt": prompts})
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward, args=config, train_dataset=dataset)
    trainer.train()


if __name__ == "__main__":
    main()
