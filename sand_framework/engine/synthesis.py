"""The synthesis pass, where the engine's readers have always found it (it lives in :mod:`sand_framework.synthesis`,
one layer down, so that the built-in ``sand`` method plugin can import it)."""

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
