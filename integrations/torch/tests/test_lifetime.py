"""The group's worker thread never drops the last reference to a caller's tensor.

A tensor whose Python object the caller has already dropped is kept alive by the
C++ references alone (PyTorch then keeps its Python object inside the tensor);
whichever thread drops the last of them frees that object and takes the GIL to do
it. On the worker thread that fails two ways: while the interpreter is finalizing,
the thread is ended inside a C++ destructor (std::terminate, the process aborts);
and while a thread holding the GIL destroys the group, it waits for the worker,
which waits for the GIL. So the worker hands what it ran back to the caller's
thread, which drops it at its next operation on the group, or when it destroys it.

Rank 0 starts an all_reduce, drops its tensor and the Work, then lets the others
join (so the collective completes only after the drop) and checks on which thread
the tensor's Python object was freed: the caller's, never the worker's.

usage: test_lifetime.py WORLD
"""
import sys
import threading
import weakref

import torch
import torch.distributed as dist

from launch import run_ranks


def rank_main(rank, world):
    import strata_torch  # noqa: F401
    dist.init_process_group("strata", init_method="env://")
    store = dist.distributed_c10d._get_default_store()
    freed_on = []
    if rank == 0:
        x = torch.full((1 << 10,), 1.0)
        weakref.finalize(x, lambda: freed_on.append(threading.get_ident()))
        dist.all_reduce(x, async_op=True)  # its Work is dropped at once too
        del x  # only the group's references remain
        store.set("dropped", "1")
    else:
        store.wait(["dropped"])
        dist.all_reduce(torch.full((1 << 10,), 2.0))  # rank 0's collective completes with this
    y = torch.full((1 << 10,), 2.0)
    dist.all_reduce(y)
    z = torch.full((4,), float(rank))
    dist.all_reduce(z)  # rank 0's first tensor is released by now (at this call or y's), on this thread
    assert torch.equal(z, torch.full((4,), float(sum(range(world))))), z
    if rank == 0:
        assert freed_on == [threading.get_ident()], (
            f"the dropped tensor was freed on thread {freed_on}, not on the caller's "
            f"{threading.get_ident()} at one of its next two calls")
        print("a tensor dropped during its collective was freed on the caller's thread at one of its next two calls",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    run_ranks(rank_main, int(sys.argv[1]), deadline=120, teardown=True)
