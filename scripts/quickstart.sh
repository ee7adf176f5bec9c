#!/usr/bin/env bash
# Set up (if needed) and run the embedded default recipe: the whole SAND loop, offline, on CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/sand run quickstart "$@"
