"""Launching torchrun from tests: the environment of a launch, and a run on two "machines" of this one host, started
with the very command the window prints for several machines (engine/run_commands.py)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from desktop_app.engine.run_commands import torchrun_command
from desktop_app.engine.specs import RunConfig

ROOT = Path(__file__).resolve().parents[2]


def env() -> dict[str, str]:
    out = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        out.pop(name, None)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machines_command(config: RunConfig, run_json: Path, out: Path, node: int, port: int) -> list[str]:
    """The command the window prints for several machines, for machine `node` of 2 on this host: M = 2, R = node,
    HOST:PORT = 127.0.0.1 and a free port; torchrun run as this Python's module (no PATH needed)."""
    line = next(x for x in torchrun_command(config, str(run_json), str(out)).splitlines()
                if x.startswith("torchrun --nnodes"))
    words = {"M": "2", "R": str(node), "HOST:PORT": f"127.0.0.1:{port}"}
    return [sys.executable, "-m", "torch.distributed.run", *[words.get(w, w) for w in shlex.split(line)[1:]]]


def run_on_two_machines(config: RunConfig, folder: Path, timeout: float = 300) -> Path:
    """Two torchrun launchers (`--nnodes 2`, node ranks 0 and 1, c10d rendezvous on 127.0.0.1), one process each
    (the config's distributed.nproc_per_node, 1): the run folder they train, once both ended well."""
    config.save(folder / "run.json")
    port, out = free_port(), folder / "run"
    launchers = []
    for node in (0, 1):
        cmd = machines_command(config, folder / "run.json", out, node, port)
        assert "--nproc_per_node 1" in " ".join(cmd) and f"--node_rank {node}" in " ".join(cmd), cmd
        launchers.append(subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
        if node == 0:
            time.sleep(0.5)  # machine 0 hosts the rendezvous store
    results = [p.communicate(timeout=timeout) for p in launchers]
    for p, (_out, err) in zip(launchers, results, strict=True):
        assert p.returncode == 0, err[-3000:]
    return out
