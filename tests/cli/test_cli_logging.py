"""Log records reach stderr at ``--log-level`` and the run directory's ``run.log``, plugins' included.

A real tiny run (the smoke recipe cut to one SFT stage) with a plugin whose
``sand_run_start`` hook logs at every level and calls ``warnings.warn``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sand_cli
from click.testing import CliRunner

from sand_framework.cli.main import main
from sand_framework.logs import LEVELS

SAND = sand_cli.SAND
TINY = ["smoke", "run.iterations=0", "data.limit=1", "trainer.max_steps=1", "eval.limit=1", "eval.splits=[unseen]",
        "eval.models=[sft]"]
PLUGIN = '''
import logging
import warnings

from sand_framework import hookimpl

log = logging.getLogger("chatty_plugin")


@hookimpl
def sand_run_start(run):
    log.debug("chatty: debug record")
    log.info("chatty: info record")
    log.warning("chatty: warning record")
    warnings.warn("chatty: warnings.warn call")
    logging.getLogger("transformers.modeling_utils").warning("chatty: a library's warning")


@hookimpl
def sand_stage_end(run, stage, summary):
    raise RuntimeError("chatty: observer broke")
'''


def sand(*args: str) -> subprocess.CompletedProcess:
    return sand_cli.sand(*args, timeout=900)


@pytest.fixture(scope="module")
def plugin_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plugins")
    (folder / "chatty.py").write_text(PLUGIN)
    return folder


def test_plugin_records_reach_stderr_and_run_log_and_resume_appends(plugin_dir, tmp_path):
    run = tmp_path / "run"
    first = sand("run", *TINY, "--run-dir", str(run), "--plugins-dir", str(plugin_dir))
    assert "warning: chatty: warning record" in first.stderr
    assert "chatty: warnings.warn call" in first.stderr
    assert "chatty: info record" not in first.stderr and "chatty: debug record" not in first.stderr
    log = (run / "run.log").read_text()
    assert "WARNING chatty_plugin: chatty: warning record" in log
    assert "chatty: warnings.warn call" in log
    assert "chatty: observer broke" in first.stderr and "chatty: observer broke" in log  # reported, run goes on
    assert "INFO chatty_plugin: chatty: info record" in log  # run.log keeps info at the default level
    assert "chatty: debug record" not in log
    # One voice: libraries' bars, TRL's metric dicts and library warnings stay off the console; run.log has them.
    assert "Loading weights" not in first.stderr + first.stdout and "{'loss'" not in first.stderr + first.stdout
    assert "Truncating train dataset" not in first.stderr
    assert "a library's warning" not in first.stderr and "WARNING transformers.modeling_utils: chatty: a library" in log
    assert "sand_builtins.trainers.progress: train iter0 step 1/1: loss" in log

    state = json.loads((run / "state.json").read_text())  # a stage computed by another version of its plugin
    plugin = next(iter(state["fingerprints"]["train/iter0"]["plugins"]))
    state["fingerprints"]["train/iter0"]["plugins"][plugin] = "0.0.1"
    (run / "state.json").write_text(json.dumps(state))
    again = sand("--log-level", "debug", "run", "--resume", str(run))
    assert again.stderr.count("plugins changed version since") == 1, again.stderr  # said once, not echoed
    assert "chatty: a library's warning" in again.stderr  # info or debug: the libraries speak too
    assert "debug: chatty: debug record" in again.stderr and "info: chatty: info record" in again.stderr
    log2 = (run / "run.log").read_text()
    assert log2.startswith(log), "a resume appends to run.log"
    assert log2.count("chatty: warning record") == 2 and "DEBUG chatty_plugin: chatty: debug record" in log2


@pytest.mark.parametrize("how", ["option", "env"])
def test_an_unknown_log_level_is_a_usage_error_naming_the_levels(how):
    args, env = (["--log-level", "loud", "plugins"], {}) if how == "option" else (["plugins"],
                                                                                  {"SAND_LOG_LEVEL": "loud"})
    res = CliRunner(env=env).invoke(main, args)
    assert res.exit_code == 2, res.output
    assert "'loud' is not one of" in res.output and all(f"'{level}'" in res.output for level in LEVELS)


def test_log_level_is_case_insensitive():
    assert CliRunner().invoke(main, ["--log-level", "WARNING", "plugins"]).exit_code == 0


def test_the_error_that_stops_a_run_is_in_its_run_log(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("\x01garbage")
    run = tmp_path / "run"
    proc = subprocess.run([*SAND, "run", "smoke", f"model.base={tmp_path / 'model'}", "--run-dir", str(run)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    log = (run / "run.log").read_text()
    assert "ERROR sand_framework.logs: the run stopped: ModelUnavailable" in log and "Traceback" in log


def test_sand_eval_keeps_a_run_log_in_its_output_folder(tmp_path):
    """``sand eval`` writes ``OUT/run.log`` as a run does, with the error that stopped it."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("\x01garbage")
    out = tmp_path / "eval"
    proc = subprocess.run([*SAND, "eval", str(tmp_path / "model"), "--recipe", "smoke", "--limit", "1",
                           "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    log = (out / "run.log").read_text()
    assert "ERROR sand_framework.logs: the run stopped: ModelUnavailable" in log and "Traceback" in log


def test_chatty_libraries_stay_out_of_run_log_unless_debugging():
    """py4j logs two info lines per JVM gateway (one per env worker) and httpx one per request: not at info."""
    import logging

    from sand_framework.logs import CHATTY_LIBRARIES, configure

    try:
        configure("warning")
        assert logging.getLogger("sand_framework.engine").isEnabledFor(logging.INFO)  # run.log keeps SAND's info
        assert not any(logging.getLogger(f"{n}.sub").isEnabledFor(logging.INFO) for n in CHATTY_LIBRARIES)
        assert logging.getLogger("py4j.java_gateway").isEnabledFor(logging.WARNING)
        configure("debug")
        assert all(logging.getLogger(f"{n}.sub").isEnabledFor(logging.DEBUG) for n in CHATTY_LIBRARIES)
    finally:
        configure()


DYING_POLICY = '''
import subprocess
import sys

from sand_framework import hookimpl
from sand_framework.logs import children_output_to_run_log
from sand_builtins.policies.transformers_backend import TransformersPolicy

MESSAGE = ("RuntimeError: Worker failed with error 'Unsupported CPU attention configuration: head_dim=16', "
           "please check the stack trace above for the root cause")
WORKER = f"import sys; print({MESSAGE!r}, file=sys.stderr)"


class EngineDeadError(RuntimeError):
    """Named as vLLM's: raised by its client once the engine process is gone."""


class DyingPolicy(TransformersPolicy):
    name = "dying_engine"
    description = "test policy whose engine dies at the first generation, as vLLM's does: its process prints why"

    def generate(self, chats, sampling, role="agent"):
        with children_output_to_run_log():  # as the vllm policy starts its engine
            subprocess.run([sys.executable, "-c", WORKER], check=True)
        raise EngineDeadError("EngineCore encountered an issue. See stack trace (above) for the root cause.")


@hookimpl
def sand_register_policies(register):
    register(DyingPolicy)
'''


@pytest.fixture
def dying_engine_plugins(tmp_path):
    """A plugin folder registering ``dying_engine``, a policy whose engine is gone at its first generation."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "dying.py").write_text(DYING_POLICY)
    return folder


def test_a_dead_inference_engine_is_a_resumable_exit_5_not_a_bug_report(tmp_path, dying_engine_plugins):
    """vLLM's worker OOM-killed mid-evaluation ended a sweep run with 'This is a bug in SAND'; it is exit 5 with
    the likely cause and the resume command, and run.log keeps the engine's own error. (The vLLM lane checks that
    a real engine whose process is killed raises an error this recognises: tests/vllm/test_policy_vllm.py.)"""
    run = tmp_path / "run"
    proc = subprocess.run([*SAND, "run", *TINY, "policy.name=dying_engine", "--run-dir", str(run),
                           "--plugins-dir", str(dying_engine_plugins)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 5 and "Traceback" not in proc.stderr and "bug in SAND" not in proc.stderr, \
        proc.stderr[-3000:]
    assert "inference engine stopped: its process died (EngineDeadError)" in proc.stderr
    flat = " ".join(proc.stderr.split())  # rich wraps long lines
    assert "Before it died it printed: Unsupported CPU attention configuration: head_dim=16" in flat, flat[-1500:]
    assert "Worker failed" not in flat, "the engine process's own output goes to run.log, not the console"
    assert "OOM" in proc.stderr and f"sand run --resume {run}" in flat
    assert "the run stopped: EngineDeadError" in (run / "run.log").read_text()
    assert "RuntimeError: Worker failed with error 'Unsupported CPU" in (run / "run.log").read_text()
    assert "train/iter0" in (run / "state.json").read_text(), "the SFT stage before it is kept"


def test_sand_eval_with_a_dead_engine_is_exit_5_with_the_command_that_continues_it(tmp_path,
                                                                                    dying_engine_plugins):
    """`sand eval` stopped by a dead engine said 'This is a bug in SAND' (only `sand run` translated it); it now
    gives the same exit 5 and cause, and the `sand eval` command that continues into the same folder."""
    out = tmp_path / "ev"
    proc = subprocess.run([*SAND, "eval", "tiny-random", "--recipe", "smoke", "policy.name=dying_engine",
                           "--split", "unseen", "--limit", "1", "-o", str(out),
                           "--plugins-dir", str(dying_engine_plugins)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 5 and "Traceback" not in proc.stderr and "bug in SAND" not in proc.stderr, \
        proc.stderr[-3000:]
    assert "inference engine stopped: its process died (EngineDeadError)" in proc.stderr
    flat = " ".join(proc.stderr.split())  # rich wraps long lines
    assert (f"sand eval tiny-random --recipe smoke --split unseen --limit 1 policy.name=dying_engine -o {out} "
            "--label tiny-random") in flat, flat[-1500:]
    assert "EngineDeadError" in (out / "run.log").read_text()


def test_vllm_records_of_every_process_go_to_run_log_not_the_console(tmp_path, capfd, monkeypatch):
    """vLLM sets its logger up itself (printing to stdout) in the run's process and in each engine process it
    starts; a run hands it a set-up file that appends to run.log instead, unless the console asked for info."""
    import logging
    import logging.config

    from sand_framework import logs

    monkeypatch.delenv(logs.VLLM_CONFIG_VAR, raising=False)
    logs.configure("warning")
    run_log = tmp_path / "run.log"
    with logs.run_log(run_log):
        made = Path(os.environ[logs.VLLM_CONFIG_VAR])
        logging.config.dictConfig(json.loads(made.read_text()))  # what vLLM does with it in each process
        logging.getLogger("vllm.v1.engine.core").info("engine core: 42 blocks")
    assert logs.VLLM_CONFIG_VAR not in os.environ and not made.exists()
    vllm = logging.getLogger("vllm")
    for h in list(vllm.handlers):
        vllm.removeHandler(h)
        h.close()
    out = capfd.readouterr()
    assert "INFO vllm.v1.engine.core: engine core: 42 blocks" in run_log.read_text()
    assert "42 blocks" not in out.out + out.err
    logs.configure("info")  # the libraries speak on the console at info: vLLM keeps its own set-up
    try:
        with logs.run_log(run_log):
            assert logs.VLLM_CONFIG_VAR not in os.environ
    finally:
        logs.configure("warning")


def test_processes_started_in_the_block_print_into_run_log_and_the_run_keeps_its_console(tmp_path):
    """An engine process prints outside logging (a C++ NUMA warning, a load bar, its worker's traceback) onto
    the descriptors it inherits: started inside `children_output_to_run_log`, what it prints lands in run.log,
    while the run's own prints stay on its stdout/stderr; outside a run's log, or at info, nothing moves."""
    script = f"""
import subprocess, sys
from sand_framework import logs
child = [sys.executable, "-c", "import os; os.write(1, b'child-out\\\\n'); os.write(2, b'child-err\\\\n')"]
logs.configure(sys.argv[1])
with logs.run_log({str(tmp_path / "run.log")!r}):
    with logs.children_output_to_run_log():
        print("run-out"); print("run-err", file=sys.stderr)
        subprocess.run(child, check=True)
    subprocess.run(child, check=True)
with logs.children_output_to_run_log():
    subprocess.run(child, check=True)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for level, moved in (("warning", True), ("info", False)):
        (tmp_path / "run.log").unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-c", script, level], capture_output=True, text=True, env=env,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        logged = (tmp_path / "run.log").read_text()
        assert "run-out" in proc.stdout and "run-err" in proc.stderr and "run-" not in logged
        assert proc.stdout.count("child-out") == (2 if moved else 3), (level, proc.stdout, logged)
        assert proc.stderr.count("child-err") == (2 if moved else 3), (level, proc.stderr, logged)
        assert logged.count("child-out") == logged.count("child-err") == (1 if moved else 0), (level, logged)


def test_the_engine_death_message_quotes_what_the_engine_printed_else_suspects_memory(tmp_path):
    from sand_framework.app.runner import engine_failure_cause, stopped_because

    class EngineDeadError(RuntimeError):
        pass

    dead = EngineDeadError("EngineCore encountered an issue. See stack trace (above) for the root cause.")
    plain = str(stopped_because(dead, tmp_path, "sand run --resume R"))
    assert "The usual cause is memory" in plain and "printed" not in plain
    (tmp_path / "run.log").write_text(
        "ERROR vllm.v1.engine.core: EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
        "RuntimeError: Unsupported CPU attention configuration: head_dim=16\n"
        "2026 ERROR sand_framework.logs: the run stopped: EngineDeadError: EngineCore encountered an issue.\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n")
    assert engine_failure_cause(tmp_path / "run.log") == \
        "RuntimeError: Unsupported CPU attention configuration: head_dim=16"
    quoted = str(stopped_because(dead, tmp_path, "sand run --resume R"))
    assert "Before it died it printed: RuntimeError: Unsupported CPU attention" in quoted
    assert "the next suspect is memory" in quoted and "sand run --resume R" in quoted
