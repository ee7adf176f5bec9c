"""Stage fingerprints: what each stage of a run was computed from, checked before a resume or a reuse.

A stage's output depends on three things, and its fingerprint records each when the stage starts:

``recipe``
    the resolved recipe sections it reads (:func:`stage_inputs`, the one definition that stage reuse
    between runs uses too): of the synthesis slots only ``environment``, ``policy`` and the ones the method
    declares in ``Method.uses``, and never a setting marked speed only
    (:class:`~sand_framework.config.paramdoc.SpeedOnly`: thread counts, logging, checkpoint cadence,
    time-outs, worker counts), so editing one neither blocks a resume nor stops a reuse;
``inputs``
    digests of the files it reads: the expert data file named by ``data.path``, a local base-model folder, the
    files the components of its slots declare (:meth:`~sand_framework.components.base.Component.input_files`:
    ``method.path``, the ``pairs_file`` method's pair file), and the outputs of the stages before it that it
    consumes (``expert/expert.sharegpt.json``, the iteration's deliberation or pair files, the weights of the
    earlier training stages it loads: :func:`weights_read`);
``plugins``
    the versions of the plugins whose components fill the slots it reads (a plugin loaded from a folder or
    module has no version: the digest of its code stands in).

``sand run --resume`` compares every finished (or started) stage's fingerprint with the one the run would
compute now and refuses, naming the stage and the difference, when they differ: an edited ``recipe.yaml``, an
edited data file or an upgraded plugin would otherwise mix two experiments in one run.
``--redo-from STAGE`` discards that stage and the ones after it. A stage recorded by an older SAND has no
fingerprint: it is "unknown", said once, and recorded from then on. A fingerprint SAND 0.2.0 recorded (format
``"v": 1``, which held every setting) is compared on what the current format records (:func:`comparable`),
said once, and rewritten in the current format.

How a resume checks them is :mod:`sand_framework.app.resume_check`; how files are digested,
:mod:`sand_framework.app.digests`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from sand_framework.app.digests import MISSING, file_digest, tree_digest
from sand_framework.components.declared import SYNTHESIS_SLOTS, method_slots
from sand_framework.config import Recipe
from sand_framework.config.paramdoc import result_settings
from sand_framework.plugins import PluginSet
from sand_framework.registry import Registries
from sand_framework.store import RunDir, RunLayout

VERSION = 2
"""Version of the fingerprint record (``"v"``). 1 (SAND 0.2.0) recorded every setting of every section and slot a
stage reads; 2 leaves out the settings marked speed-only and the synthesis slots the method does not use. A
version-1 record is read through :func:`comparable` (the settings 2 no longer records are set aside)."""

def _plain(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists), so a recorded fingerprint compares equal."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def stage_inputs(recipe: Recipe, stage: str) -> dict[str, Any]:
    """The resolved recipe settings a stage's output depends on.

    A stage depends on everything before it: iteration K's synthesis samples from iteration K-1's weights,
    so reusing it requires the same SFT start, the same earlier iterations and the same synthesis slots:
    ``environment``, ``policy`` and the ones the recipe's method declares in ``Method.uses``
    (:func:`~sand_framework.components.declared.method_slots`; all of them for a method that declares none).
    ``run.train_from`` first matters for iteration 1's training: an arm that retrains from the base model
    can still adopt iteration 1's synthesis. ``eval`` (never reused, but fingerprinted for ``--resume``) depends
    on the last training stage's settings, the ``eval`` section and the evaluator. Settings marked
    :class:`~sand_framework.config.paramdoc.SpeedOnly` (thread counts, logging, checkpoint cadence, time-outs,
    worker counts ...) are left out: they cannot change what a stage computes."""
    return _stage_inputs(recipe, stage, VERSION)


def _stage_inputs(recipe: Recipe, stage: str, version: int) -> dict[str, Any]:
    """:func:`stage_inputs` as fingerprint format ``version`` defined it: 1 took every field of every section
    and slot and every synthesis slot; 2 leaves out the :class:`SpeedOnly` settings and the synthesis slots the
    method does not use (used only to read a version-1 record, :func:`comparable`)."""
    settings = result_settings if version >= 2 else dataclasses.asdict
    if stage == RunLayout.EVAL:
        last = _stage_inputs(recipe, RunLayout.train_stage(recipe.run.iterations), version)
        name, params = recipe.slots["evaluator"]
        return {**last, "eval": settings(recipe.eval), "evaluator": {"name": name, **settings(params)}}
    parsed = RunLayout.parse_stage(stage)
    if parsed is None:
        raise ValueError(f"not a stage name: {stage!r}")
    kind, k = parsed
    def slot(name: str) -> dict[str, Any]:
        if name not in recipe.slots:  # a slot the method does not use, left out of the run: {} (version 1's reading)
            return {}
        return {"name": recipe.slots[name][0], **settings(recipe.slots[name][1])}

    inputs: dict[str, Any] = {"environment": slot("environment"), "data": settings(recipe.data)}
    if kind == "expert":
        return inputs
    run = recipe.run
    trained = k + 1 if kind == "train" else k  # training stages 0..trained-1 came before this stage's output
    inputs.update(model=settings(recipe.model), trainer=slot("trainer"), seed=run.seed,
                  epochs=[run.epochs[min(i, len(run.epochs) - 1)] for i in range(trained)])
    if kind == "synth" or k >= 1:
        used = method_slots(recipe.classes.get("method")) if version >= 2 else SYNTHESIS_SLOTS
        inputs.update({s: slot(s) for s in used}, run={"synthesis_batch": run.synthesis_batch})
        inputs["method"] = slot("method")
        if kind == "train":  # a preference method's iterations train with this slot
            inputs["preference_trainer"] = slot("preference_trainer")
        if trained >= 2:  # train_from decides where iteration 1's training starts, so nothing before it
            inputs["run"]["train_from"] = run.train_from
    return inputs


def recipe_inputs(recipe: Recipe, stage: str) -> dict[str, Any]:
    return _plain(stage_inputs(recipe, stage))


def _iteration_outputs(rd: RunDir, k: int) -> dict[str, str]:
    """Digests of the training data iteration ``k``'s synthesis wrote (trajectories and/or pairs)."""
    out = {}
    for rel in (RunLayout.deliberation_sharegpt(k), RunLayout.preference_pairs(k)):
        if (rd.path / rel).is_file():
            out[rel] = file_digest(rd.path / rel)
    return out


