"""Failures surface as Python exceptions with Strata's message (which rank, which
call, why) and nothing hangs: bad arguments raise at the call; Work.wait(timeout)
and the group's timeout give up on a rank that does not join, and its peers then
fail instead of waiting; a killed rank makes the others raise within seconds.

usage: test_errors.py arguments|timeouts|killed
"""
import datetime
import sys
import time

import torch
import torch.distributed as dist

from launch import kill_self, run_ranks


def raises(what, fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        missing = [n for n in needles if n not in msg]
        if missing:
            raise AssertionError(f"{what}: the error lacks {missing}: {msg}")
        return msg
    raise AssertionError(f"{what}: no error")


def arguments(rank, world):
    import strata_torch  # noqa: F401
    dist.init_process_group("strata", init_method="env://")
    t = torch.ones(4, dtype=torch.int32)
    raises("BAND", lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND), f"rank {rank}", "all_reduce", "BAND")
    raises("AVG on bool", lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.AVG), "bool")
    raises("MAX on complex", lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex64), op=dist.ReduceOp.MAX),
           "complex")
    raises("all_gather list length", lambda: dist.all_gather([torch.empty(4)], torch.ones(4)), "all_gather",
           f"list of {world} tensors")
    raises("all_gather_into_tensor size", lambda: dist.all_gather_into_tensor(torch.empty(4 * world + 1), torch.ones(4)),
           "_allgather_base", "world_size times")
    raises("unequal split sizes", lambda: dist.all_to_all_single(torch.empty(4), torch.ones(4),
                                                                 input_split_sizes=[1] * (world + 1)), "split sizes")
    raises("recv from anyone", lambda: dist.recv(torch.empty(2)), "any source")
    raises("send to self", lambda: dist.send(torch.empty(2), dst=rank), "not another rank")
    # the group still works after all of that (nothing was sent)
    x = torch.full((5,), float(rank))
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((5,), float(sum(range(world))))), x
    if rank == 0:
        print("every bad argument raised with the rank, the call and the cause", flush=True)
    dist.destroy_process_group()


def timeouts(rank, world):
    import strata_torch  # noqa: F401
    dist.init_process_group("gloo", init_method="env://")
    strata = dist.new_group(backend="strata")
    # Work.wait(timeout): rank 0 gives up on an all-reduce the others join late; its
    # communicator is aborted, and the late ranks fail instead of waiting for it.
    x = torch.ones(1000)
    if rank == 0:
        work = dist.all_reduce(x, group=strata, async_op=True)
        t0 = time.monotonic()
        raises("Work.wait timeout", lambda: work.wait(timeout=datetime.timedelta(milliseconds=300)), "rank 0",
               "all_reduce", "Work.wait's timeout of 300 ms")
        assert time.monotonic() - t0 < 2, time.monotonic() - t0
        raises("after the abort", lambda: dist.all_reduce(torch.ones(3), group=strata), "aborted")
    dist.barrier()  # gloo: the late ranks go now
    if rank != 0:
        t0 = time.monotonic()
        msg = raises("late rank", lambda: dist.all_reduce(x, group=strata), "rank 0")
        print(f"rank {rank}: late, failed: {msg}", flush=True)
        assert time.monotonic() - t0 < 10, f"the late rank took {time.monotonic() - t0:.1f} s to fail"
    # The group's own timeout: the last rank never calls.
    short = dist.new_group(backend="strata", timeout=datetime.timedelta(seconds=2))
    if rank != world - 1:
        t0 = time.monotonic()
        # its own watchdog fires, or a peer's (whose abort then stops this rank): either names the cause
        msg = raises("group timeout", lambda: dist.all_reduce(torch.ones(10), group=short))
        assert "the process group's timeout" in msg or "ncclCommAbort" in msg, msg
        took = time.monotonic() - t0
        assert 1.8 < took < 6, f"the group's timeout of 2 s fired after {took:.1f} s"
        print(f"rank {rank}: the group's timeout of 2 s fired after {took:.2f} s: {msg}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def killed(rank, world):
    import strata_torch  # noqa: F401
    dist.init_process_group("strata", init_method="env://")
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    if rank == world - 1:
        kill_self()
    time.sleep(0.2)
    t0 = time.monotonic()
    msg = raises("killed peer", lambda: [dist.all_reduce(x) for _ in range(1000)], f"rank {world - 1}")
    took = time.monotonic() - t0
    assert took < 5, f"took {took:.1f} s to notice the killed rank"
    print(f"rank {rank}: raised {took:.2f} s after the kill: {msg}", flush=True)


if __name__ == "__main__":
    case = sys.argv[1]
    world = 3
    run_ranks({"arguments": arguments, "timeouts": timeouts, "killed": killed}[case], world, deadline=120,
              dead={world - 1: 9} if case == "killed" else None)
