#!/usr/bin/env bash
# Set up (if needed) and run the test suite (the default set: not slow, not gpu).
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
exec .venv/bin/python -m pytest -q "$@"