def _weights(rd: RunDir, k: int, memo: dict[str, str]) -> dict[str, str]:
    """The digest of training stage ``k``'s weights (the folder its result names)."""
    result = rd.stage_result(RunLayout.train_stage(k))
    path = result.get("weights") if isinstance(result, dict) else None
    if not path:
        return {RunLayout.weights(k): MISSING}
    if path not in memo:
        memo[path] = tree_digest(path)
    return {RunLayout.weights(k): memo[path]}


def declared_files(recipe: Recipe, stage: str) -> dict[str, str]:
    """``SLOT.PARAM`` -> path of every file that the components of the slots ``stage`` reads declare in
    :meth:`~sand_framework.components.base.Component.input_files` (``method.path``: a pair file)."""
    out = {}
    for slot in stage_inputs(recipe, stage):
        cls = recipe.classes.get(slot)
        if slot not in recipe.slots or cls is None:
            continue
        for param, path in (cls.input_files(recipe.slots[slot][1]) or {}).items():
            out[f"{slot}.{param}"] = str(path)
    return out


def stage_artifacts(recipe: Recipe, rd: RunDir, stage: str, memo: dict[str, str] | None = None) -> dict[str, str]:
    """Digests of the files ``stage`` reads: the data file, the base model and the files its components declare
    (:func:`declared_files`) from outside the run, and the outputs of the earlier stages it consumes (each of
    those has its own fingerprint, so the chain covers the rest)."""
    memo = {} if memo is None else memo
    parsed = RunLayout.parse_stage(stage)
    if parsed is None:
        raise ValueError(f"not a stage name: {stage!r}")
    kind, k = parsed
    out: dict[str, str] = {}
    for key, path in declared_files(recipe, stage).items():
        if path not in memo:
            memo[path] = tree_digest(path)
        out[key] = memo[path]
    if kind == RunLayout.EXPERT:
        if recipe.data.source != "env":
            out["data.path"] = file_digest(recipe.data.path) if recipe.data.path else MISSING
        return out
    base = recipe.model.base
    if base and Path(base).is_dir():
        if base not in memo:
            memo[base] = tree_digest(base)
        out["model.base"] = memo[base]
    if kind == "train" and k == 0 or kind == "synth":
        out[RunLayout.EXPERT_DATA] = file_digest(rd.path / RunLayout.EXPERT_DATA)
    if kind == "synth" and k > 1:
        out.update(_iteration_outputs(rd, k - 1))
    if kind == "train" and k >= 1:
        out.update(_iteration_outputs(rd, k))
    for j in weights_read(recipe, stage):
        out.update(_weights(rd, j, memo))
    return out


