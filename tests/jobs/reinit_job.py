"""Two Gloo ranks that destroy their world and join a new one with their ranks swapped (an elastic restart, a
job that re-forms its group), then all-reduce and send from the new rank 0 to the new rank 1.

    python reinit_job.py PORT_A PORT_B
"""

import multiprocessing as mp
import sys

import torch
import torch.distributed as dist


def run(rank: int, ports: list[str]) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[0]}", rank=rank, world_size=2)
    dist.all_reduce(torch.ones(10))
    dist.destroy_process_group()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{ports[1]}", rank=1 - rank, world_size=2)
    big = torch.ones(1000)
    dist.all_reduce(big)
    if dist.get_rank() == 0:
        dist.send(big, 1)
    else:
        dist.recv(big, 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=run, args=(r, sys.argv[1:3])) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in procs))
