"""The synthesis pass under the engine's name, as the docs and the plugin test kit cite it
(``sand_framework.engine.synthesis.decide_step``). Its code is in :mod:`sand_framework.synthesis`, one layer down,
so that the built-in ``sand`` method plugin can import it without importing the engine."""

from sand_framework.synthesis import (  # noqa: F401 - re-exported
    Components,
    RolloutCache,
    SynthesisOutput,
    candidates_for,
    decide_step,
    detector_input,
    switch_expert,
    synthesize_batch,
)