def weights_read(recipe: Recipe, stage: str) -> list[int]:
    """The training stages whose weights ``stage`` reads (0 is the SFT start), the one answer that its fingerprint,
    a resume of a run exported without weights and ``sand sweep --status`` use.

    A synthesis stage samples from the previous iteration's agent and may read the SFT start (IPR's Monte Carlo
    rollouts); a preference training starts from, or is anchored to, either. An SFT training reads the previous
    iteration's weights only when it continues them (``run.train_from: previous``): retrained from the base model,
    it reads its iteration's data alone, whose digest carries what came before. The evaluation reads the weights
    of the models it evaluates (``eval.models``; ``base`` none)."""
    parsed = RunLayout.parse_stage(stage)
    if parsed is None:
        raise ValueError(f"not a stage name: {stage!r}")
    kind, k = parsed
    n = recipe.run.iterations
    if kind == RunLayout.EVAL:
        index = {"sft": 0, "final": n, **{f"iter{j}": j for j in range(n + 1)}}
        return sorted({index[m] for m in recipe.eval.models if m in index})
    if k == 0 or kind == RunLayout.EXPERT:
        return []
    method = recipe.classes.get("method")
    if kind == "train" and recipe.run.train_from == "base" and getattr(method, "produces", "sft") == "sft":
        return []
    return sorted({k - 1, 0})


def _plugin_version(plugins: PluginSet, plugin: str) -> str:
    info = plugins.info.get(plugin)
    if info is None:
        return "not loaded"
    if info.source != "module":
        return info.version
    origin = Path(plugins.origins.get(plugin) or "")
    if origin.name == "__init__.py":  # a package: all of its code
        h = hashlib.sha256()
        for p in sorted(origin.parent.rglob("*.py")):
            h.update(f"{p.relative_to(origin.parent).as_posix()}\0{file_digest(p)}\n".encode())
        return "local code tree:" + h.hexdigest()[:16]
    return "local code " + file_digest(origin)[:23] if origin.is_file() else info.version


def stage_plugins(recipe: Recipe, registries: Registries, plugins: PluginSet, inputs: dict[str, Any]
                  ) -> dict[str, str]:
    """Plugin -> version, for the plugins registering the components of the slots ``inputs`` names."""
    out = {}
    for slot in inputs:
        if slot not in recipe.slots:
            continue
        entry = registries[slot].entries.get(recipe.slots[slot][0])
        if entry is not None:
            out[entry.plugin] = _plugin_version(plugins, entry.plugin)
    return dict(sorted(out.items()))


