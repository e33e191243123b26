"""Runs a function as WORLD ranks in processes (spawned, as torch.multiprocessing
does), each with the rendezvous in its environment; fails unless every rank exits
0 (or, for ranks in `dead`, by the signal given) within the deadline."""
import multiprocessing as mp
import os
import signal
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world, port, args, teardown):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    try:
        fn(rank, world, *args)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001  the parent reports it
        import traceback
        traceback.print_exc()
        print(f"rank {rank}: FAILED: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    if not teardown:
        os._exit(0)  # no interpreter teardown races between the ranks' groups


def run_ranks(fn, world, args=(), dead=None, deadline=300, teardown=False):
    """`dead`: {rank: signal} of ranks expected to die by that signal; `teardown`:
    ranks that return leave through the interpreter's normal exit."""
    dead = dead or {}
    ctx = mp.get_context("spawn")
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, args, teardown)) for r in range(world)]
    for p in procs:
        p.start()
    end = time.monotonic() + deadline
    for p in procs:
        p.join(max(0.1, end - time.monotonic()))
    failed = []
    for r, p in enumerate(procs):
        if p.is_alive():
            p.kill()
            p.join()
            failed.append(f"rank {r} still ran after {deadline} s (killed)")
        elif r in dead:
            if p.exitcode != -dead[r]:
                failed.append(f"rank {r} exited {p.exitcode}, expected signal {dead[r]}")
        elif p.exitcode != 0:
            failed.append(f"rank {r} exited {p.exitcode}")
    if failed:
        raise SystemExit("; ".join(failed))


def kill_self():
    os.kill(os.getpid(), signal.SIGKILL)
