#!/usr/bin/env bash
# Set up (if needed) and run the test suite (the default set: not slow, not gpu, not vllm) on every core.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m slow`.
# The suite exercises every environment and executor, so it installs their extras (ALFWorld compiles its planner
# once: minutes); tests that need ALFWorld's game data skip when no $ALFWORLD_DATA or ../shared/alfworld is found.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --with alfworld,scienceworld,ray,test
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 SAND_NO_PROGRESS=1
export SAND_CACHE="${SAND_CACHE:-$PWD/.sand_cache}"
# ALFWorld game data (the CI clones the repo next to shared/); keep a value set by the caller.
if [ -z "${ALFWORLD_DATA:-}" ] && [ -d "$PWD/../shared/alfworld/json_2.1.1" ]; then
  export ALFWORLD_DATA="$(cd "$PWD/../shared/alfworld" && pwd)"
fi
# One pytest-xdist worker per core this process may use (each single-threaded: OMP_NUM_THREADS=1), at most 8;
# SAND_TEST_WORKERS=N sets the count (1: one process, no xdist). --dist loadfile keeps a test file on one worker,
# so a module's fixtures are built once. Arguments that choose workers themselves (-n, -p no:xdist) are kept.
# Without pytest-xdist (a venv set up with --vllm has only that lock) the suite runs in one process.
workers=${SAND_TEST_WORKERS:-$(.venv/bin/python -c "import os; print(min(8, len(os.sched_getaffinity(0))))")}
xdist=(-n "$workers" --dist loadfile)
for arg in "$@"; do
  case "$arg" in -n|-n[0-9]*|--numprocesses|--numprocesses=*|no:xdist) xdist=() ;; esac
done
if [ "$workers" -le 1 ] || ! .venv/bin/python -c "import xdist" 2>/dev/null; then
  xdist=()
fi
exec .venv/bin/python -m pytest -q "${xdist[@]}" "$@"
