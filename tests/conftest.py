"""Shared fixtures: a tiny real model, a real TextWorld-Express environment, a scripted policy."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SAND_NO_PROGRESS", "1")
os.environ.setdefault("SAND_CACHE", str(Path(__file__).resolve().parent.parent / ".sand_cache"))
# ALFWorld game data: CI clones the repo next to shared/ (see scripts/test.sh).
_ALFWORLD = Path(__file__).resolve().parent.parent.parent / "shared" / "alfworld"
if "ALFWORLD_DATA" not in os.environ and (_ALFWORLD / "json_2.1.1").is_dir():
    os.environ["ALFWORLD_DATA"] = str(_ALFWORLD)

sys.path.insert(0, str(Path(__file__).resolve().parent))

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    from sand_framework.testing.tiny_model import build_tiny_model

    return str(build_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The real transformers policy on the tiny model (a test module may define its own ``policy`` instead)."""
    from sand_framework.plugins import load_plugins

    p = load_plugins().registries().build("policy", "transformers", {"threads": 1})
    p.setup(tiny_model_dir)
    yield p
    p.close()


@pytest.fixture(scope="session")
def registries():
    from sand_framework.plugins import load_plugins

    return load_plugins().registries()


@pytest.fixture
def twx(registries):
    env = registries.build("environment", "textworld_express", {"n_train": 8, "n_seen": 4, "n_unseen": 4,
                                                                  "max_steps": 10})
    yield env
    env.close()
