"""Experiments as sweeps: arms (recipes) × seeds, with shared SFT starts, a mean ± std table and paired tests."""

from sand_framework.sweep.aggregate import collect, write_results
from sand_framework.sweep.compare import PairedResult, compare, comparisons_markdown
from sand_framework.sweep.runner import RunOutcome, run_sweep
from sand_framework.sweep.spec import ArmSpec, ComparisonSpec, SweepSpec, describe, load_sweep

__all__ = ["ArmSpec", "ComparisonSpec", "PairedResult", "RunOutcome", "SweepSpec", "collect", "compare",
           "comparisons_markdown", "describe", "load_sweep", "run_sweep", "write_results"]
