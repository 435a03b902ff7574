"""Two Gloo ranks; rank 0 sends three tensors to rank 1 asynchronously and waits on only the second send's Work,
keeping the first's to the end and dropping the third's once both ranks passed a barrier (rank 1 has received all
three by then, so the job runs the same recorded or not). Then the ranks all-reduce.

    python unwaited_job.py PORT
"""

import multiprocessing as mp
import sys

import torch
import torch.distributed as dist

KEPT = []


def run(rank: int, port: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    t = torch.ones(256)
    if rank == 0:
        KEPT.append(dist.isend(t, 1))  # never waited on, held to the end
        dist.isend(t, 1).wait()
        dropped = dist.isend(t, 1)  # never waited on, dropped once rank 1 has it
        dist.barrier()
        del dropped
    else:
        for _ in range(3):
            dist.recv(t, 0)
        dist.barrier()
    dist.all_reduce(t)
    dist.destroy_process_group()


if __name__ == "__main__":
    procs = [mp.get_context("fork").Process(target=run, args=(r, sys.argv[1])) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in procs))
