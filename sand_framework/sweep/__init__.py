"""Experiments as sweeps: arms (recipes) × seeds, with shared SFT starts and a mean ± std table."""

from sand_framework.sweep.aggregate import collect, write_results
from sand_framework.sweep.runner import RunOutcome, run_sweep
from sand_framework.sweep.spec import ArmSpec, SweepSpec, describe, load_sweep

__all__ = ["ArmSpec", "RunOutcome", "SweepSpec", "collect", "describe", "load_sweep", "run_sweep", "write_results"]
