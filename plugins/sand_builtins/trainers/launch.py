"""Training across several processes: one ``sand run`` stage under ``accelerate launch``.

``trainer.launch: {num_processes: 8, config: fsdp}`` makes the trainer write
its request (trajectories, params) into the stage's output directory and run
``accelerate launch --config_file CONFIG --num_processes N -m
sand_builtins.trainers.rank REQUEST``; every rank rebuilds the same trainer
from that file and trains in process (:mod:`.rank`). The parent holds no model meanwhile
(the engine has released its policy before any training stage), so the GPUs
are free for the ranks. ``final/`` appearing is the success signal, exactly as
in one process, so resume behaves the same.

Shipped accelerate configs (``ddp``, ``fsdp``, ``zero3``) live next to this
file; any other value is a path to the user's own accelerate config.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from sand_framework.components import TrainRequest
from sand_framework.cpu_threads import cpu_threads
from sand_framework.errors import SandError
from sand_framework.types import Trajectory

CONFIG_DIR = Path(__file__).parent / "accelerate"
SHIPPED_CONFIGS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
REQUEST_FILE = "launch_request.json"


class LaunchError(SandError):
    """A multi-process training stage failed; the stage is resumable from its checkpoints."""

    exit_code = 1


def config_path(config: str) -> Path:
    """The accelerate config file for a shipped name (``ddp``, ``fsdp``, ``zero3``) or a user's path."""
    if config in SHIPPED_CONFIGS:
        return CONFIG_DIR / f"{config}.yaml"
    path = Path(config).expanduser()
    if not path.is_file():
        raise LaunchError(f"trainer.launch.config: {config!r} is neither a shipped config "
                          f"({', '.join(SHIPPED_CONFIGS)}) nor an accelerate config file")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_request(request: TrainRequest, params: Any, path: Path) -> None:
    body = {
        "params": dataclasses.asdict(params),
        "request": {**{f.name: getattr(request, f.name) for f in dataclasses.fields(request)
                       if f.name != "trajectories"},
                    "trajectories": [t.to_dict() for t in request.trajectories]},
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def read_request(path: Path) -> tuple[dict[str, Any], TrainRequest]:
    body = json.loads(Path(path).read_text())
    req = dict(body["request"])
    req["trajectories"] = [Trajectory.from_dict(t) for t in req["trajectories"]]
    return body["params"], TrainRequest(**req)


def launch(request: TrainRequest, params: Any) -> None:
    """Run the training stage in ``params.launch.num_processes`` processes and wait for them."""
    out = Path(request.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    req_file = out / REQUEST_FILE
    # the free cores are measured once, here: ranks measuring them side by side would each take them all
    threads = params.threads or max(1, cpu_threads() // params.launch.num_processes)
    params = dataclasses.replace(params, threads=threads)
    write_request(request, params, req_file)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(config_path(params.launch.config)), "--num_processes", str(params.launch.num_processes),
           "--num_machines", "1", "--main_process_port", str(_free_port()),
           "-m", "sand_builtins.trainers.rank", str(req_file)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0 or not (out / "final").is_dir():
        raise LaunchError(
            f"training under `accelerate launch` ({params.launch.num_processes} processes, config "
            f"{params.launch.config}) exited with status {proc.returncode}; the ranks' output is above. "
            f"Fix the cause and resume the run: checkpoints in {out / 'checkpoints'} are kept.")
