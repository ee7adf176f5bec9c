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
