"""init_process_group("strata") with each of PyTorch's rendezvous (env://, tcp://,
file://, a Store object), subgroups of some ranks beside the world group, and a
process that exits without destroy_process_group (as many PyTorch scripts do):
it must exit 0, not hang or abort in the interpreter's teardown.

usage: test_rendezvous.py env|tcp|file|store
"""
import datetime
import os
import sys
import tempfile

import torch
import torch.distributed as dist

from launch import run_ranks


def rank_main(rank, world, how, path):
    import strata_torch  # noqa: F401
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    if how == "env":
        dist.init_process_group("strata")
    elif how == "tcp":
        dist.init_process_group("strata", init_method=f"tcp://{addr}:{port}", rank=rank, world_size=world)
    elif how == "file":
        dist.init_process_group("strata", init_method=f"file://{path}", rank=rank, world_size=world)
    else:
        store = dist.TCPStore(addr, port, world, rank == 0, datetime.timedelta(seconds=60))
        dist.init_process_group("strata", store=store, rank=rank, world_size=world)
    assert dist.get_backend() == "strata", dist.get_backend()
    evens = dist.new_group([r for r in range(world) if r % 2 == 0], backend="strata")
    second = dist.new_group(backend="strata")
    for group, members in ((None, range(world)), (evens, range(0, world, 2)), (second, range(world))):
        if rank not in members:
            continue
        x = torch.full((1 << 12,), float(rank + 1))
        dist.all_reduce(x, group=group)
        want = float(sum(m + 1 for m in members))
        assert torch.equal(x, torch.full((1 << 12,), want)), (rank, list(members), x[:3])
    if rank == 0:
        print(f"{how}://: world, even-rank subgroup and a second group all exact; exiting without destroy",
              flush=True)
    # no destroy_process_group: the interpreter's exit tears the groups down


if __name__ == "__main__":
    how = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        run_ranks(rank_main, 3, args=(how, os.path.join(d, "rendezvous")), deadline=120, teardown=True)
