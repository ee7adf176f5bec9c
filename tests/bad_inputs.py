"""The catalogue of bad inputs a user can give `sand`, each with the exit code and message it must produce.

One list feeds both ``tests/cli/test_bad_inputs.py`` (every case runs through the
real CLI: the exit code, the message, no traceback) and
``scripts/bad_inputs_doc.py``, which writes ``docs/bad-inputs.md`` from the
actual output, so the document cannot drift from what users see.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from run_control import PAUSE_PLUGIN  # the bad-input cases hold runs with it

SAND = [sys.executable, "-m", "sand_framework.cli.main"]

SMOKE_RUN_RECIPE = """\
extends: smoke
run: {name: bad}
"""


def _hold_lock(tmp: Path) -> Callable[[], None]:
    """A live process holding a run directory's lock (what a running `sand run` does)."""
    run = tmp / "locked"
    code = ("import time; from sand_framework.app.runner import create; "
            f"rd = create('smoke', run_dir={str(run)!r})[3]; rd.lock(); print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc.kill


def _no_alfworld_data(env: dict[str, str], tmp: Path) -> None:
    env["ALFWORLD_DATA"] = str(tmp / "nowhere")


class Unsupported(Exception):
    """This machine cannot stage the case (e.g. a read-only folder when running as root without mounts)."""


def _stored_run(tmp: Path, name: str = "run") -> Path:
    """A run directory as `sand run` leaves it before its first stage (recipe.yaml, no results yet)."""
    from sand_framework.app.runner import create

    create("smoke", run_dir=str(tmp / name))
    return tmp / name


def _damage(rel: str, content: str | bytes) -> Callable[[Path], Callable[[], None]]:
    def setup(tmp: Path) -> Callable[[], None]:
        target = _stored_run(tmp) / rel
        target.write_bytes(content) if isinstance(content, bytes) else target.write_text(content)
        return lambda: None
    return setup


def _read_only_run(tmp: Path) -> Callable[[], None]:
    """A run directory the user cannot write: chmod for a normal user; a read-only bind mount for root."""
    run = _stored_run(tmp)
    if os.geteuid() != 0:
        for p in [run, *run.rglob("*")]:
            p.chmod(p.stat().st_mode & ~0o222)
        return lambda: [p.chmod(p.stat().st_mode | 0o200) for p in [run, *run.rglob("*")]]
    ok = subprocess.run(["mount", "--bind", str(run), str(run)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,ro,bind", str(run)], capture_output=True).returncode == 0
    if not ok:
        subprocess.run(["umount", "-l", str(run)], capture_output=True)
        raise Unsupported("running as root and cannot mount a read-only folder here")
    return lambda: subprocess.run(["umount", "-l", str(run)], capture_output=True)


def _expert_stage_done(tmp: Path, overrides: list[str] = ()) -> Path:
    """A run directory whose expert stage finished (fingerprint recorded), as `sand run` leaves it."""
    from sand_framework.app.fingerprint import fingerprint
    from sand_framework.app.runner import create
    from sand_framework.engine.context import RunContext
    from sand_framework.engine.pipeline import Pipeline

    recipe, plugins, regs, rd = create("smoke", list(overrides), run_dir=str(tmp / "run"))
    ctx = RunContext(recipe=recipe, run_dir=rd, plugins=plugins, registries=regs)
    try:
        Pipeline(ctx, before_stage=lambda s: rd.record_fingerprint(s, fingerprint(recipe, rd, regs, plugins, s))
                 ).expert()
    finally:
        ctx.close()
    return rd.path


def _recipe_edited(tmp: Path) -> Callable[[], None]:
    run = _expert_stage_done(tmp)
    recipe = run / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("numLocations=4", "numLocations=6"))
    return lambda: None


def _data_file_edited(tmp: Path) -> Callable[[], None]:
    made = _expert_stage_done(tmp / "env")  # an expert file, as `sand data expert` writes one
    data = tmp / "expert.json"
    data.write_bytes((made / "expert" / "expert.sharegpt.json").read_bytes())
    _expert_stage_done(tmp, ["data.source=sharegpt", f"data.path={data}"])
    data.write_text(json.dumps(json.loads(data.read_text())[:1]))  # one trajectory fewer
    return lambda: None


def _held(tmp: Path) -> bool:
    """The run is held where a case's ``hold`` aims (the pause plugin wrote its marker)."""
    return (tmp / "held").is_file()


FOREIGN_IDS = json.dumps([
    {"id": task, "conversations": [{"from": "human", "value": "You are a helpful assistant in a science lab."},
                                   {"from": "gpt", "value": "OK"},
                                   {"from": "human", "value": "Your task is to boil water."},
                                   {"from": "gpt", "value": "Thought: I need a stove.\nAction: look around"}]}
    for task in ("0_12", "0_13")])


def _no_training(tmp: Path) -> str | None:
    state = tmp / "run" / "state.json"
    done = json.loads(state.read_text()).get("done", {}) if state.is_file() else {}
    return "a stage finished on a file the environment cannot replay" if done else None


def _nothing_ran(tmp: Path) -> str | None:
    return "the run went past its start" if (tmp / "run" / "expert").exists() else None


def _not_executed(tmp: Path) -> str | None:
    return "a recipe executed plugin code" if (tmp / "ran").exists() else None


def _expert_kept_training_not_done(tmp: Path) -> str | None:
    import json

    done = json.loads((tmp / "run" / "state.json").read_text()).get("done", {})
    if "expert" not in done:
        return "the expert stage computed before the refusal was lost"
    return "train/iter0 was recorded done on nothing" if "train/iter0" in done else None


def _secret(env: dict[str, str], tmp: Path) -> None:
    env["SECRET_TOKEN"] = "hunter2"


def _billion_laughs() -> str:
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 9):
        prev, cur = chr(96 + i), chr(97 + i)
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * 9)}]")
    return "\n".join(["extends: smoke", *lines]) + "\n"


