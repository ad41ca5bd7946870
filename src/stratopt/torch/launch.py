"""N ranks of ``torch.distributed`` on this machine: spawned, joined, stopped together.

:func:`run_ranks` starts ``world`` processes (``gloo`` on the CPU, ``nccl`` with a GPU each where CUDA
has enough), runs a module-level function on every rank, and returns what each rank returned (JSON
values). A rank that raises, the time limit or Ctrl-C stops every rank, and the caller gets a one-line
:class:`~stratopt.errors.ModelError`; a process that crashes after every rank wrote its result (gloo
has been seen to abort at teardown) is not a failure. ``check-plan`` and ``train`` run on it.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from typing import Any

from stratopt.errors import ModelError

__all__ = ["backend", "run_ranks"]


def backend(world: int) -> str:
    """``nccl`` where CUDA has a device for each of ``world`` ranks, else ``gloo``."""
    import torch

    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"


def run_ranks(
    work: Callable[[int, int, Any], Any], world: int, payload: Any, *, timeout: float, what: str
) -> list[Any]:
    """``work(rank, world, payload)`` on each of ``world`` spawned ranks of one process group; the
    ranks' results in rank order. ``what`` names the command in errors."""
    import torch.multiprocessing as mp

    if world < 1:
        raise ModelError(f"{what}: --world must be a positive number of processes, got {world}")
    with tempfile.TemporaryDirectory() as out:
        args = (world, _free_port(), backend(world), work, payload, out)
        context = mp.start_processes(_rank, args=args, nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=0.5):
                if time.monotonic() > deadline:
                    raise ModelError(f"{what}: the {world} processes did not finish in {timeout:g} s")
        except mp.ProcessRaisedException as exc:
            last = [line for line in str(exc).strip().splitlines() if line.strip()]
            raise ModelError(f"{what}: a process failed: {last[-1] if last else exc}") from None
        except mp.ProcessExitedException as exc:
            if not _complete(out, world):  # a crash after the results were written is not the work's
                raise ModelError(f"{what}: a process exited: {exc}") from None
        finally:  # Ctrl-C included: no rank outlives the command
            for process in context.processes:
                if process.is_alive():
                    process.terminate()
            for process in context.processes:
                process.join(5)
        return [_read(out, rank) for rank in range(world)]


def _rank(rank: int, world: int, port: int, kind: str, work: Callable[..., Any], payload: Any, out: str) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if kind == "nccl":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)
    dist.init_process_group(kind, rank=rank, world_size=world)
    try:
        result = work(rank, world, payload)
        with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
            json.dump(result, fh)
        dist.barrier()  # every result is written before any process tears down
    finally:
        dist.destroy_process_group()
    # no interpreter teardown: gloo's threads have been seen to abort a process there (SIGABRT,
    # "terminate called without an active exception") after its work was done
    os._exit(0)


def _read(out: str, rank: int) -> Any:
    with open(os.path.join(out, f"rank{rank}.json")) as fh:
        return json.load(fh)


def _complete(out: str, world: int) -> bool:
    """Whether every rank wrote its result (after every process had done its part)."""
    try:
        for rank in range(world):
            _read(out, rank)
    except (OSError, ValueError):
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
