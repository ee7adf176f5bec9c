"""The SAND loop as resumable stages over a run directory.

Stages and their units (a unit is recorded durably when it finishes, and
never recomputed on ``--resume``):

==================  ======================================  ====================
stage               what                                    unit
==================  ======================================  ====================
``expert``          expert trajectories (env gold / file)   one task
``train/iter0``     behavior-initialization SFT             the stage (trainer
                                                            checkpoints inside)
``synth/iterK``     the recipe's method builds the          one input
                    iteration's data (SAND: sample,         trajectory
                    detect, roll out, critique,
                    synthesize; baselines: explore, pair)
``train/iterK``     SFT on the method's trajectories, or    the stage
                    preference training on its pairs
``eval``            greedy evaluation per model and split   one task
==================  ======================================  ====================
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from sand_framework.components import (TRAINER_SLOT, IterationData, Method, MethodTools, PreferenceTrainRequest,
                                       TrainRequest)
from sand_framework.components.declared import method_component
from sand_framework.components.environment import unknown_task_ids
from sand_framework.engine.context import RunContext
from sand_framework.engine.expert import expert_trajectory
from sand_framework.engine.evaluation import evaluate_tasks
from sand_framework.engine.units import StageUnits
from sand_framework.errors import ComponentError, EmptyStageError, RecipeError
from sand_framework.store import RunLayout
from sand_framework.formats import read_messages, read_sharegpt, write_messages, write_sharegpt
from sand_framework.pairs import write_preference_pairs
from sand_framework.engine.stage_cost import batch_cost, rollout_metrics
from sand_framework.metrics import engine_time
from sand_framework.rollout.metered import MeteredPolicy
from sand_framework.types import Trajectory
from sand_framework.unit_saved import listening

T = TypeVar("T")


def unit_seed(*parts: object) -> int:
    """A seed derived from the run seed and a unit's identity, stable across resumes and batchings."""
    return int(hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:8], 16)


def training_seed(run_seed: int, iteration: int) -> int:
    """The seed of training stage ``train/iterK``: the run's seed for behavior initialization (``K = 0``, so the
    SFT start every arm of a seed adopts is the one trained so far), and one derived from the run's seed and the
    stage for every later iteration. ``run.seed + K`` made iteration 1 of seed ``s`` train with seed ``s + 1``,
    the SFT start's seed of the next seed: a step-matched control retrained on the same data replayed that start
    game for game, and its comparisons across seeds were not independent."""
    return run_seed if iteration == 0 else unit_seed(run_seed, "train", iteration) % (2 ** 31)


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    for i in range(0, len(items), max(1, size)):
        yield items[i:i + size]


