"""torch.distributed on backend "nccl" through Strata's libnccl.so.2 (preloaded by
scripts/gpu-check.sh): world size 2, both ranks on cuda:0, every call checked exactly."""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, world, port, failures):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda:0"))
    dev = torch.device("cuda:0")
    errors = []

    def expect(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            errors.append(f"rank {rank}: {name}: got {got[:4].tolist()}, expected {want[:4].tolist()}")

    n = 1 << 16
    x = torch.arange(n, dtype=torch.float32, device=dev) + rank
    dist.all_reduce(x)
    expect("all_reduce", x, 2 * torch.arange(n, dtype=torch.float32) + 1)
    parts = [torch.empty(n, device=dev) for _ in range(world)]
    dist.all_gather(parts, torch.full((n,), float(rank), device=dev))
    for r in range(world):
        expect(f"all_gather[{r}]", parts[r], torch.full((n,), float(r)))
    out = torch.empty(n, device=dev)
    dist.reduce_scatter(out, [torch.full((n,), float(rank + r), device=dev) for r in range(world)])
    expect("reduce_scatter", out, torch.full((n,), float(sum(q + rank for q in range(world)))))
    b = torch.full((n,), float(rank), device=dev)
    dist.broadcast(b, src=1)
    expect("broadcast", b, torch.full((n,), 1.0))
    if rank == 0:
        dist.send(torch.full((n,), 42.0, device=dev), dst=1)
    else:
        got = torch.empty(n, device=dev)
        dist.recv(got, src=0)
        expect("send/recv", got, torch.full((n,), 42.0))
    torch.cuda.synchronize()
    dist.destroy_process_group()
    failures.extend(errors)


if __name__ == "__main__":
    with mp.Manager() as m:
        failures = m.list()
        mp.spawn(rank_main, args=(2, 29517, failures), nprocs=2, join=True)
        if failures:
            print("\n".join(failures))
            sys.exit(1)
    print("torch.distributed (nccl backend via Strata): all_reduce, all_gather, reduce_scatter, broadcast, send/recv OK")
