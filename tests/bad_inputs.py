"""The catalogue of bad inputs a user can give `sand`, each with the exit code and message it must produce.

One list feeds both ``tests/test_bad_inputs.py`` (every case runs through the
real CLI: the exit code, the message, no traceback) and
``scripts/bad_inputs_doc.py``, which writes ``docs/bad-inputs.md`` from the
actual output, so the document cannot drift from what users see.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

SAND = [sys.executable, "-m", "sand_framework.cli.main"]

SMOKE_RUN_RECIPE = """\
extends: smoke
run: {name: bad}
"""


def _hold_lock(tmp: Path) -> Callable[[], None]:
    """A live process holding a run directory's lock (what a running `sand run` does)."""
    run = tmp / "locked"
    code = ("import time; from sand_framework.engine.runner import create; "
            f"rd = create('smoke', run_dir={str(run)!r})[3]; rd.lock(); print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    proc.stdout.readline()
    return proc.kill


def _no_alfworld_data(env: dict[str, str], tmp: Path) -> None:
    env["ALFWORLD_DATA"] = str(tmp / "nowhere")


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
            return subprocess.run([*SAND, *args], capture_output=True, text=True, timeout=timeout, env=env)
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
    BadInput("base model folder that does not exist", ["run", "smoke", "model.base=/models/missing",
                                                       "--run-dir", "{tmp}/run"], 4,
             ["/models/missing", "no such model folder"]),
    BadInput("hub model while offline and not cached", ["run", "smoke", "model.base=someone/some-model",
                                                       "--run-dir", "{tmp}/run"], 4,
             ["someone/some-model", "HF_HUB_OFFLINE=1", "huggingface-cli download"]),
    BadInput("expert data file missing", ["run", "smoke", "data.source=sharegpt", "data.path={tmp}/missing.json",
                                          "--run-dir", "{tmp}/run"], 2,
             ["missing.json", "sand data import-eto"]),
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
]
