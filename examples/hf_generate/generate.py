"""Plain Hugging Face generation, the way research RL loops sample: a left-padded batch of prompts of different
lengths, several samples per prompt (``num_return_sequences``), EOS and pad tokens that differ, a few calls.

The job prints one JSON line: for every call, each returned sequence's prompt length and true output length,
computed here token by token from what ``generate`` returned (new tokens up to and including the first EOS,
every new token when there is none), so a recording can be checked against the job's own account.

With ``--train`` it is a one-process RL loop without torch.distributed: after each call, one AdamW step on
the sampled sequences' likelihood (a stand-in for a policy-gradient loss), so the next call samples new weights.

    python examples/hf_generate/generate.py --model-dir DIR [--calls 2] [--samples 3] [--max-tokens 24] [--train]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tiny_rl"))
import tiny_llama

PROMPTS = ["the policy samples a response", "weights", "long rollouts hold back the whole batch", "a group"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--train", action="store_true", help="an AdamW step after every call")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tiny_llama.build(args.model_dir)
    tok = AutoTokenizer.from_pretrained(folder, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(folder)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3) if args.train else None
    calls = []
    for _ in range(args.calls):
        batch = tok(PROMPTS, return_tensors="pt", padding=True)
        out = model.generate(**batch, do_sample=True, max_new_tokens=args.max_tokens,
                             num_return_sequences=args.samples, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)
        width = batch["input_ids"].shape[1]
        rows = []
        for i, seq in enumerate(out.tolist()):
            new = seq[width:]
            length = next((k + 1 for k, t in enumerate(new) if t == tok.eos_token_id), len(new))
            rows.append({"prompt": int(batch["attention_mask"][i // args.samples].sum()), "output": length})
        calls.append(rows)
        if optimizer is not None:
            model.train()
            model(input_ids=out, labels=out).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            model.eval()
    print(json.dumps({"calls": calls, "samples": args.samples, "prompts": len(PROMPTS)}))


if __name__ == "__main__":
    main()
