"""No inference engine is resident while training runs: the policy is released before every training stage.

A run of the smoke loop with the real transformers policy and the real TRL
trainer, each subclassed in a plugin only to record what happens: at the
moment a trainer starts, every policy instance must hold no model, and the
policy must be set up again (not reused stale) for the synthesis and
evaluation that follow.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

PLUGIN = textwrap.dedent('''
    import json, os
    from sand_framework import hookimpl
    from sand_builtins.policies.transformers_backend import TransformersPolicy
    from sand_builtins.trainers.trl_sft import TrlSftTrainer

    LOG = os.environ["SAND_LIFECYCLE_LOG"]
    LIVE = []

    def record(event, **kw):
        with open(LOG, "a") as fh:
            fh.write(json.dumps({"event": event, **kw}) + "\\n")

    class RecordingPolicy(TransformersPolicy):
        name = "recording_transformers"

        def setup(self, base_model):
            LIVE.append(self)
            record("setup")
            super().setup(base_model)

        def release(self):
            record("release")
            super().release()

        def generate(self, chats, sampling, role="agent"):
            record("generate", role=role)
            return super().generate(chats, sampling, role)

    class RecordingTrainer(TrlSftTrainer):
        name = "recording_trl_sft"

        def train(self, request):
            resident = [p for p in LIVE if p.model is not None or p.peft_model is not None]
            record("train", resident=len(resident))
            return super().train(request)

    @hookimpl
    def sand_register_policies(register):
        register(RecordingPolicy)

    @hookimpl
    def sand_register_trainers(register):
        register(RecordingTrainer)
''')


def test_policy_is_released_before_every_training_stage(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "recording.py").write_text(PLUGIN)
    log = tmp_path / "events.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "sand_framework.cli.main", "run", "smoke", "policy.name=recording_transformers",
         "trainer.name=recording_trl_sft", "eval.limit=1", "eval.splits=[unseen]", "--plugins-dir", str(plugins),
         "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=600, env={**__import__("os").environ, "SAND_LIFECYCLE_LOG": str(log)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = [json.loads(line) for line in log.read_text().splitlines()]
    names = [e["event"] for e in events]
    trains = [i for i, n in enumerate(names) if n == "train"]
    assert len(trains) == 2  # behavior init, then iteration 1
    assert all(events[i]["resident"] == 0 for i in trains)
    # iteration 1's training follows synthesis, which used the policy: it was released in between
    synth_gen = max(i for i in range(trains[1]) if names[i] == "generate")
    assert "release" in names[synth_gen:trains[1]]
    # and set up again afterwards for evaluation, which generates with it
    assert "setup" in names[trains[1]:] and "generate" in names[trains[1]:]
