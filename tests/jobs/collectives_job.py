"""A 2-rank Gloo job issuing every collective API the collector must see (run under torchrun).

Rank 1 sleeps before the first all_reduce, so rank 0's completion time of that op shows the wait.
"""

import time

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

SLOW_S = 0.3


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 1:
        time.sleep(SLOW_S)
    dist.all_reduce(torch.ones(1024))
    gathered = [torch.zeros(256) for _ in range(world)]
    dist.all_gather(gathered, torch.ones(256))
    dist.all_gather_into_tensor(torch.zeros(512 * world), torch.ones(512))
    dist.reduce_scatter_tensor(torch.zeros(128), torch.ones(128 * world))
    dist.broadcast(torch.arange(64, dtype=torch.int64), src=0)
    dist.all_to_all_single(torch.zeros(32 * world), torch.ones(32 * world))
    t = torch.ones(16)
    if rank == 0:
        dist.send(t, dst=1)
    else:
        dist.recv(t, src=0)
    peer = 1 - rank
    ops = [dist.P2POp(dist.isend, torch.ones(8), peer), dist.P2POp(dist.irecv, torch.zeros(8), peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    work = dist.all_reduce(torch.ones(2048), async_op=True)
    work.wait()
    dist.all_reduce(torch.ones(512), dist.ReduceOp.SUM, None, True).wait()  # async_op by position
    reduced = funcol.all_reduce(torch.ones(100), "sum", dist.group.WORLD)
    assert float((reduced + 0)[0]) == world
    mesh = init_device_mesh("cpu", (world,))
    local = torch.full((4, 8), float(rank))
    replicated = DTensor.from_local(local, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()
    assert replicated.shape == (4 * world, 8)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
