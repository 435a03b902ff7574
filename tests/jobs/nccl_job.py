"""A one-GPU NCCL job for the torch.distributed collector's CUDA path (run under ``rltrace record``).

NCCL refuses two ranks of one communicator on one GPU, so on a one-GPU machine the job is a single rank and
asks the collector to record one-rank groups too (``install(min_ranks=1)``; by default rltrace skips them,
since they move nothing between GPUs). Every op is timed here as well, from the host, up to the GPU's
completion (issue, ``Work.wait``, then a device synchronize), and the timings go to stdout as one JSON line
(op -> wall seconds), so the test can hold the recorded durations against them.
"""

import json
import time

import torch
import torch.distributed as dist
from rltrace.collectors import torch_dist

MB = 1 << 20


def timed(fn, *args, **kwargs) -> float:
    """Wall seconds from issue to the GPU's completion of ``fn``'s work."""
    torch.cuda.synchronize()
    started = time.perf_counter()
    work = fn(*args, **kwargs)
    if work is not None:
        work.wait()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def main() -> None:
    torch_dist.uninstall()
    torch_dist.install(min_ranks=1)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29655", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    dev = torch.device("cuda:0")
    big = torch.ones(64 * MB, dtype=torch.bfloat16, device=dev)  # 128 MB
    out = torch.empty_like(big)
    walls = {"warmup": timed(dist.all_reduce, big)}
    walls["all_reduce"] = timed(dist.all_reduce, big)
    walls["all_gather"] = timed(dist.all_gather_into_tensor, out, big)
    walls["reduce_scatter"] = timed(dist.reduce_scatter_tensor, out, big)
    walls["broadcast"] = timed(dist.broadcast, big, src=0)
    walls["all_reduce_async"] = timed(dist.all_reduce, big, async_op=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4096, 4096, device=dev), device_ids=[0])
    walls["ddp_step"] = timed(lambda: model(torch.randn(64, 4096, device=dev)).sum().backward())
    torch.cuda.synchronize()
    print(json.dumps({"wall_s": walls, "bytes": big.nbytes, "device": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
