"""docs/results.md's Table 1 section states the numbers the repository's commands compute from the exported runs.

The section's tables were pasted from `sand sweep experiments/table1-cpu.yaml -o docs/results/table1-cpu
--table-only` / `--compare` and `experiments/twc_outcomes.py`; a table edited by hand, or left behind when a later
export added runs, would state results no command gives. So the export's results.md and results.json must be what
the code writes from the exported runs today, and every table of the section must appear, row for row, in what
those commands print, and every paired result its prose quotes must be one they computed.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import expert_vs_rollouts  # noqa: E402
import twc_outcomes  # noqa: E402

SWEEP = ROOT / "experiments" / "table1-cpu.yaml"
EXPORT = ROOT / "docs" / "results" / "table1-cpu"
SECTION = "## Table 1 on CPU (issue 22)"


def _tables(text: str) -> list[str]:
    """Every markdown table of ``text``, as its lines joined."""
    tables, lines = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            lines.append(line)
        elif lines:
            tables.append("\n".join(lines))
            lines = []
    return tables


def _section(heading: str = SECTION) -> str:
    doc = (ROOT / "docs" / "results.md").read_text()
    start = doc.index(heading)
    end = doc.find("\n## ", start + 1)  # the section runs to the next second-level heading
    return doc[start:end if end >= 0 else len(doc)]


def test_the_export_is_what_the_code_writes_from_its_runs(tmp_path):
    from sand_framework.sweep import load_sweep, write_results

    out = tmp_path / "table1-cpu"
    shutil.copytree(EXPORT, out, ignore=shutil.ignore_patterns("*.png"))
    write_results(load_sweep(SWEEP), out)
    assert (out / "results.md").read_text() == (EXPORT / "results.md").read_text()
    assert json.loads((out / "results.json").read_text()) == json.loads((EXPORT / "results.json").read_text())


def test_every_table_of_the_section_is_one_the_commands_print():
    generated = (EXPORT / "results.md").read_text() + "\n\n" + twc_outcomes.table(str(SWEEP), "unseen", str(EXPORT))
    tables = _tables(_section())
    assert len(tables) == 4  # solved per seed, the paired tests' summary, how episodes end, cost
    for table in tables:
        assert table in generated, f"docs/results.md states a table no command prints:\n{table}"


def test_every_paired_result_the_prose_quotes_is_a_computed_one():
    """The verdict and the text quote comparisons as "(A / B, adjusted p = P)": games better / worse and the
    corrected p of a question, rounded as written."""
    import re

    computed = json.loads((EXPORT / "results.json").read_text())["comparisons"]
    quoted = re.findall(r"\((\d+)(?: games better,| /) (\d+)(?: worse)?[;,] adjusted p = ([\d.]+)\)",
                        " ".join(line.removeprefix(">").strip() for line in _section().splitlines()))
    assert len(quoted) >= 4  # the verdict's
    for a, b, p in quoted:
        digits = len(p.split(".")[1])
        assert any((c["games_a_better"], c["games_b_better"]) == (int(a), int(b))
                   and round(c["adjusted_p"], digits) == float(p) for c in computed), \
            f"docs/results.md quotes ({a} / {b}, adjusted p = {p}), which no comparison of the export computed"


# -- v2 (issue 36) ----------------------------------------------------------------------------------------------

SWEEP_V2 = ROOT / "experiments" / "table1-cpu-v2.yaml"
EXPORT_V2 = ROOT / "docs" / "results" / "table1-cpu-v2"
SECTION_V2 = "## Table 1 on CPU, v2 (issue 36)"


def test_the_v2_export_is_what_the_code_writes_from_its_runs(tmp_path):
    from sand_framework.sweep import load_sweep, write_results

    out = tmp_path / "table1-cpu-v2"
    shutil.copytree(EXPORT_V2, out, ignore=shutil.ignore_patterns("*.png"))
    write_results(load_sweep(SWEEP_V2), out)
    assert (out / "results.md").read_text() == (EXPORT_V2 / "results.md").read_text()


def test_every_table_of_the_v2_section_is_one_the_export_prints():
    """The v2 section's tables are pasted from the export's results.md (`sand sweep ... --table-only` and
    `--compare` print the same) and from `experiments/expert_vs_rollouts.py`, so a seed added to the export without
    pasting again fails here."""
    generated = ((EXPORT_V2 / "results.md").read_text() + "\n\n"
                 + expert_vs_rollouts.table(str(SWEEP_V2), str(EXPORT_V2)))
    tables = _tables(_section(SECTION_V2))
    assert len(tables) >= 3  # games solved per seed, the paired tests' summary, the expert's rollout ranked
    for table in tables:
        assert table in generated, f"docs/results.md's v2 section states a table the export does not print:\n{table}"
