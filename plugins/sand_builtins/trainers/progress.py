"""Callbacks every training stage adds: its optimizer steps on a rich progress bar, as every other SAND stage
shows its work, and a stop signal answered with a checkpoint at the end of the step in progress."""

from __future__ import annotations

import os


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
            if logs and "loss" in logs:
                self.progress.update(self.task, loss=f"loss {logs['loss']:.3f}")

        def on_train_end(self, args, state, control, **kwargs):
            self.progress.stop()

    return _RichProgress


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

    return _SaveAndStop


def SaveAndStop(request):  # noqa: N802 - a class factory; transformers is imported lazily
    return _save_and_stop_callback()(request)
