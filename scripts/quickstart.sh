#!/usr/bin/env bash
# Set up (if needed) and run the embedded default recipe: the whole SAND loop, offline, on CPU.
# Installs only what the quickstart runs (the core and TextWorld-Express); other environments, executors and
# backends are extras: `bash scripts/setup.sh --with alfworld,scienceworld,ray` or `--vllm` (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/sand run quickstart "$@"
