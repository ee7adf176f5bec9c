#!/usr/bin/env bash
# CI lane for the vLLM backends: install vLLM (scripts/setup.sh --vllm), then run the tests marked `vllm`
# (policy `vllm` on the real vLLM CPU engine, policy `openai` against a real `vllm serve`). Measured 15 + 5 min
# on 2 cores shared with ~6 busy processes (load 12-17); every engine start is ~20 s on idle cores, minutes under load.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --vllm
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 SAND_NO_PROGRESS=1
export SAND_CACHE="${SAND_CACHE:-$PWD/.sand_cache}"
exec .venv/bin/python -m pytest -q -m vllm tests/test_policy_vllm.py tests/test_policy_openai.py "$@"
