"""What ``sand view`` shows, collected from a run directory, a ``sand eval`` folder or a sweep folder.

Everything comes from the durable artifacts ``sand report`` reads (:mod:`sand_framework.report.data` loads the
runs and their evaluations; the report's tables and the sweep's cost rule are reused as they are), plus the
per-step detail only the viewer needs: every unit of ``iterK/synthesis.units.jsonl`` (SAND's deliberation
records, or whatever another method stored), ``iterK/pairs.jsonl`` and every evaluated episode.

The result is split in two: :attr:`SiteData.overview` (rendered into ``index.html`` by Jinja2) and
:attr:`SiteData.index` plus :attr:`SiteData.chunks` (written as JS data files; the index is loaded with the page,
each chunk only when its trajectory, task or group of pairs is opened). Unknown unit shapes are kept whole and
shown as a tree, never dropped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sand_framework.components.declared import BY_NAME, SLOTS
from sand_framework.config.schema import SECTIONS
from sand_framework.errors import RunDirError
from sand_framework.report import tables
from sand_framework.report.data import RunData, load_runs, model_order, split_order
from sand_framework.store import RunLayout as L, UnitLog, read_json

PAIRS_PER_CHUNK = 50
"""Preference pairs per data file (pairs are small; one file per pair would mean thousands of files)."""


@dataclass
class SiteData:
    kind: str
    """``run``, ``eval`` (a ``sand eval`` folder) or ``sweep``."""
    title: str
    source: Path
    runs: list[RunData]
    overview: dict[str, Any] = field(default_factory=dict)
    index: dict[str, Any] = field(default_factory=dict)
    chunks: dict[str, Any] = field(default_factory=dict)
    """Data file key (``s0/12``, ``e/3``, ``p0/1``) -> its JSON-able content."""
    notes: list[str] = field(default_factory=list)
    """Things the site could not show and why (no tokenizer, unreadable lines), also shown in the page."""


# -- what a folder is -----------------------------------------------------------------------------------------


def sweep_runs(path: Path) -> list[Path]:
    """The run directories of a sweep output folder (``OUT/<arm>/seed<k>``)."""
    return sorted(p for p in path.glob("*/seed*") if p.is_dir() and (p / L.RECIPE).is_file())


def kind_of(path: Path) -> str:
    if (path / L.RECIPE).is_file():
        return "run"
    if (path / L.EVAL_SPEC).is_file() or ((path / L.EVAL).is_dir() and (path / L.METRICS).is_file()):
        return "eval"
    if (path / "results.json").is_file() or sweep_runs(path):
        return "sweep"
    raise RunDirError(f"{path} is not a SAND run directory (recipe.yaml), a `sand eval` folder (eval.json, eval/) "
                      "or a `sand sweep` folder (results.json, <arm>/seed<k>/)")


def collect(path: str | Path) -> SiteData:
    """Everything the site shows about ``path`` (a run, a ``sand eval`` folder or a sweep folder)."""
    path = Path(path)
    kind = kind_of(path)
    if kind == "sweep":
        paths = sweep_runs(path)
        runs = load_runs(paths) if paths else []
        for run, p in zip(runs, paths):  # OUT/<arm>/seed<k>: the arm and seed tell them apart
            run.label = f"{p.parent.name}/{p.name}"
        title = (read_json(path / "results.json", {}) or {}).get("name") or path.resolve().name
    else:
        runs = load_runs([path])
        title = runs[0].label
    site = SiteData(kind=kind, title=title, source=path, runs=runs)
    site.index = {"title": title, "kind": kind, "synth": collect_synthesis(site), "eval": collect_eval(site)}
    site.overview = overview(site)
    return site


# -- overview ---------------------------------------------------------------------------------------------------


def parse_markdown_table(md: str) -> dict[str, Any]:
    """A table of :mod:`sand_framework.report.tables` as ``{"header", "align", "rows"}`` (cells as text)."""

    def cells(line: str) -> list[str]:
        inner = line.strip()[1:-1]
        return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]

    lines = [ln for ln in md.strip().splitlines() if ln.strip()]
    if len(lines) < 2:
        return {"header": [], "align": [], "rows": []}
    align = ["r" if c.endswith(":") else "l" for c in cells(lines[1])]
    return {"header": cells(lines[0]), "align": align, "rows": [cells(ln) for ln in lines[2:]]}


def components(recipe: dict[str, Any]) -> list[dict[str, Any]]:
    """Each recipe slot with its component and the parameters the recipe sets."""
    out = []
    kinds = [k for k in SLOTS if k in recipe] + [k for k, v in recipe.items() if k not in SLOTS and k not in
                                                 SECTIONS and isinstance(v, dict) and "name" in v]
    for kind in kinds:
        node = recipe.get(kind)
        if isinstance(node, dict):
            params = {k: v for k, v in node.items() if k != "name"}
            out.append({"kind": kind, "name": node.get("name", "?"),
                        "params": ", ".join(f"{k}={json.dumps(v, default=str)}" for k, v in params.items())})
        elif node:
            out.append({"kind": kind, "name": str(node), "params": ""})
    return out


def stages(run: RunData) -> list[dict[str, Any]]:
    """Finished stages in the order they finished, with their time where the stage records one."""
    done = (read_json(run.path / L.STATE, {"done": {}}) or {"done": {}}).get("done", {})
    out = []
    for stage, result in done.items():
        result = result if isinstance(result, dict) else {}
        facts = {k: v for k, v in result.items() if k != "seconds" and not isinstance(v, (dict, list))}
        out.append({"stage": stage, "seconds": result.get("seconds"),
                    "facts": ", ".join(f"{k}={v}" for k, v in list(facts.items())[:8])})
    return out


def cost_rows(run: RunData) -> list[list[Any]]:
    """Per evaluated model: what making it cost (the sweep's rule, :func:`sand_framework.sweep.aggregate.run_cost`)."""
    from sand_framework.sweep.aggregate import run_cost

    metrics = read_json(run.path / L.METRICS, {}) or {}
    rows = []
    for model in run.models:
        c = run_cost(run.path, metrics, model)
        rows.append([run.label, model, f"{c['data_env_steps']:.0f}", f"{c['data_generated_tokens']:.0f}",
                     f"{c['data_prompt_tokens']:.0f}", f"{c['data_seconds']:.1f}", f"{c['train_seconds']:.1f}"])
    return rows


def overview(site: SiteData) -> dict[str, Any]:
    runs = site.runs
    ov: dict[str, Any] = {"kind": site.kind, "title": site.title, "path": str(site.source),
                          "runs": [], "tables": [], "sweep": None, "eval_spec": []}
    if runs:
        ov["tables"].append(("Runs", "", parse_markdown_table(tables.components_table(runs))))
    for run in runs if len(runs) <= 3 else []:
        ov["runs"].append({"label": run.label, "components": components(run.recipe), "stages": stages(run),
                           "recipe": yaml.safe_dump(run.recipe, sort_keys=False) if run.recipe else ""})
    if site.kind == "eval":
        spec = read_json(site.source / L.EVAL_SPEC, {}) or {}
        for label, what in (spec.items() if isinstance(spec, dict) else []):
            what = what if isinstance(what, dict) else {"value": what}
            ov["eval_spec"].append({"label": label, "facts": [(k, json.dumps(v, default=str) if isinstance(
                v, (dict, list)) else str(v)) for k, v in what.items()]})
    if any(r.evals for r in runs):
        ov["tables"] += [
            ("Results", "Average reward ×100 (n = tasks) and success rate per split.",
             parse_markdown_table(tables.results_table(runs))),
            ("Deliberation", "", parse_markdown_table(tables.deliberation_table(runs))),
            ("Tokens per task", "Mean tokens per task; ratios are to the same run's SFT agent on the same split.",
             parse_markdown_table(tables.tokens_table(runs))),
            ("Difficulty bands", tables.band_reference_note(runs), parse_markdown_table(tables.bands_table(runs))),
        ]
        header = ["run", "model", "env steps (training data)", "generated tokens (training data)",
                  "prompt tokens (training data)", "data building s", "training s"]
        rows = [row for r in runs for row in cost_rows(r)]
        if rows:
            ov["tables"].append(("Cost of each model", "What building the training data of the iterations a model's "
                                 "weights come from cost, and its training stages (the SFT start included).",
                                 {"header": header, "align": ["l", "l"] + ["r"] * 5, "rows": rows}))
    if any(r.synthesis for r in runs):
        ov["tables"].append(("Synthesis", "Per iteration: expert steps examined by the detector, steps deliberated, "
                             "distinct candidates per deliberated step, rollouts executed, synthesizer fallbacks.",
                             parse_markdown_table(tables.synthesis_table(runs))))
    if site.kind == "sweep":
        ov["sweep"] = sweep_overview(site.source)
    return ov


def sweep_overview(path: Path) -> dict[str, Any]:
    """The arms x seeds table and the paired comparisons, from ``results.json`` (``sand sweep`` writes it)."""
    data = read_json(path / "results.json", None)
    if not isinstance(data, dict):
        return {"missing_results": True, "splits": [], "comparisons": [], "missing": []}
    seeds = sorted({s for r in data.get("rows", []) for s in r.get("seeds", [])})
    splits = []
    for split in data.get("splits", []):
        rows = []
        for r in (r for r in data.get("rows", []) if r.get("split") == split):
            st = r.get("stats", {})
            success = st.get("success_rate", {})
            per_seed = dict(zip(success.get("seeds", []), success.get("values", [])))
            rows.append([r.get("label"), r.get("arm"), r.get("model")]
                        + [_num(per_seed.get(s)) for s in seeds]
                        + [_mean_std(success), _mean_std(st.get("avg_reward", {})),
                           _mean_std(st.get("deliberation_rate_step", {}), 3),
                           f"[{r['success_ci95'][0] * 100:.0f}, {r['success_ci95'][1] * 100:.0f}]"
                           if r.get("success_ci95") else "–"])
        header = ["row", "arm", "model"] + [f"success % seed {s}" for s in seeds] + [
            "success % (mean ± std)", "avg reward", "delib. rate / step", "95% interval"]
        splits.append({"split": split, "table": {"header": header, "align": ["l"] * 3 + ["r"] * (len(header) - 3),
                                                  "rows": rows}})
    comparisons = [{"question": c.get("question"), "split": c.get("split"), "a": c.get("a_label") or c.get("a"),
                    "b": c.get("b_label") or c.get("b"), "verdict": c.get("verdict"),
                    "counts": f"{c.get('games_a_better', 0)} / {c.get('games_b_better', 0)} / {c.get('games_tied', 0)}",
                    "sign_p": _num(c.get("sign_p"), 3), "mcnemar_p": _num(c.get("mcnemar_p"), 3)}
                   for c in data.get("comparisons", [])]
    return {"missing_results": False, "name": data.get("name"), "splits": splits, "comparisons": comparisons,
            "missing": data.get("missing", []), "figure": data.get("figure")}


def _num(v: Any, digits: int = 1) -> str:
    return "–" if v is None else f"{float(v):.{digits}g}" if digits > 2 else f"{float(v):.{digits}f}"


def _mean_std(stat: dict[str, Any], digits: int = 1) -> str:
    if not stat or stat.get("mean") is None:
        return "–"
    std = f" ± {stat['std']:.{digits}f}" if stat.get("std") is not None else ""
    return f"{stat['mean']:.{digits}f}{std}"


# -- synthesis --------------------------------------------------------------------------------------------------


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
        found = [d for d in (run.path / L.weights(k) / "final", run.path / L.weights(k - 1) / "final")
                 if has_tokenizer(d)]
        if not found:
            self.error = (f"No tokenizer found beside the weights ({L.weights(k)}/final or {L.weights(k - 1)}/final), "
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
        done = (read_json(run.path / L.STATE, {"done": {}}) or {"done": {}}).get("done", {})
        n_samples = (run.recipe.get("sampler") or {}).get("n")
        for k in L.iterations_in(run.path):
            method = (done.get(L.synth_stage(k)) or {}).get("method") or run.component("method")
            method = method if method not in ("-", "?") else BY_NAME["method"].default  # the slot's default
            log_path = run.path / L.synthesis_units(k)
            if log_path.is_file():
                shapes = unit_shapes() if shapes is None else shapes
                shape = shapes.get(method, "generic")
                sid = f"s{len(sources)}"
                log = UnitLog(log_path)
                if log.corrupt:
                    site.notes.append(f"{run.label} iter{k}: {len(log.corrupt)} unreadable line(s) in "
                                      f"{L.synthesis_units(k)} left out (lines {log.corrupt[:5]})")
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
                                "samples": n_samples, "path": L.synthesis_units(k), "items": items})
            pairs_path = run.path / L.preference_pairs(k)
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
                site.notes.append(f"{run.label} iter{k}: line {lineno} of {L.preference_pairs(k)} is not JSON")
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
            "path": L.preference_pairs(k), "per_chunk": PAIRS_PER_CHUNK, "items": items}