def _doubling() -> str:
    lines = ["extends: smoke", "run: {name: x}", "d0: '0123456789'"]
    lines += [f"d{i}: '${{d{i - 1}}}${{d{i - 1}}}'" for i in range(1, 30)]
    return "\n".join(lines) + "\n"


def _extends_chain(n: int) -> dict[str, str]:
    return {f"r{i}.yaml": (f"extends: r{i + 1}.yaml\n" if i < n - 1 else "extends: smoke\n") for i in range(n)}


ETO_HEAD = ('{"from": "human", "value": "instr"}, {"from": "gpt", "value": "OK"}, '
            '{"from": "human", "value": "task"}, ')


@dataclass
class BadInput:
    what: str
    """What the user did wrong."""
    args: list[str]
    """`sand` arguments; ``{tmp}`` is the case's scratch folder."""
    exit_code: int
    expect: list[str]
    """Phrases the message must contain."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], Callable[[], None]] | None = None
    env: Callable[[dict[str, str], Path], None] | None = None
    check: Callable[[Path], str | None] | None = None
    """Inspects ``tmp`` afterwards; returns what went wrong (no work done that should not be, nothing executed)."""
    in_tmp: bool = False
    """Run the command with ``tmp`` as the working folder."""
    forbid: list[str] = field(default_factory=list)
    """Phrases the output must not contain (a secret's value)."""
    interrupt: tuple[Callable[[Path], bool], int] | None = None
    """(ready, signal): send the signal to the command once ``ready(tmp)`` holds (a stop during a stage)."""
    hold: str | None = None
    """``STAGE#N``: the test plugin (tests/data/pause_plugin) holds the run at the stage's N-th saved unit (a
    training stage's checkpoints: ``trainer.save_steps=1`` is added) and the interrupt comes while it is held,
    so it lands in that stage on a machine of any speed. Not shown in docs/bad-inputs.md: the user's command is
    ``args``."""

    def run(self, tmp: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        for rel, content in self.files.items():
            p = tmp / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(content) if isinstance(content, bytes) else p.write_text(content)
        env = os.environ.copy()
        if self.env:
            self.env(env, tmp)
        cleanup = self.setup(tmp) if self.setup else None
        try:
            args = [a.replace("{tmp}", str(tmp)) for a in self.args]
            if self.hold is not None:
                marker = tmp / "held"
                env.update(SAND_PAUSE_AT=self.hold, SAND_PAUSE_FILE=str(marker))
                args += ["trainer.save_steps=1", "--plugins-dir", str(PAUSE_PLUGIN)]
            if self.interrupt is None:
                return subprocess.run([*SAND, *args], capture_output=True, text=True, timeout=timeout, env=env,
                                      cwd=tmp if self.in_tmp else None)
            ready, signum = self.interrupt
            proc = subprocess.Popen([*SAND, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env=env, cwd=tmp if self.in_tmp else None)
            deadline = time.time() + timeout
            while not ready(tmp) and proc.poll() is None and time.time() < deadline:
                time.sleep(0.02)
            if proc.poll() is None:
                proc.send_signal(signum)
            out, err = proc.communicate(timeout=timeout)
            return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        finally:
            if cleanup:
                cleanup()
                time.sleep(0.1)


CASES: list[BadInput] = [
    BadInput("recipe file that does not exist", ["validate", "{tmp}/nope.yaml"], 2,
             ["not found", "bundled recipes"]),
    BadInput("bundled recipe name misspelled", ["validate", "quikstart"], 2, ["'quikstart' not found", "quickstart"]),
    BadInput("YAML syntax error", ["validate", "{tmp}/r.yaml"], 2, ["invalid YAML"],
             files={"r.yaml": "run: {name: x\nmodel: [\n"}),
    BadInput("YAML that tries to construct a Python object", ["validate", "{tmp}/r.yaml"], 2, ["invalid YAML"],
             files={"r.yaml": "extends: smoke\nrun: !!python/object/apply:os.system ['echo pwned']\n"}),
    BadInput("a key given twice in a recipe", ["validate", "{tmp}/r.yaml"], 2,
             ["'run' is given twice", "first on line 2, again on line 4"],
             files={"r.yaml": "extends: smoke\nrun: {name: a}\nseed: 1\nrun: {name: b}\n"}),
    BadInput("five mistakes in one recipe (typo'd section, unknown key, wrong type, unknown component, "
             "impossible value)", ["validate", "{tmp}/r.yaml"], 2,
             ["5 problem(s)", "did you mean", "sampler[self_consistency].n", "entropi", "epochs"],
             files={"r.yaml": "extends: smoke\nrnu: {seed: 1}\nmodel: {bsae: x}\nsampler: {n: five}\n"
                              "detector: {name: entropi}\nrun: {epochs: soon}\n"}),
    BadInput("override of a key that does not exist", ["validate", "smoke", "sampler.temprature=0.5"], 2,
             ["temprature", "temperature"]),
    BadInput("component swapped to a name no plugin registered", ["validate", "smoke", "critic=gpt4_judge"], 2,
             ["critic.name", "gpt4_judge", "rollout_critic"]),
    BadInput("evaluating weights the run will never produce", ["validate", "smoke", "eval.models=[sft,iter3]"], 2,
             ["eval.models", "iter3", "run.iterations=1"]),
    BadInput("a training context too short for any example", ["run", "smoke", "trainer.max_length=32",
                                                                "--run-dir", "{tmp}/run"], 2,
             ["none of the 3 trajectories has a trained token within max_length=32", "raise trainer.max_length"],
             forbid=["unexpected failure"], check=_expert_kept_training_not_done),
    BadInput("base model folder that does not exist", ["run", "smoke", "model.base=/models/missing",
                                                       "--run-dir", "{tmp}/run"], 4,
             ["/models/missing", "no such model folder"]),
    BadInput("hub model while offline and not cached", ["run", "smoke", "model.base=someone/some-model",
                                                       "--run-dir", "{tmp}/run"], 4,
             ["someone/some-model", "HF_HUB_OFFLINE=1", "huggingface-cli download"]),
    BadInput("expert data file missing", ["run", "smoke", "data.source=sharegpt", "data.path={tmp}/missing.json",
                                          "--run-dir", "{tmp}/run"], 2,
             ["missing.json", "sand data import-eto"]),
    BadInput("an expert file made for another environment (ScienceWorld task ids in a TextWorld-Express run)",
             ["run", "smoke", "data.source=sharegpt", "data.path={tmp}/sciworld.json", "--run-dir", "{tmp}/run"], 2,
             ["2 of the file's 2 task id(s) are not 'textworld_express' tasks", "'0_12'", "another environment",
              "sand data expert --env textworld_express"],
             files={"sciworld.json": FOREIGN_IDS}, forbid=["unexpected failure"], check=_no_training),
    BadInput("more TextWorld-Express tasks than its train fold has (`environment.n_train=100000`)",
             ["run", "smoke", "environment.n_train=100000", "--run-dir", "{tmp}/run"], 2,
             ["the tasks of split 'train'", "n_train + n_seen = 100050 exceeds", "lower environment.n_train"],
             forbid=["unexpected failure"], check=_no_training),
    BadInput("truncated ETO/ShareGPT file", ["data", "import-eto", "{tmp}/alfworld_sft.json", "--env",
                                            "textworld_express", "-o", "{tmp}/out.json"], 2,
             ["alfworld_sft.json"],
             files={"alfworld_sft.json": '[{"id": "x", "conversations": [{"from": "human", "value": "hi"'}),
    BadInput("binary junk as an ETO file", ["data", "import-eto", "{tmp}/junk.json", "--env", "textworld_express",
                                           "-o", "{tmp}/out.json"], 2, ["junk.json"],
             files={"junk.json": bytes(range(256)) * 4}),
    BadInput("resuming a folder that is not a run", ["run", "--resume", "{tmp}"], 3,
             ["not a SAND run directory"]),
    BadInput("overrides while resuming", ["run", "--resume", "{tmp}/locked", "seed=3"], 3,
             ["overrides cannot change a run being resumed"], setup=_hold_lock),
    BadInput("a second `sand run` on a run directory in use", ["run", "--resume", "{tmp}/locked"], 3,
             ["is in use by pid"], setup=_hold_lock),
    BadInput("a plugin folder whose module fails to import", ["plugins", "--plugins-dir", "{tmp}/plugins"], 2,
             ["broken", "ModuleNotFoundError"],
             files={"plugins/broken.py": "import not_a_real_package\n"}),
    BadInput("a plugin registering a component name that is taken", ["components", "--plugins-dir", "{tmp}/plugins"],
             2, ["set_size", "sand_builtins.detectors"],
             files={"plugins/dup.py": "from sand_framework import hookimpl\n"
                                      "from sand_builtins.detectors import SetSizeDetector\n"
                                      "@hookimpl\ndef sand_register_detectors(register):\n"
                                      "    register(SetSizeDetector)\n"}),
    BadInput("ALFWorld selected but its game data is absent", ["env", "check", "alfworld", "--limit", "1"], 4,
             ["ALFWORLD_DATA", "alfworld-download"], env=_no_alfworld_data),
    BadInput("WebShop selected but the upstream environment is not installed", ["env", "check", "webshop",
                                                                                "--limit", "1"], 4,
             ["web_agent_site", "WebShop"]),
    BadInput("sweep file with several mistakes", ["sweep", "{tmp}/s.yaml"], 2,
             ["seeds", "arms[0].recipe: required", "reuse"],
             files={"s.yaml": "name: x\nseeds: zero\narms:\n  - {name: a}\n  - {name: b, recipe: smoke, reuse: c}\n"}),

    # -- values that validated before and then failed mid-run, ran forever, or did nothing ------------------------
    BadInput("impossible values (negative iterations and limit, zero step cap and batch sizes, unknown split, "
             "negative temperature), all reported at once",
             ["validate", "smoke", "run.iterations=-1", "environment.max_steps=0", "eval.splits=[nosuch]",
              "data.limit=-5", "eval.batch_size=0", "run.synthesis_batch=0", "sampler.temperature=-0.5"], 2,
             ["7 problem(s)", "run.iterations: must be >= 0", "max_steps: must be >= 1", "has no split 'nosuch'",
              "data.limit: must be >= 1", "eval.batch_size: must be >= 1", "run.synthesis_batch: must be >= 1",
              "temperature: must be >= 0"]),
    BadInput("a sample count no experiment uses (`sampler.n=1000000000`)",
             ["validate", "smoke", "sampler.n=1000000000"], 2,
             ["sampler[self_consistency].n: must be <= 100, got 1000000000"]),
    BadInput("run.output_dir that is a file", ["validate", "smoke", "run.output_dir={tmp}/runs"], 2,
             ["run.output_dir:", "runs' is a file, not a folder", "choose a folder"], files={"runs": "not a folder\n"}),
    BadInput("NaN or infinite numbers", ["validate", "smoke", "run.epochs=[.nan]", "trainer.learning_rate=.inf"], 2,
             ["run.epochs[0]: expected a finite number", "learning_rate: expected a finite number"]),
    BadInput("a training data file that is not ShareGPT", ["validate", "smoke", "data.source=sharegpt",
                                                           "data.path={tmp}/data.json"], 2,
             ["data.path", "data.json", "conversations"], files={"data.json": '[{"id": "a"}]'}),
    # -- input that used to end in a traceback ----------------------------------------------------------------------
    BadInput("binary file as a recipe", ["validate", "{tmp}/r.yaml"], 2, ["r.yaml", "not a text file"],
             files={"r.yaml": bytes(range(256))}),
    BadInput("a list where a component slot's mapping belongs", ["validate", "{tmp}/r.yaml"], 2,
             ["sampler: expected a mapping with a `name`"], files={"r.yaml": "extends: smoke\nsampler: [a, b]\n"}),
    BadInput("a key that is not a name (a number, null)", ["validate", "{tmp}/r.yaml"], 2,
             ["1: keys must be names (strings)", "null: keys must be names"],
             files={"r.yaml": "extends: smoke\n1: x\nrun: {null: 3}\n"}),
    BadInput("an `extends:` chain 1,500 recipes deep", ["validate", "{tmp}/r0.yaml"], 2,
             ["chain deeper than 32", "flatten"], files=_extends_chain(1500)),
    BadInput("a damaged state.json in the run directory", ["run", "--resume", "{tmp}/run"], 3,
             ["state.json is unreadable", "restore it", "delete it and resume"], setup=_damage("state.json", "{\"do")),
    BadInput("an empty plugins.json in the run directory", ["run", "--resume", "{tmp}/run"], 3,
             ["plugins.json is unreadable (empty file)", "delete it and resume"], setup=_damage("plugins.json", "")),
    BadInput("an empty recipe.yaml in the run directory", ["run", "--resume", "{tmp}/run"], 3,
             ["recipe.yaml is damaged", "restore it from a copy"], setup=_damage("recipe.yaml", "")),
    BadInput("resuming a run directory you cannot write", ["run", "--resume", "{tmp}/run"], 3,
             ["read-only", "copy it"], setup=_read_only_run),
    BadInput("resuming a run after editing its recipe.yaml (numLocations=4 -> 6: other games than the finished "
             "stages were computed on)", ["run", "--resume", "{tmp}/run"], 3,
             ["since stage 'expert' was computed (finished)", "numLocations=6", "mix two experiments",
              "--redo-from expert`"], setup=_recipe_edited),
    BadInput("resuming a run after editing the data file its expert stage read (data.path)",
             ["run", "--resume", "{tmp}/run"], 3,
             ["since stage 'expert' was computed", "data.path: the file's content changed", "--redo-from expert"],
             setup=_data_file_edited),
    BadInput("--rebuild-weights on a new run (it retrains an exported run's SFT start)",
             ["run", "smoke", "--rebuild-weights", "--run-dir", "{tmp}/run"], 3,
             ["--rebuild-weights trains an exported run's SFT start again", "--resume RUN_DIR"], check=_nothing_ran),
    BadInput("--redo-from a stage the run does not have", ["run", "--resume", "{tmp}/run", "--redo-from",
                                                           "synth/iter3"], 3,
             ["--redo-from 'synth/iter3': not a stage of this run", "expert, train/iter0, synth/iter1"],
             setup=lambda tmp: (_stored_run(tmp), lambda: None)[1]),
    # -- stops --------------------------------------------------------------------------------------------------------
    BadInput("`kill -TERM` (a scheduler's stop, `timeout`) during the training stage",
             ["run", "smoke", "data.limit=1", "--run-dir", "{tmp}/run"], 143,
             ["stopped by SIGTERM during train/iter0", "every finished unit is kept", "sand run --resume"],
             interrupt=(_held, signal.SIGTERM), hold="train/iter0#1"),
    BadInput("Ctrl-C (SIGINT) during the training stage", ["run", "smoke", "data.limit=1", "--run-dir", "{tmp}/run"],
             130, ["stopped by SIGINT during train/iter0", "sand run --resume"],
             interrupt=(_held, signal.SIGINT), hold="train/iter0#1"),
    BadInput("a model folder whose config.json is garbage (stops before any stage)",
             ["run", "smoke", "model.base={tmp}/model", "--run-dir", "{tmp}/run"], 4,
             ["config.json is not readable JSON", "model.base"], files={"model/config.json": "\x01garbage"},
             check=_nothing_ran),
    BadInput("a plugin whose registration hook raises", ["components", "--plugins-dir", "{tmp}/plugins"], 2,
             ["plugin 'raiser' failed in its sand_register_detectors hook", "RuntimeError: boom",
              "SAND_PLUGINS_DENY=raiser"],
             files={"plugins/raiser.py": "from sand_framework import hookimpl\n@hookimpl\n"
                                         "def sand_register_detectors(register):\n    raise RuntimeError('boom')\n"}),
    BadInput("a plugin that calls sys.exit() when imported", ["validate", "smoke", "--plugins-dir", "{tmp}/plugins"],
             2, ["exiter.py", "it called sys.exit(3)"], files={"plugins/exiter.py": "import sys\nsys.exit(3)\n"}),
    BadInput("a plugin file with a relative import", ["plugins", "--plugins-dir", "{tmp}/plugins"], 2,
             ["rel.py", "use absolute imports", "__init__.py"], files={"plugins/rel.py": "from .helper import X\n"}),
    BadInput("a plugin with a misspelt hook name and a hook without @hookimpl (warnings; the rest works)",
             ["components", "detector", "--plugins-dir", "{tmp}/plugins"], 0,
             ["warning: plugin 'typo' implements 'sand_register_detector'", "did you mean 'sand_register_detectors'",
              "sand_register_samplers() without @hookimpl"],
             files={"plugins/typo.py": "from sand_framework import hookimpl\n@hookimpl\n"
                                       "def sand_register_detector(register):\n    pass\n"
                                       "def sand_register_samplers(register):\n    pass\n"}),
    # -- resource exhaustion ----------------------------------------------------------------------------------------
    BadInput("a 'billion laughs' recipe (nested YAML aliases)", ["validate", "{tmp}/r.yaml"], 2,
             ["more than 100,000 values", "billion laughs"], files={"r.yaml": _billion_laughs()}),
    BadInput("interpolations that double a string 30 times", ["validate", "{tmp}/r.yaml"], 2,
             ["more than 65,536 characters"], files={"r.yaml": _doubling()}),
    # -- recipes are data -------------------------------------------------------------------------------------------
    BadInput("a recipe that names a plugin folder (`plugins: {dirs: [.]}`)", ["validate", "{tmp}/r.yaml"], 2,
             ["this recipe would run code", "evil.py", "--allow-recipe-plugins", "--plugins-dir"],
             files={"r.yaml": "extends: smoke\nplugins: {dirs: [.]}\n", "evil.py": "open('ran', 'w')\n"},
             in_tmp=True, check=_not_executed),
    BadInput("a recipe that names a module to import", ["validate", "{tmp}/r.yaml"], 2,
             ["module 'antigravity'", "--allow-recipe-plugins"],
             files={"r.yaml": "extends: smoke\nplugins: {modules: [antigravity]}\n"}),
    BadInput("a recipe that reads a secret from the environment", ["validate", "{tmp}/r.yaml"], 2,
             ["'SECRET_TOKEN' is not on the allowlist", "SAND_RECIPE_ENV"],
             files={"r.yaml": "extends: smoke\nrun: {name: 'x-${oc.env:SECRET_TOKEN}'}\n"}, env=_secret,
             forbid=["hunter2"]),
    BadInput("a run name that leads outside run.output_dir", ["validate", "smoke", "run.name=../../x"], 2,
             ["run.name: '../../x' is not a folder name", "cannot hold a path"]),
    # -- quiet data damage ------------------------------------------------------------------------------------------
    BadInput("an ETO file with NaN / Infinity where ids and turns belong", ["data", "import-eto", "{tmp}/eto.json",
                                                                          "--env", "webshop", "-o", "{tmp}/out.json"],
             2, ["[0]: contains NaN or Infinity", "[1]: contains NaN or Infinity", "no trajectory could be imported"],
             files={"eto.json": "[{\"id\": NaN, \"conversations\": [" + ETO_HEAD +
                                "{\"from\": \"gpt\", \"value\": \"Action: search[x]\"}]},\n"
                                " {\"id\": \"7\", \"conversations\": [" + ETO_HEAD +
                                "{\"from\": \"gpt\", \"value\": Infinity}]}]\n"}),
]