def fingerprint(recipe: Recipe, rd: RunDir, registries: Registries, plugins: PluginSet, stage: str,
                memo: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``stage`` of the run at ``rd`` is computed from, now."""
    inputs = recipe_inputs(recipe, stage)
    return {"v": VERSION, "recipe": inputs, "inputs": stage_artifacts(recipe, rd, stage, memo),
            "plugins": stage_plugins(recipe, registries, plugins, inputs)}


# -- comparing ---------------------------------------------------------------------------------------------------


def _removed(full: Any, kept: Any, where: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The key paths of mapping ``full`` that mapping ``kept`` lacks (where both hold a mapping, looked into)."""
    if not (isinstance(full, dict) and isinstance(kept, dict)):
        return []
    return [p for k in full for p in ([(*where, k)] if k not in kept else _removed(full[k], kept[k], (*where, k)))]


def _without(mapping: dict[str, Any], paths: list[tuple[str, ...]]) -> dict[str, Any]:
    """A copy of ``mapping`` without the values at ``paths`` (paths it does not hold are ignored)."""
    out = json.loads(json.dumps(mapping))
    for path in paths:
        node = out
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(path[-1], None)
    return out


def comparable(then: dict[str, Any], recipe: Recipe, stage: str, now: dict[str, Any]) -> dict[str, Any] | None:
    """A recorded fingerprint ``then`` as the current format records it, to compare with ``now`` (the stage's
    fingerprint for ``recipe`` now): a version-1 record without what version 2 no longer records (the speed-only
    settings and the synthesis slots the method does not use, worked out from ``recipe`` as version 1 would have
    recorded it) and with only the plugins ``now`` names; a record of version :data:`VERSION` as recorded, less
    the settings marked speed only since it was recorded (``executor.max_parallel``: a copy without them, which
    the caller records in their place); either without the weights the stage does not read
    (:func:`_without_unread_weights`); None for a format this SAND cannot read."""
    version = then.get("v")
    if version not in (1, VERSION) or not isinstance(then.get("recipe"), dict):
        return None
    then = _without_unread_weights(then, now)
    dropped = _removed(_plain(_stage_inputs(recipe, stage, 1)), now.get("recipe", {}))
    if version == VERSION:
        kept = _without(then["recipe"], dropped)
        return then if kept == then["recipe"] else {**then, "recipe": kept}
    plugins = {p: v for p, v in (then.get("plugins") or {}).items() if p in now.get("plugins", {})}
    return {**then, "v": VERSION, "recipe": _without(then["recipe"], dropped), "plugins": plugins}


def _without_unread_weights(then: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """``then`` without the weights digests of stages that the stage, as :func:`weights_read` says now, does not read
    (SAND 0.3.0 recorded the SFT start's and the previous iteration's weights for every stage after training, an
    SFT training retrained from the base model included): they cannot have changed its output."""
    inputs = then.get("inputs")
    if not isinstance(inputs, dict):
        return then
    unread = [key for key in inputs if key.startswith(RunLayout.WEIGHTS + "/") and key not in now.get("inputs", {})]
    return {**then, "inputs": {k: v for k, v in inputs.items() if k not in unread}} if unread else then


def differences(now: Any, then: Any, where: str = "", labels: tuple[str, str] = ("then", "now")) -> list[str]:
    """``key: THEN_VALUE then, NOW_VALUE now`` for every leaf where two nested mappings differ."""
    if isinstance(now, dict) and isinstance(then, dict):
        return [d for k in sorted(set(now) | set(then), key=str)
                for d in differences(now.get(k), then.get(k), f"{where}.{k}".lstrip("."), labels)]
    return [] if now == then else [f"{where}: {then!r} {labels[0]}, {now!r} {labels[1]}"]


def _short(digest: str | None) -> str:
    if digest is None:
        return "not read"
    return digest if digest == MISSING else digest.split(":")[0] + " " + digest.split(":")[-1][:12]


def _setting(recipe: Any, key: str) -> str | None:
    """The recipe setting ``key`` names (``data.path``, ``method.path``) when it is a path; None otherwise."""
    for part in key.split("."):
        recipe = recipe.get(part) if isinstance(recipe, dict) else None
    return recipe if isinstance(recipe, str) and recipe else None


def changes(then: dict[str, Any], now: dict[str, Any], labels: tuple[str, str] = ("then", "now")) -> list[str]:
    """What differs between a recorded fingerprint and a current one, one readable phrase each (a file named
    by a recipe setting, such as ``data.path`` or ``method.path``, with its path)."""
    out = differences(now.get("recipe", {}), then.get("recipe", {}), labels=labels)
    a_in, b_in = then.get("inputs", {}), now.get("inputs", {})
    for key in sorted(set(a_in) | set(b_in)):
        a, b = a_in.get(key), b_in.get(key)
        if a != b:
            files = MISSING not in (a, b) and None not in (a, b)
            what = "the file's content changed" if files and a.startswith("sha256:") and b.startswith("sha256:") \
                else "its files changed" if files else "not the same"
            path = _setting(now.get("recipe", {}), key)
            out.append(f"{key}: {what} ({_short(a)} {labels[0]}, {_short(b)} {labels[1]})"
                       + (f" in {path}" if path else ""))
    return out + version_changes(then, now, labels)


def version_changes(then: dict[str, Any], now: dict[str, Any], labels: tuple[str, str] = ("then", "now")
                    ) -> list[str]:
    """The plugins whose version (or local code) differs between two fingerprints, one phrase each."""
    out = []
    a_pl, b_pl = then.get("plugins", {}), now.get("plugins", {})
    for plugin in sorted(set(a_pl) | set(b_pl)):
        a, b = a_pl.get(plugin, "not used"), b_pl.get(plugin, "not used")
        if a != b:
            out.append(f"plugin {plugin}: version {a} {labels[0]}, {b} {labels[1]}")
    return out