# -- evaluation -------------------------------------------------------------------------------------------------


def collect_eval(site: SiteData) -> dict[str, Any]:
    """Every evaluated episode, grouped by (split, task): each task one item whose chunk holds every series'
    episode (a series: one model of one run), so they can be read side by side."""
    series = []
    for run in site.runs:
        for model in sorted(run.evals, key=model_order):
            label = f"{run.label}: {model}" if len(site.runs) > 1 else model
            series.append({"id": len(series), "run": run.label, "model": model, "label": label})
    keys: dict[tuple[str, str], dict[int, Any]] = {}
    bands: dict[tuple[str, str], str] = {}
    j = 0
    for run in site.runs:
        for model in sorted(run.evals, key=model_order):
            for split, results in run.evals[model].items():
                for res in results:
                    key = (split, res.trajectory.task_id)
                    keys.setdefault(key, {})[j] = res
                    if key in run.bands:
                        bands.setdefault(key, run.bands[key])
            j += 1
    tasks = []
    for i, key in enumerate(sorted(keys, key=lambda k: (split_order(k[0]), k[1]))):
        split, task_id = key
        per = keys[key]
        summary, episodes = [], {}
        for s in series:
            res = per.get(s["id"])
            if res is None:
                summary.append(None)
                continue
            t = res.trajectory
            summary.append([t.reward, int(t.success), len(t.steps), sum(st.deliberated for st in t.steps)])
            episodes[str(s["id"])] = {**t.to_dict(), "prompt_tokens": res.prompt_tokens,
                                      "completion_tokens": res.completion_tokens}
        site.chunks[f"e/{i}"] = {"split": split, "task_id": task_id, "band": bands.get(key), "episodes": episodes}
        tasks.append([i, split, task_id, bands.get(key), summary])
    return {"series": series, "splits": sorted({k[0] for k in keys}, key=split_order), "tasks": tasks}
