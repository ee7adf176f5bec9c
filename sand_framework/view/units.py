"""The viewer's page of an iteration's data: every unit of ``iterK/synthesis.units.jsonl``, in the shape its method
declares (:attr:`~sand_framework.components.Method.unit_shape`: SAND's deliberation records step by step beside the
rendered training target, or any other unit kept whole as a tree), and every pair of ``iterK/pairs.jsonl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sand_framework.components.declared import BY_NAME
from sand_framework.report.data import RunData
from sand_framework.store import RunLayout, UnitLog, read_json
from sand_framework.view.site_data import SiteData

PAIRS_PER_CHUNK = 50
"""Preference pairs per data file (pairs are small; one file per pair would mean thousands of files)."""


class TargetRenderer:
    """The training target as the agent sees it: the chat rendered with the model's own template, loss spans marked.

    Uses the tokenizer the trainer saved beside the iteration's weights (``weights/iterK/final``, else the
    previous iteration's, which has the same template) and the trainer's own rule
    (:meth:`sand_framework.chat_format.ChatFormat.training_example`, as ``trl_sft`` builds its examples).
    """

    def __init__(self, run: RunData, k: int):
        from sand_framework.chat_format import has_tokenizer

        self.fmt = None
        self.error = ""
        self.max_length = int((run.recipe.get("trainer") or {}).get("max_length") or 0)
        found = [d for d in (run.path / RunLayout.weights(k) / "final", run.path / RunLayout.weights(k - 1) / "final")
                 if has_tokenizer(d)]
        if not found:
            self.error = (f"No tokenizer found beside the weights ({RunLayout.weights(k)}/final or "
                          f"{RunLayout.weights(k - 1)}/final), "
                          "so the training target is shown as chat turns, without the model's template or its "
                          "loss mask.")
            return
        self.source = found[0]
        try:
            from sand_framework.chat_format import ChatFormat

            self.fmt = ChatFormat.from_pretrained(found[0])
        except Exception as exc:  # noqa: BLE001 - a broken tokenizer costs the target view, not the site
            self.error = f"The tokenizer in {found[0]} could not be loaded ({exc}); chat turns shown instead."

    def tokens(self, text: str) -> int | None:
        return len(self.fmt.encode(text)) if self.fmt is not None and text else (0 if self.fmt else None)

    def render(self, trajectory: dict[str, Any]) -> dict[str, Any]:
        from sand_framework.prompting import trajectory_chat
        from sand_framework.types import Trajectory

        traj = Trajectory.from_dict(trajectory)
        chat = trajectory_chat(traj)
        assistant = [i for i, m in enumerate(chat) if m["role"] == "assistant"]
        first_step_turn = len(assistant) - len(traj.steps)
        if self.fmt is None:
            return {"chat": chat, "first_step_turn": first_step_turn, "error": self.error}
        try:
            ids, mask = self.fmt.training_example(chat)
        except Exception as exc:  # noqa: BLE001 - shown in the page instead
            return {"chat": chat, "first_step_turn": first_step_turn, "error": f"the template refused the chat: {exc}"}
        if self.max_length > 0:  # tokens the trainer cuts off (trainer.max_length) are not trained
            mask = [m if i < self.max_length else (2 if m else 3) for i, m in enumerate(mask)]
        spans, start = [], 0
        for i in range(1, len(ids) + 1):
            if i == len(ids) or mask[i] != mask[start]:
                spans.append([self.fmt.tokenizer.decode(ids[start:i]), mask[start]])
                start = i
        return {"spans": spans, "tokens": len(ids), "trained": sum(m == 1 for m in mask),
                "first_step_turn": first_step_turn, "template": str(self.source)}


def _steps(obj: Any) -> list[dict[str, Any]] | None:
    return obj.get("steps") if isinstance(obj, dict) and isinstance(obj.get("steps"), list) else None


def unit_shapes() -> dict[str, str]:
    """Method name -> its :attr:`~sand_framework.components.Method.unit_shape`, for the methods of the built-ins
    and the installed plugins (a method this machine does not have is shown ``generic``: its units' keys are not
    guessed at). Plugins a run's recipe names by module or folder are not loaded: that needs the user's say-so."""
    from sand_framework.plugins import load_plugins

    methods = load_plugins([], []).registries()["method"]
    return {name: methods.get(name).unit_shape for name in methods.names()}


def collect_synthesis(site: SiteData) -> list[dict[str, Any]]:
    """One source per (run, iteration) unit log and per pair file; each unit is one item with its own chunk,
    shown in the shape its method declares."""
    sources = []
    shapes: dict[str, str] | None = None
    for run in site.runs:
        done = (read_json(run.path / RunLayout.STATE, {"done": {}}) or {"done": {}}).get("done", {})
        n_samples = (run.recipe.get("sampler") or {}).get("n")
        for k in RunLayout.iterations_in(run.path):
            method = (done.get(RunLayout.synth_stage(k)) or {}).get("method") or run.component("method")
            method = method if method not in ("-", "?") else BY_NAME["method"].default  # the slot's default
            log_path = run.path / RunLayout.synthesis_units(k)
            if log_path.is_file():
                shapes = unit_shapes() if shapes is None else shapes
                shape = shapes.get(method, "generic")
                sid = f"s{len(sources)}"
                log = UnitLog(log_path)
                if log.corrupt:
                    site.notes.append(f"{run.label} iter{k}: {len(log.corrupt)} unreadable line(s) in "
                                      f"{RunLayout.synthesis_units(k)} left out (lines {log.corrupt[:5]})")
                renderer = None
                items = []
                for i, (unit_id, data) in enumerate(log.records.items()):
                    data = data if isinstance(data, dict) else {"value": data}
                    if renderer is None and shape == "deliberation" and isinstance(data.get("trajectory"), dict):
                        renderer = TargetRenderer(run, k)
                        if renderer.error:
                            site.notes.append(f"{run.label} iter{k}: {renderer.error}")
                    chunk, row = synthesis_unit(unit_id, data, renderer, n_samples, shape)
                    site.chunks[f"{sid}/{i}"] = chunk
                    items.append([i, *row])
                sources.append({"id": sid, "kind": "units", "run": run.label, "iteration": k, "method": method,
                                "samples": n_samples, "path": RunLayout.synthesis_units(k), "items": items})
            pairs_path = run.path / RunLayout.preference_pairs(k)
            if pairs_path.is_file():
                sources.append(pair_source(site, run, k, method, pairs_path, f"p{len(sources)}"))
    return sources


def synthesis_unit(unit_id: str, data: dict[str, Any], renderer: TargetRenderer | None,
                   n_samples: int | None, shape: str = "generic") -> tuple[dict[str, Any], list[Any]]:
    """A unit's chunk and its index row ``[task, steps, deliberated, failed or fallback, success, reward, shape]``
    (a step whose synthesis failed is in the chunk's records, marked ``failed``: shown, not deliberated). A unit of
    a ``deliberation``-shaped method that lacks that shape's keys (damaged) is shown whole, as any other."""
    stats = data.get("stats") if isinstance(data.get("stats"), dict) else {}
    traj = data.get("trajectory") if isinstance(data.get("trajectory"), dict) else None
    records = data.get("records") if isinstance(data.get("records"), list) else None
    failed = data.get("failed") if isinstance(data.get("failed"), list) else []
    task = (traj or {}).get("task_id") or data.get("task_id") or unit_id
    if shape == "deliberation" and traj is not None and _steps(traj) is not None and records is not None:
        by_step = {}
        for rec in [*records, *({**r, "failed": True} for r in failed if isinstance(r, dict))]:
            if not isinstance(rec, dict):
                continue
            cands = rec.get("candidates") or []
            valid = sum(int(c.get("count", 0) or 0) for c in cands if isinstance(c, dict))
            synth = rec.get("synthesis") if isinstance(rec.get("synthesis"), dict) else {}
            by_step[str(rec.get("step_index"))] = {
                **rec, "samples": {"n": n_samples, "valid": valid,
                                   "invalid": (n_samples - valid) if isinstance(n_samples, int) else None},
                "synthesis_tokens": renderer.tokens(synth.get("thought", "")) if renderer is not None else None}
        extra = {k: v for k, v in data.items() if k not in ("trajectory", "records", "failed", "stats")}
        chunk = {"shape": "sand", "unit": unit_id, "trajectory": traj, "records": by_step, "stats": stats,
                 "extra": extra, "target": renderer.render(traj) if renderer is not None else None}
        unchecked = sum(1 for r in by_step.values()  # steps not trained on a model-written deliberation
                        if (r.get("synthesis") or {}).get("status") in ("fallback", "failed"))
        row = [task, len(traj["steps"]), len(by_step) - len(failed), unchecked, int(bool(traj.get("success"))),
               traj.get("reward"), "sand"]
        return chunk, row
    # Another method's unit (rft, eto, ipr, pairs_file, a plugin's): kept whole, shown as a tree.
    chunk = {"shape": "generic", "unit": unit_id, "task_id": task, "data": data}
    outcome = next((v for k, v in (("success", data.get("success")),
                                   ("agent", (data.get("agent") or {}).get("success")
                                    if isinstance(data.get("agent"), dict) else None)) if isinstance(v, bool)), None)
    row = [task, stats.get("steps", stats.get("examined_steps")), int(stats.get("deliberated", 0) or 0),
           int(stats.get("fallbacks", 0) or 0), -1 if outcome is None else int(outcome), None, "generic"]
    return chunk, row


def pair_source(site: SiteData, run: RunData, k: int, method: str, path: Path, sid: str) -> dict[str, Any]:
    """``iterK/pairs.jsonl`` (TRL conversational pairs): each pair an item, :data:`PAIRS_PER_CHUNK` per file."""
    items, chunk = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                pair = json.loads(line)
            except ValueError:
                site.notes.append(f"{run.label} iter{k}: line {lineno} of {RunLayout.preference_pairs(k)} is not JSON")
                continue
            pair = pair if isinstance(pair, dict) else {"value": pair}
            i = len(items)
            if i % PAIRS_PER_CHUNK == 0:
                chunk = []
                site.chunks[f"{sid}/{i // PAIRS_PER_CHUNK}"] = chunk
            chunk.append(pair)
            rewards = pair.get("rewards") if isinstance(pair.get("rewards"), dict) else {}
            reward = pair.get("chosen_reward", rewards.get("chosen"))
            items.append([i, str(pair.get("id", i)), len(pair.get("chosen") or []), 0, 0, -1,
                          reward if isinstance(reward, (int, float)) else None, "pair"])
    return {"id": sid, "kind": "pairs", "run": run.label, "iteration": k, "method": method,
            "path": RunLayout.preference_pairs(k), "per_chunk": PAIRS_PER_CHUNK, "items": items}
