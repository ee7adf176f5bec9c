"""The device check for the first GPU lent to this project (issue 37): what only a GPU can show, in one command.

Parts, each timed and recorded even when another fails:

* ``sft``, ``dpo``: a few optimizer steps of the built-in ``trl_sft`` / ``trl_dpo`` trainers on a tiny random-init
  model, LoRA with ``dtype: auto`` (bf16 on CUDA), through the same ``train(TrainRequest)`` a run calls;
* ``hand_back``: the CUDA memory the caching allocator reserves after those trainings, and after
  :func:`sand_framework.accelerator.hand_back` (the step that lets an inference engine start on the GPU);
* ``sand_loop``: ``sand run`` of the example plugin's recipe (the pure-Python light-switch puzzle, no Java) with
  the ``transformers`` policy on the device: expert, SFT, synthesis, SFT again, evaluation.

Writes one JSON record (``--out``): the device, the versions, and per part ``ok``, ``seconds`` and what it measured
or the error. ``scripts/gpu_check.sh`` runs it on the device machine (which lacks TRL, datasets and omegaconf:
they travel as wheels); ``--cpu`` runs the same parts on this machine's CPU, which is how
``tests/gpu/test_gpu_check.py`` keeps the script working until a GPU is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent
EXAMPLE_RECIPE = REPO / "plugins" / "examples" / "sand-example-plugin" / "recipes" / "example.yaml"
PARTS = ("sft", "dpo", "hand_back", "sand_loop")


def _cuda_memory() -> dict[str, int]:
    import torch

    if not torch.cuda.is_available():
        return {}
    return {"reserved": int(torch.cuda.memory_reserved()), "allocated": int(torch.cuda.memory_allocated()),
            "max_reserved": int(torch.cuda.max_memory_reserved())}


def _trajectories(n: int):
    from sand_framework.types import Step, Trajectory

    return [Trajectory(task_id=f"t{i}", env="toy", task=f"You are in room {i}. You see a coin and a door.",
                       instruction="Answer with Thought: and Action:.",
                       steps=[Step("I look first.", "look around", "You see a coin."),
                              Step("The coin is here.", "take coin", "You take the coin.")]) for i in range(n)]


def _pairs(n: int):
    from sand_framework.types import PreferencePair, Step

    chosen = [Step("The coin is near.", "take coin", "You take the coin.")]
    rejected = [Step("Maybe north.", "go north", "You are in a hall.")]
    prompts = _trajectories(n)
    for prompt in prompts:
        prompt.steps = []  # the pair's sides are the steps after the task
    return [PreferencePair(p, chosen, rejected, chosen_reward=1.0, rejected_reward=0.0) for p in prompts]


def part_sft(work: Path, model: str) -> dict[str, Any]:
    from sand_framework.components import TrainRequest
    from sand_builtins.trainers.trl_sft import TrlSftTrainer

    trainer = TrlSftTrainer(TrlSftTrainer.Params(max_steps=4, logging_steps=1, batch_size=2, per_device_batch_size=2,
                                                 report_to="none", learning_rate=1e-2, warmup_ratio=0.0))
    final = trainer.train(TrainRequest(_trajectories(8), model, None, str(work / "sft"), epochs=1.0, seed=0))
    summary = json.loads((work / "sft" / "training_summary.json").read_text())
    return {"final": final, "steps": summary.get("steps"), "train_loss_first": summary.get("train_loss_first"),
            "train_loss_last": summary.get("train_loss_last"), "memory": _cuda_memory()}


def part_dpo(work: Path, model: str) -> dict[str, Any]:
    from sand_framework.components import TrainRequest
    from sand_builtins.trainers.trl_dpo import DpoTrainer

    trainer = DpoTrainer(DpoTrainer.Params(max_steps=4, logging_steps=1, batch_size=2, per_device_batch_size=2,
                                           report_to="none", learning_rate=[5e-3], beta=[0.1], warmup_ratio=0.0,
                                           lr_scheduler_type="constant"))
    final = trainer.train(TrainRequest([], model, None, str(work / "dpo"), epochs=1.0, seed=0, pairs=_pairs(4)))
    summary = json.loads((work / "dpo" / "training_summary.json").read_text())
    return {"final": final, "steps": summary.get("steps"), "reference": summary.get("reference"),
            "reward_accuracy_last": summary.get("reward_accuracy_last"), "memory": _cuda_memory()}


def part_hand_back(work: Path, model: str) -> dict[str, Any]:
    from sand_framework.accelerator import hand_back

    before = _cuda_memory()
    report = hand_back("gpu_check")
    return {"before": before, "after": _cuda_memory(), "released_bytes": report.released,
            "still_reserved_bytes": report.still_reserved, "summary": report.summary()}


def part_sand_loop(work: Path, model: str, timeout: float = 900) -> dict[str, Any]:
    """``sand run`` in a process of its own (the run's own CUDA context, as a user's run has)."""
    import importlib.util

    if importlib.util.find_spec("sand_example") is None:
        raise RuntimeError("the example plugin is not installed (pip install plugins/examples/sand-example-plugin, "
                           "or its wheel: scripts/gpu_check.sh carries it)")
    run = work / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "plugins"),
                                                         os.environ.get("PYTHONPATH", "")])}
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sand_framework.cli.main", "run", str(EXAMPLE_RECIPE),
                           "policy=transformers", "eval.limit=2", "--run-dir", str(run)],
                          env=env, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    out: dict[str, Any] = {"rc": proc.returncode, "wall_seconds": round(time.perf_counter() - started, 1),
                           "stderr_tail": proc.stderr[-1500:]}
    metrics = run / "metrics.json"
    if metrics.is_file():
        data = json.loads(metrics.read_text())
        out["eval"] = data.get("eval")
        out["backend"] = data.get("backend")
    if proc.returncode != 0:
        raise RuntimeError(f"sand run exited {proc.returncode}: {proc.stderr[-600:]}")
    return out


RUNNERS: dict[str, Callable[[Path, str], dict[str, Any]]] = {
    "sft": part_sft, "dpo": part_dpo, "hand_back": part_hand_back, "sand_loop": part_sand_loop}


def device_facts() -> dict[str, Any]:
    import torch

    facts: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                             "cuda": torch.cuda.is_available()}
    if facts["cuda"]:
        props = torch.cuda.get_device_properties(0)
        facts.update(name=props.name, memory_gb=round(props.total_memory / 1e9, 1), count=torch.cuda.device_count(),
                     bf16=torch.cuda.is_bf16_supported())
    for package in ("transformers", "trl", "peft", "accelerate", "datasets"):
        try:
            facts[package] = __import__(package).__version__
        except Exception as exc:  # noqa: BLE001 - the record says what is missing
            facts[package] = f"missing: {type(exc).__name__}"
    return facts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="The JSON record to write.")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"Comma-separated, of {', '.join(PARTS)}.")
    ap.add_argument("--cpu", action="store_true", help="Run on the CPU (this machine's check of the script).")
    args = ap.parse_args(argv)
    if args.cpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path[:0] = [str(REPO), str(REPO / "plugins")]
    parts = [p for p in args.parts.split(",") if p]
    unknown = [p for p in parts if p not in RUNNERS]
    if unknown:
        ap.error(f"unknown part(s) {', '.join(unknown)}; use {', '.join(PARTS)}")
    record: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cpu_mode": args.cpu, "parts": {}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="sand-gpu-check-") as tmp:
        work = Path(tmp)
        try:
            record["device"] = device_facts()
            from sand_framework.testing.tiny_model import build_tiny_model

            model = str(build_tiny_model(work / "tiny"))
        except Exception as exc:  # noqa: BLE001
            record["setup_error"] = f"{type(exc).__name__}: {exc}"
            parts, model = [], ""
        for name in parts:
            t0 = time.perf_counter()
            try:
                result = {"ok": True, **RUNNERS[name](work, model)}
            except Exception as exc:  # noqa: BLE001 - one part's failure is recorded, the next still runs
                result = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-2000:]}
            result["seconds"] = round(time.perf_counter() - t0, 2)
            record["parts"][name] = result
            print(f"gpu_check {name}: {'ok' if result['ok'] else 'FAILED ' + result['error'][:200]} "
                  f"({result['seconds']} s)", flush=True)
    record["seconds"] = round(time.perf_counter() - started, 1)
    Path(args.out).write_text(json.dumps(record, indent=2, default=str) + "\n")
    ok = "setup_error" not in record and all(p["ok"] for p in record["parts"].values())
    print(f"gpu_check: {'all parts ok' if ok else 'some parts failed'}; record in {args.out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
