"""Training across several processes: one ``sand run`` stage under ``accelerate launch``, for any TRL trainer.

``launch: {num_processes: 8, config: fsdp}`` (``trainer.launch`` or
``preference_trainer.launch``) makes the trainer write its request (trajectories or pairs, params, and which
trainer class it is) into the stage's output directory and run
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
import importlib
import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sand_framework.components import PreferenceTrainRequest, TrainRequest
from sand_framework.cpu_threads import cpu_threads
from sand_framework.errors import SandError
from sand_framework.types import PreferencePair, Trajectory

CONFIG_DIR = Path(__file__).parent / "accelerate"
SHIPPED_CONFIGS = tuple(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))
REQUEST_FILE = "launch_request.json"
DEFAULT_TRAINER = "sand_builtins.trainers.trl_sft:TrlSftTrainer"
"""The trainer of a request file that names none (written before requests named their trainer)."""


@dataclass
class LaunchParams:
    num_processes: int = 1
    """Training processes (one per GPU). Above 1 the stage runs under ``accelerate launch``."""
    config: str = "ddp"
    """Accelerate config: ``ddp``, ``fsdp`` (FSDP v2, full state dict saved), ``zero3`` (DeepSpeed ZeRO-3; needs
    ``deepspeed``), or a path to your own accelerate config file."""


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


def trainer_class(path: str) -> type:
    """The class ``module:QualName`` names (what a rank runs)."""
    module, _, qualname = path.partition(":")
    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def trainer_path(cls: type) -> str:
    """``module:QualName`` of ``cls``, checked to lead back to it (a class made inside a function cannot)."""
    path = f"{cls.__module__}:{cls.__qualname__}"
    try:
        found = trainer_class(path)
    except (ImportError, AttributeError):
        found = None
    if found is not cls:
        raise LaunchError(f"{path} cannot run under `accelerate launch`: each rank imports its trainer class by "
                          f"name, so it must be defined at a module's top level")
    return path


def write_request(request: TrainRequest | PreferenceTrainRequest, params: Any, path: Path, trainer: type) -> None:
    req = {f.name: getattr(request, f.name) for f in dataclasses.fields(request)}
    if isinstance(request, PreferenceTrainRequest):
        req["pairs"] = [p.to_dict() for p in request.pairs]
    else:
        req["trajectories"] = [t.to_dict() for t in request.trajectories]
        for deprecated in ("pairs", "reference_weights"):  # an SFT request's (0.3.4) preference fields
            req.pop(deprecated, None)
    kind = "preference" if isinstance(request, PreferenceTrainRequest) else "sft"
    body = {"trainer": trainer_path(trainer), "params": dataclasses.asdict(params), "request": req, "kind": kind}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, path)


def read_request(path: Path) -> tuple[type, dict[str, Any], TrainRequest | PreferenceTrainRequest]:
    """(the trainer class, its raw params, the request) a rank rebuilds from ``path``."""
    body = json.loads(Path(path).read_text())
    req = dict(body["request"])
    cls = trainer_class(body.get("trainer", DEFAULT_TRAINER))
    if body.get("kind") == "preference":
        req["pairs"] = [PreferencePair.from_dict(p) for p in req["pairs"]]
        return cls, body["params"], PreferenceTrainRequest(**req)
    req["trajectories"] = [Trajectory.from_dict(t) for t in req.get("trajectories", [])]
    return cls, body["params"], TrainRequest(**req)


def launch(request: TrainRequest | PreferenceTrainRequest, params: Any, trainer: type) -> None:
    """Run ``trainer``'s stage in ``params.launch.num_processes`` processes and wait for them."""
    out = Path(request.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    req_file = out / REQUEST_FILE
    # the free cores are measured once, here: ranks measuring them side by side would each take them all
    threads = params.threads or max(1, cpu_threads() // params.launch.num_processes)
    params = dataclasses.replace(params, threads=threads)
    write_request(request, params, req_file, trainer)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(config_path(params.launch.config)), "--num_processes", str(params.launch.num_processes),
           "--num_machines", "1", "--main_process_port", str(_free_port()),
           "-m", "sand_builtins.trainers.rank", str(req_file)]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.run(cmd, env=env)
    if proc.returncode != 0 or not (out / "final").is_dir():
        raise LaunchError(
            f"{getattr(trainer, 'name', '') or trainer.__name__} training under `accelerate launch` "
            f"({params.launch.num_processes} processes, config {params.launch.config}) exited with status "
            f"{proc.returncode}; the ranks' output is above. "
            f"Fix the cause and resume the run: checkpoints in {out / 'checkpoints'} are kept.")
