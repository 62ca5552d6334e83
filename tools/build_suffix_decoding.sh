#!/usr/bin/env bash
# Build SuffixDecoding's own C++ suffix tree (arctic-inference's csrc/suffix_decoding) and its
# Python wrapper, for `lookahead bench --methods suffix,suffix-global`.
#
# arctic-inference is a vLLM plugin whose build pulls torch, grpcio and CUDA ops, so it is not
# installed whole: this fetches its sdist WITHOUT resolving build dependencies, builds only the
# suffix-tree extension with that folder's own CMakeLists (g++, CPU only, about 25 s), and puts
#   arctic_inference/__init__.py, arctic_inference/suffix_decoding/{__init__,cache}.py, _C*.so
# into a folder of its own, added to sys.path by a .pth file in site-packages. A real
# arctic-inference installed in site-packages comes first on sys.path and wins.
#
# Usage: tools/build_suffix_decoding.sh [--force | --uninstall]
# Environment: PYTHON (default python), ARCTIC_VERSION (default 0.3.0),
#              WORK_DIR (default ${XDG_CACHE_HOME:-~/.cache}/lookahead/suffix-decoding), CXX (default g++).
# Idempotent: a second run finds the installed extension and does nothing (--force rebuilds).
set -euo pipefail

PY=${PYTHON:-python}
VERSION=${ARCTIC_VERSION:-0.3.0}
WORK=${WORK_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/suffix-decoding}
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
DEST="$SITE/lookahead_suffix_decoding"  # holds the arctic_inference package (suffix decoding only)
PTH="$SITE/lookahead-suffix-decoding.pth"
MODE=${1:-}

say() { echo "build_suffix_decoding: $*"; }
die() { echo "build_suffix_decoding: error: $*" >&2; exit 1; }

# Where `import arctic_inference.suffix_decoding` resolves now (empty when it does not).
importable() {
    "$PY" - <<'EOF' 2>/dev/null || true
from arctic_inference.suffix_decoding import SuffixDecodingCache
import arctic_inference.suffix_decoding as m
print(m.__file__)
EOF
}

case "$MODE" in
    --uninstall)
        rm -rf "$DEST" "$PTH"
        say "removed $DEST and $PTH"
        exit 0 ;;
    --force | "") ;;
    *) die "unknown option $MODE (use --force or --uninstall)" ;;
esac

found=$(importable)
if [[ -n "$found" && "$MODE" != --force ]]; then
    say "already importable: $found (nothing to do; --force rebuilds, --uninstall removes)"
    exit 0
fi

started=$(date +%s)
mkdir -p "$WORK"
SDIST="$WORK/arctic_inference-$VERSION.tar.gz"
if [[ ! -f "$SDIST" ]]; then
    # --no-build-isolation: pip must not resolve the sdist's build requirements (torch, grpcio,
    # ... built from source); the package's metadata is prepared with what is installed here.
    say "downloading the arctic-inference $VERSION sdist"
    "$PY" -m pip download --quiet --no-deps --no-binary :all: --no-build-isolation \
        "arctic-inference==$VERSION" -d "$WORK" || die "pip download of arctic-inference==$VERSION failed"
fi
[[ -f "$SDIST" ]] || die "expected $SDIST after pip download"

SRC="$WORK/arctic_inference-$VERSION"
rm -rf "$SRC" && tar -xzf "$SDIST" -C "$WORK"
CSRC="$SRC/csrc/suffix_decoding"
[[ -f "$CSRC/CMakeLists.txt" ]] || die "no csrc/suffix_decoding/CMakeLists.txt in the $VERSION sdist"

say "installing build tools (nanobind 2.9.2, cmake, ninja)"
"$PY" -m pip install --quiet --disable-pip-version-check "nanobind==2.9.2" cmake ninja
CMAKE=$("$PY" -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))')
NINJA=$("$PY" -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')
PYEXE=$("$PY" -c 'import sys; print(sys.executable)')

BUILD="$WORK/build-$VERSION"
rm -rf "$BUILD"
say "building $CSRC (Release, ${CXX:-g++})"
build_started=$(date +%s)
"$CMAKE" -S "$CSRC" -B "$BUILD" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="${CXX:-g++}" -DPython_EXECUTABLE="$PYEXE" > "$BUILD.configure.log" \
    || die "cmake configure failed (log: $BUILD.configure.log)"
"$CMAKE" --build "$BUILD" > "$BUILD.build.log" || die "cmake build failed (log: $BUILD.build.log)"
build_s=$(( $(date +%s) - build_started ))
EXT=$(find "$BUILD" -maxdepth 1 -name '_C*.so' | head -n 1)
[[ -n "$EXT" ]] || die "the build produced no _C*.so in $BUILD"

PKG="$SRC/arctic_inference"
rm -rf "$DEST"
mkdir -p "$DEST/arctic_inference/suffix_decoding"
cp "$PKG/__init__.py" "$DEST/arctic_inference/__init__.py"  # license header only: no vLLM imports
cp "$PKG/suffix_decoding/__init__.py" "$PKG/suffix_decoding/cache.py" "$EXT" "$DEST/arctic_inference/suffix_decoding/"
cp "$SRC/LICENSE" "$DEST/arctic_inference/LICENSE"
echo "arctic-inference $VERSION: csrc/suffix_decoding and arctic_inference/suffix_decoding only" > "$DEST/SOURCE"
echo "$DEST" > "$PTH"

# Smoke test in a fresh interpreter: the .pth is read, the tree drafts a repeated continuation.
"$PY" - <<'EOF' || die "the installed extension does not work"
from arctic_inference.suffix_decoding import SuffixDecodingCache
cache = SuffixDecodingCache(max_tree_depth=24, max_cached_requests=0)
cache.start_request("smoke", [5, 6, 7, 8, 5, 6, 7, 8, 5, 6])
# matches of up to len(context) - 1 tokens; a 2-token match allows a 2-token draft (spec factor 1)
draft = cache.speculate("smoke", [8, 5, 6], max_spec_tokens=4, max_spec_factor=1.0, max_spec_offset=0.0,
                        min_token_prob=0.1)
assert list(draft.token_ids) == [7, 8], draft.token_ids
cache.stop_request("smoke")
EOF

say "built $(basename "$EXT") in ${build_s}s (whole script $(( $(date +%s) - started ))s)"
say "installed the package in $DEST/arctic_inference"
say "added $DEST to sys.path via $PTH"
say "sources and build logs in $WORK"
say "import check: $(importable)"
