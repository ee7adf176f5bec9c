"""``sand report``: tables and figures from one or more run directories, side by side."""

from __future__ import annotations

from pathlib import Path

import click

from sand_framework.cli.common import friendly


@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder for report.md and the PNGs (default: FIRST_RUN/report).")
@click.option("--bands-from", metavar="PATH[:MODEL]",
              help="Difficulty bands from this run/`sand eval` folder's MODEL (default: its base, else sft) "
                   "for every run, instead of each run's own base (else SFT) rewards.")
@friendly
def command(run_dirs, out_dir, bands_from):
    """Write report.md + figures for RUN_DIRS (runs or `sand eval` folders; several compare side by side)."""
    from sand_framework.report import build_report

    path = build_report(list(run_dirs), out_dir or Path(run_dirs[0]) / "report", bands_from)
    click.echo(f"report: {path}")
