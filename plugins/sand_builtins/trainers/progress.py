"""Callbacks every training stage adds: its optimizer steps on a rich progress bar, as every other SAND stage
shows its work, a stop signal answered with a checkpoint at the end of the step in progress, and each checkpoint
told to the run's observers (``sand_unit_saved``)."""

from __future__ import annotations

import logging
import os

from sand_framework.unit_saved import unit_saved

_log = logging.getLogger(__name__)


def _rich_progress_callback():
    from transformers import TrainerCallback

    class _RichProgress(TrainerCallback):
        """Optimizer steps with loss and ETA on a rich progress bar (TRL's own tqdm is off)."""

        def __init__(self, label: str):
            self.label, self.progress, self.task = label, None, None

        def on_train_begin(self, args, state, control, **kwargs):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("{task.fields[loss]}"), TextColumn("eta"), TimeRemainingColumn(),
                                     disable=os.environ.get("SAND_NO_PROGRESS") == "1")
            self.progress.start()
            self.task = self.progress.add_task(self.label, total=state.max_steps, completed=state.global_step, loss="")

        def on_step_end(self, args, state, control, **kwargs):
            self.progress.update(self.task, completed=state.global_step)

        def on_log(self, args, state, control, logs=None, **kwargs):
            """TRL's metrics of the step as one record (``run.log``): its own printer, which writes the dict on
            the console, is removed (:func:`quiet`)."""
            if logs and "loss" in logs:
                self.progress.update(self.task, loss=f"loss {logs['loss']:.3f}")
            if logs:
                _log.info("%s step %d/%d: %s", self.label, state.global_step, state.max_steps,
                          ", ".join(f"{k} {_short(v)}" for k, v in logs.items()))

        def on_train_end(self, args, state, control, **kwargs):
            self.progress.stop()

    return _RichProgress


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def quiet(trainer) -> None:
    """Take transformers' console printer off ``trainer`` (with ``disable_tqdm`` it prints every log dict to
    stdout): the rich bar shows the loss, and :class:`RichProgress` logs the metrics to ``run.log``."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def RichProgress(label: str):  # noqa: N802 - a class factory; transformers is imported lazily
    return _rich_progress_callback()(label)


def _save_and_stop_callback():
    from transformers import TrainerCallback

    class _SaveAndStop(TrainerCallback):
        """At the end of the optimizer step during which a stop came: save a checkpoint (the one ``save_steps``
        writes, so a resume continues from this step) and end the loop; the stage's
        :func:`~sand_framework.stopping.stop_at_safe_point` then raises the stop."""

        def __init__(self, request):
            self.request = request

        def on_step_end(self, args, state, control, **kwargs):
            if self.request.signum is not None:
                control.should_save = True
                control.should_training_stop = True

        def on_save(self, args, state, control, **kwargs):
            """The checkpoint of step ``global_step`` is on disk: observers hear of it (``sand_unit_saved``)."""
            unit_saved(f"checkpoint-{state.global_step}")

    return _SaveAndStop


def SaveAndStop(request):  # noqa: N802 - a class factory; transformers is imported lazily
    return _save_and_stop_callback()(request)
