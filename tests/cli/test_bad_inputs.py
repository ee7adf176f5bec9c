"""Every bad input of the catalogue (tests/bad_inputs.py) gives its exit code and message, never a traceback."""

from __future__ import annotations

import pytest

from bad_inputs import CASES, Unsupported


@pytest.mark.parametrize("case", CASES, ids=[c.what[:60] for c in CASES])
def test_bad_input_is_reported_clearly(case, tmp_path):
    try:
        proc = case.run(tmp_path)
    except Unsupported as exc:
        pytest.skip(str(exc))
    err = proc.stderr
    assert "Traceback" not in err, err[-3000:]
    assert proc.returncode == case.exit_code, f"exit {proc.returncode}, expected {case.exit_code}:\n{err[-3000:]}"
    for phrase in case.expect:
        assert phrase in err, f"{phrase!r} not in:\n{err[-3000:]}"
    for phrase in case.forbid:
        assert phrase not in err + proc.stdout, f"{phrase!r} was shown"
    if case.check is not None:
        problem = case.check(tmp_path)
        assert problem is None, problem


def test_the_doc_holds_every_case_and_the_faults_table():
    """docs/bad-inputs.md is written by scripts/bad_inputs_doc.py: a case added without regenerating it, or the doc's
    faults table edited by hand (where the next regeneration would silently undo the edit), fails here."""
    import importlib.util
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    doc = (repo / "docs/bad-inputs.md").read_text()
    headings = [line[3:] for line in doc.splitlines() if line.startswith("## ")]
    spec = importlib.util.spec_from_file_location("bad_inputs_doc", repo / "scripts/bad_inputs_doc.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert headings[:-1] == [c.what for c in CASES], "regenerate: .venv/bin/python scripts/bad_inputs_doc.py"
    assert doc.startswith(script.HEADER) and doc.endswith(script.FOOTER), \
        "edit HEADER/FOOTER in scripts/bad_inputs_doc.py, then regenerate the doc"