class Pipeline:
    def __init__(self, ctx: RunContext, before_stage: Callable[[str], None] | None = None):
        self.ctx = ctx
        self.recipe = ctx.recipe
        self.rd = ctx.run_dir
        self.iteration = 0
        """The SAND iteration being computed (0: expert and behavior initialization), told to observers."""
        self.stage: str | None = None
        """The stage the run is in (computing it, or reading it back on a resume); None before the first."""
        self.before_stage = before_stage
        """Called with a stage's name before the stage computes anything (the runner records its fingerprint)."""

    # -- helpers ---------------------------------------------------------------

    def progress(self) -> Progress:
        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        TextColumn("eta"), TimeRemainingColumn(), console=self.ctx.console,
                        disable=os.environ.get("SAND_NO_PROGRESS") == "1")

    def _stage_end(self, stage: str, summary: dict[str, Any]) -> None:
        """Record ``stage`` as done, never on empty input: a stage marked done is never redone by a resume."""
        if isinstance(summary, dict) and summary.get("trajectories") == 0:
            raise EmptyStageError(f"{stage}: it would finish with 0 trajectories, so it is not recorded as done; "
                                  f"fix its input and continue with `sand run --resume {self.rd.path}`")
        self.rd.mark_done(stage, summary)
        self._notify("sand_stage_end", stage=stage, summary=summary)

    def _enter(self, stage: str, computing: bool) -> None:
        """The run is now in ``stage``; ``computing``: it is not finished, so it is about to compute."""
        self.stage = stage
        if computing and self.before_stage is not None:
            self.before_stage(stage)

    def _notify(self, hook_name: str, **kwargs: Any) -> None:
        self.ctx.notify(hook_name, self.iteration, **kwargs)

    def _unit_saved(self, unit: str) -> None:
        self._notify("sand_unit_saved", stage=self.stage, unit=unit)

    def _units(self, stage: str, log: str, ids: list[str]) -> StageUnits:
        """Stage ``stage``'s units ``ids``, kept in the run's unit log ``log`` (a path in the run directory)."""
        return StageUnits.open(stage, self.rd.units(log), ids, f"sand run --resume {self.rd.path}", self.ctx.console,
                               finished=self.rd.stage_done(stage))

    @property
    def env(self):
        return self.ctx.component("environment")


    # -- stages ------------------------------------------------------------------

    def expert(self) -> list[Trajectory]:
        """Expert trajectories, one unit per task; a missing or damaged unit is redone, even after the stage."""
        data = self.recipe.data
        self._enter(RunLayout.EXPERT, not self.rd.stage_done(RunLayout.EXPERT))
        task_ids = ["expert"] if data.source != "env" else self.env.tasks(data.split)[: data.limit]
        units = self._units(RunLayout.EXPERT, RunLayout.EXPERT_UNITS, task_ids)
        redone = False
        if data.source != "env":
            if units.todo or not units.log.get("expert"):  # an empty record (older runs) is re-read too
                redone = True
                if not data.path or not Path(data.path).is_file():
                    raise RecipeError([f"data.path: expert file {data.path!r} not found; make one with "
                                       f"`sand data import-eto FILE --env {self.env.name} -o OUT` or "
                                       f"`sand data expert --env {self.env.name} --split train -o OUT`, or use "
                                       "data.source=env"])
                reader = read_sharegpt if data.source == "sharegpt" else read_messages
                trajs = reader(data.path, self.env.name)[: data.limit]
                if not trajs:
                    raise EmptyStageError(self._no_expert_data(0))
                problems = unknown_task_ids(self.env, [t.task_id for t in trajs])
                if problems:
                    raise RecipeError([f"data.path: {data.path!r}: {p}" for p in problems])
                units.save("expert", [t.to_dict() for t in trajs])
            trajs = [Trajectory.from_dict(d) for d in units.values()[0]]
        else:
            todo = units.todo
            redone = bool(todo)
            with units.progress(self.progress(), "expert trajectories"):
                for task_id in todo:
                    units.save(task_id, self.expert_trajectory(task_id).to_dict())
            trajs = [Trajectory.from_dict(d) for d in units.values()]
        kept = [t for t in trajs if t.success or data.source != "env"]
        if not kept:
            raise EmptyStageError(self._no_expert_data(len(trajs)))
        if redone or not self.rd.stage_done(RunLayout.EXPERT):
            write_sharegpt(self.rd.file(RunLayout.EXPERT_DATA), kept)
            self._stage_end(RunLayout.EXPERT, {"trajectories": len(trajs), "successful": len(kept)})
        return kept

    def _no_expert_data(self, tried: int) -> str:
        data, env = self.recipe.data, self.env.name
        if data.source != "env":
            return (f"expert: data.path {data.path!r} holds no trajectories, so there is nothing to train on; point "
                    f"data.path at a non-empty {data.source} file (`sand data import-eto` / `sand data expert`)")
        if tried == 0:
            return f"expert: split {data.split!r} of {env} has no tasks; choose another data.split"
        return (f"expert: the environment's expert reached the goal on none of the {tried} tasks of split "
                f"{data.split!r}, so there is nothing to train on. Check it with `sand env check {env} --split "
                f"{data.split} --limit 5` (a step cap below the expert's path length, e.g. environment.max_steps, is "
                f"the usual cause), fix the recipe and start a new run")

    def expert_trajectory(self, task_id: str) -> Trajectory:
        return expert_trajectory(self.env, task_id)

    def train(self, iteration: int, trajs: list[Trajectory], init: str | None,
              data: IterationData | None = None, weights: dict[str, str | None] | None = None) -> str:
        """Train stage ``iteration`` on ``trajs`` (SFT) or, when the method produced them, on ``data.pairs``
        with the slot that consumes them (:data:`~sand_framework.components.TRAINER_SLOT`)."""
        stage = RunLayout.train_stage(iteration)
        self._enter(stage, not self.rd.stage_done(stage))
        if self.rd.stage_done(stage):
            return self.rd.stage_result(stage)["weights"]
        summary = self._fit(iteration, trajs, init, data, weights)
        self._stage_end(stage, summary)
        return summary["weights"]

    def _fit(self, iteration: int, trajs: list[Trajectory], init: str | None, data: IterationData | None,
             weights: dict[str, str | None] | None) -> dict[str, Any]:
        """Train stage ``iteration``'s weights into its folder; its summary (weights, seconds, inputs)."""
        stage = RunLayout.train_stage(iteration)
        epochs = self.recipe.run.epochs
        n_epochs = epochs[min(iteration, len(epochs) - 1)]
        pairs = data.pairs if data is not None else []
        slot = TRAINER_SLOT["preference" if iteration and self._method().produces == "preference" else "sft"]
        reference = None
        if slot != TRAINER_SLOT["sft"]:
            if not pairs:
                raise EmptyStageError(f"{stage}: the method {self._method().name!r} made no preference pairs, so "
                                      "there is nothing to train on; see its stage summary in state.json")
            ref = data.reference if data is not None else "init"
            reference = init if ref == "init" else (weights or {}).get(ref)
        what = f"{len(pairs)} preference pairs" if slot != TRAINER_SLOT["sft"] else f"{len(trajs)} trajectories"
        self.ctx.console.print(f"[bold]{stage}[/]: {what}, {n_epochs} epoch(s) ({slot})")
        self.ctx.release_policy()  # no inference engine stays resident while the trainer runs
        t0 = time.time()
        where = dict(base_model=self.ctx.base_model(), init_weights=init,
                     output_dir=str(self.rd.folder(RunLayout.weights(iteration))), epochs=n_epochs,
                     seed=training_seed(self.recipe.run.seed, iteration), iteration=iteration)
        request = (TrainRequest(trajectories=trajs, **where) if slot == TRAINER_SLOT["sft"] else
                   PreferenceTrainRequest(pairs=list(pairs), reference_weights=reference, **where))
        out = self.ctx.component(slot).train(request)
        summary: dict[str, Any] = {"weights": out, "seconds": round(time.time() - t0, 1)}
        summary.update({"pairs": len(pairs)} if slot != TRAINER_SLOT["sft"] else {"trajectories": len(trajs)})
        return summary

    def missing_weights(self) -> list[str]:
        """The finished training stages whose weights folder is not there (a run exported without weights)."""
        return [s for s in (RunLayout.train_stage(k) for k in range(self.recipe.run.iterations + 1))
                if self.rd.weights_missing(s)]

    def rebuild_weights(self) -> list[str]:
        """Train the SFT start (``train/iter0``) of a run again where an export left its weights out
        (``sand run --resume RUN --rebuild-weights``), so that arms reusing it can run on a new machine. Every
        result is kept: the stages after it were computed from the original weights, which the export's digest
        still names (the rebuilt ones are the same tensors on the same machine, and may differ in floating-point
        rounding on another); for a run not finished, the export's record is dropped, since what it computes next
        comes from the rebuild. Later iterations' weights stay missing: no arm reuses them, and they are trained on
        the data their iteration built (``--redo-from train/iterK`` computes them again, and what follows).
        Returns the stages rebuilt."""
        stage = RunLayout.train_stage(0)
        if stage not in self.missing_weights():
            return []
        recorded = self.rd.stage_result(stage)
        expert = self.expert()
        self._enter(stage, True)
        summary = self._fit(0, expert, None, None, None)
        self.rd.mark_done(stage, {**recorded, "weights": summary["weights"],
                                  "rebuilt": {"seconds": summary["seconds"]}})
        if not self.rd.stage_done(RunLayout.EVAL):  # a run that goes on: what it computes next comes from the rebuild
            self.rd.forget_exported_weights([stage])
        self._notify("sand_stage_end", stage=stage, summary=self.rd.stage_result(stage))
        return [stage]

    def _method(self) -> Method:
        return self.ctx.component("method")

    def build(self, iteration: int, trajs: list[Trajectory], weights: dict[str, str | None]) -> IterationData:
        """Stage ``synth/iterK``: the recipe's method builds the iteration's data, one unit per trajectory.

        ``weights`` holds ``agent`` (the weights being improved), ``sft`` and ``base``; each unit is stored as
        its batch finishes, so a resume redoes only the trajectories without an intact record."""
        stage = RunLayout.synth_stage(iteration)
        self._enter(stage, not self.rd.stage_done(stage))
        if not trajs:
            raise EmptyStageError(f"{stage}: no trajectories to build from (the previous stage produced none)")
        method = self._method()
        trajs = method.inputs(trajs, self.env.tasks(self.recipe.data.split), self.expert_trajectory)
        units = self._units(stage, RunLayout.synthesis_units(iteration), [t.task_id for t in trajs])
        missing = set(units.todo)
        done = self.rd.stage_done(stage)
        if missing:
            policy = self.ctx.policy()
            policy.set_agent_weights(weights["agent"])
            metered = MeteredPolicy(policy)  # engine time per role, whatever the backend, however the method asks
            allowed = method_component(method, self.ctx.component)
            tools = MethodTools(env=self.env, policy=metered, iteration=iteration, weights=dict(weights),
                                component=lambda slot: metered if slot == "policy" else allowed(slot))
            executor = self.ctx.component("executor") if "executor" in self.recipe.slots else None
            batches = []
            for batch in chunks(trajs, self.recipe.run.synthesis_batch):
                todo = [t for t in batch if t.task_id in missing and t.task_id not in units]
                if todo:
                    batches.append((todo, unit_seed(self.recipe.run.seed, iteration, batch[0].task_id)))

            def stats() -> tuple[dict[str, Any], dict[str, Any], dict[str, float]]:
                return dict(policy.stats), dict(executor.stats) if executor else {}, metered.busy_seconds()

            before, t0 = stats(), time.time()
            with units.progress(self.progress(), f"{method.name} iter {iteration}"), contextlib.closing(
                    method.build_stream(batches, tools, self.recipe.run.batches_in_flight)) as streamed:
                for k, built in enumerate(streamed):
                    todo = batches[k][0] if k < len(batches) else []
                    if not built or len(built) != len(todo):
                        raise ComponentError(f"{stage}: method {method.name!r} returned {len(built)} unit(s) for "
                                             f"{len(todo)} trajectory(ies); Method.build must return one per "
                                             "trajectory, in order, and build_stream one such list per batch "
                                             f"(batch {k + 1} of {len(batches)}; fix the method, then `sand run "
                                             f"--resume {self.rd.path}`)")
                    # A streamed batch's cost is the window since the previous batch came out: with batches in
                    # flight the windows overlap other batches' work, but their sum is the stage's.
                    after = stats()
                    built[0].setdefault("stats", {}).update(batch_cost(before, after, time.time() - t0))
                    before, t0 = after, time.time()
                    for traj, unit in zip(todo, built):
                        for rec in method.deliberations(unit):
                            self._notify("sand_step_deliberated", record=rec)
                        units.save(traj.task_id, unit)
        built = units.values()  # refused while a trajectory has no record: the stage is never done without one
        data = method.assemble(built, trajs)
        if missing or not done:
            if data.trajectories:
                write_sharegpt(self.rd.file(RunLayout.deliberation_sharegpt(iteration)), data.trajectories)
                write_messages(self.rd.file(RunLayout.deliberation_messages(iteration)), data.trajectories)
            if data.pairs:
                write_preference_pairs(self.rd.file(RunLayout.preference_pairs(iteration)), data.pairs)
            summary = {"method": method.name, **method.summarize(built)}
            if data.pairs:
                summary["pairs"] = len(data.pairs)
            summary["engine_time"] = engine_time(built)
            self._stage_end(stage, summary)
            self.ctx.console.print(f"[bold]{stage}[/]: {summary}")
        return data

    def evaluate(self, weights: dict[str, str | None]) -> dict[str, Any]:
        ev = self.recipe.eval
        self._enter(RunLayout.EVAL, not self.rd.stage_done(RunLayout.EVAL))
        evaluator = self.ctx.component("evaluator")
        results: dict[str, Any] = {}
        for model in ev.models:
            if model not in weights:
                raise RecipeError([f"eval.models: {model!r} is not one of {sorted(weights)}"])
            results[model] = {}
            for split in ev.splits:
                units = self._units(RunLayout.EVAL, RunLayout.eval_units(model, split),
                                    self.env.tasks(split)[: ev.limit])
                task_results = evaluate_tasks(
                    units, evaluator, self.env, lambda m=model: self._agent(weights[m]), ev.batch_size,
                    self.progress(), f"eval {model}/{split}")
                results[model][split] = evaluator.aggregate(task_results)
        if not self.rd.stage_done(RunLayout.EVAL):
            self._stage_end(RunLayout.EVAL, {"models": list(ev.models), "splits": list(ev.splits)})
        return results

    def _agent(self, weights: str | None):
        policy = self.ctx.policy()
        policy.set_agent_weights(weights)
        return policy

    # -- the loop ------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        with listening(self._unit_saved):
            return self._run()

    def _run(self) -> dict[str, Any]:
        ctx, run = self.ctx, self.recipe.run
        self._notify("sand_run_start")
        ctx.base_model()  # a model that cannot load fails now, not after the expert stage
        expert = self.expert()
        weights: dict[str, str | None] = {"base": None}
        weights["iter0"] = weights["sft"] = self.train(0, expert, init=None)
        data = expert
        for k in range(1, run.iterations + 1):
            self.iteration = k
            built = self.build(k, data, {"agent": weights[f"iter{k - 1}"], "sft": weights["sft"], "base": None})
            init = weights[f"iter{k - 1}"] if run.train_from == "previous" else None
            already = self.rd.stage_done(RunLayout.train_stage(k))
            weights[f"iter{k}"] = self.train(k, built.trajectories, init=init, data=built, weights=weights)
            if not already:
                self._notify("sand_iteration_end", iteration=k, summary=self.rd.stage_result(RunLayout.synth_stage(k)))
            data = built.next_expert
        weights["final"] = weights[f"iter{run.iterations}"]
        metrics = {
            "run": str(self.rd.path),
            "recipe": run.name,
            "eval": self.evaluate(weights),
            "synthesis": {f"iter{k}": self.rd.stage_result(RunLayout.synth_stage(k))
                          for k in range(1, run.iterations + 1)},
            "weights": weights,
            "backend": ctx.components["policy"].stats if "policy" in ctx.components else {},
        }
        metrics["rollouts"] = rollout_metrics(
            {f"synth/iter{k}": self.rd.units(RunLayout.synthesis_units(k)).values()
             for k in range(1, run.iterations + 1)},
            ctx.components["evaluator"].rollout_stats if "evaluator" in ctx.components else None)
        metrics["wall_seconds_this_session"] = round(time.time() - ctx.started, 1)
        self.rd.write_json(RunLayout.METRICS, metrics)
        self._notify("sand_run_end", metrics=metrics)
        return metrics
