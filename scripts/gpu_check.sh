#!/usr/bin/env bash
# The device check for the first GPU (issue 37): SFT and DPO steps in bf16 on CUDA, the memory hand-back measured,
# and the SAND loop end to end on a pure-Python environment with the transformers policy, in one JSON record.
#
#   bash scripts/gpu_check.sh --wheels       # here (registry access): fetch the wheels the device image lacks into
#                                            # .gpu_wheels/ (TRL, datasets, omegaconf ... and the example plugin)
#   bash scripts/gpu_check.sh [OUT_DIR]      # on the GPU machine, with .gpu_wheels/ carried beside the tree:
#                                            # writes OUT_DIR/gpu_check.json (default: $OUT, else .)
#
# The device image has CUDA torch, transformers, peft and accelerate but not TRL, datasets or omegaconf, and no
# network: they are installed from the carried wheels into a temporary folder (never into the image's Python).
# Expect under 8 minutes; the record says what ran, how long each part took and what failed
# (scripts/gpu_check.py). On a machine without CUDA the same parts run on its CPU with --cpu.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=.gpu_wheels
CARRIED="trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 omegaconf==2.4.0 annotated-types==0.8.0"
if [ "${1:-}" = "--wheels" ]; then
  mkdir -p "$WHEELS"
  PY=${PYTHON:-.venv/bin/python}
  # shellcheck disable=SC2086
  "$PY" -m pip download --no-deps --only-binary :all: --python-version 3.12 -d "$WHEELS" $CARRIED
  "$PY" -m pip wheel --no-deps -w "$WHEELS" plugins/examples/sand-example-plugin
  ls -la "$WHEELS"
  exit 0
fi
OUT_DIR=${1:-${OUT:-.}}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
missing=()
for wheel in "$WHEELS"/*.whl; do  # only what this Python lacks (a machine with the venv has them all but the plugin)
  [ -e "$wheel" ] || continue
  dist=$(basename "$wheel" | cut -d- -f1)
  "$PY" -c "import importlib.metadata as m, sys; m.version(sys.argv[1])" "$dist" 2>/dev/null || missing+=("$wheel")
done
if [ ${#missing[@]} -gt 0 ]; then
  "$PY" -m pip install --quiet --no-index --no-deps --target "$site" "${missing[@]}"
fi
export PYTHONPATH="$site:$PWD:$PWD/plugins${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false SAND_NO_PROGRESS=1 TQDM_DISABLE=1 SAND_CACHE="$site/cache"
# the openai policy's SDK is not in the image and no part uses it
export SAND_PLUGINS_DENY="${SAND_PLUGINS_DENY:-sand_builtins.policies.openai_client}"
cpu=()
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || cpu=(--cpu)
exec timeout 480 "$PY" scripts/gpu_check.py --out "$OUT_DIR/gpu_check.json" "${cpu[@]}"
