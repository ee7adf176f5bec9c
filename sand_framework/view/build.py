"""What ``sand view`` shows, collected from a run directory, a ``sand eval`` folder or a sweep folder.

Everything comes from the durable artifacts ``sand report`` reads (:mod:`sand_framework.report.data` loads the
runs and their evaluations; the report's tables and the sweep's cost rule are reused as they are), plus the
per-step detail only the viewer needs: every unit of ``iterK/synthesis.units.jsonl`` (SAND's deliberation
records, or whatever another method stored) and ``iterK/pairs.jsonl`` (:mod:`sand_framework.view.units`), and every
evaluated episode (:mod:`sand_framework.view.episodes`). This module tells what a folder is and writes the overview.

The result is split in two: :attr:`SiteData.overview` (rendered into ``index.html`` by Jinja2) and
:attr:`SiteData.index` plus :attr:`SiteData.chunks` (written as JS data files; the index is loaded with the page,
each chunk only when its trajectory, task or group of pairs is opened). Unknown unit shapes are kept whole and
shown as a tree, never dropped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from sand_framework.components.declared import SLOTS
from sand_framework.config.schema import SECTIONS
from sand_framework.errors import RunDirError
from sand_framework.report import tables
from sand_framework.report.data import RunData, load_runs
from sand_framework.store import RunLayout, read_json
from sand_framework.view.episodes import collect_eval
from sand_framework.view.site_data import SiteData
from sand_framework.view.units import collect_synthesis


# -- what a folder is -----------------------------------------------------------------------------------------


def sweep_runs(path: Path) -> list[Path]:
    """The run directories of a sweep output folder (``OUT/<arm>/seed<k>``)."""
    return sorted(p for p in path.glob("*/seed*") if p.is_dir() and (p / RunLayout.RECIPE).is_file())


def kind_of(path: Path) -> str:
    if (path / RunLayout.RECIPE).is_file():
        return "run"
    if (path / RunLayout.EVAL_SPEC).is_file() or ((path / RunLayout.EVAL).is_dir()
                                                  and (path / RunLayout.METRICS).is_file()):
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
    done = (read_json(run.path / RunLayout.STATE, {"done": {}}) or {"done": {}}).get("done", {})
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

    metrics = read_json(run.path / RunLayout.METRICS, {}) or {}
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
        spec = read_json(site.source / RunLayout.EVAL_SPEC, {}) or {}
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
    if any(r.engine for r in runs):
        ov["tables"].append(("Engine time", tables.ENGINE_TIME_NOTE,
                             parse_markdown_table(tables.engine_time_table(runs))))
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
