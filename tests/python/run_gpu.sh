#!/usr/bin/env bash
# The Python package's whole pytest suite, CUDA tests included, on a machine
# with an NVIDIA GPU and no package registry (the GPU machine:
# shared/gpu-machine.md). It builds the package with pip from this checkout
# and runs every test in tests/python (the CUDA ones are marked `cuda`).
#
# Needs there: python3 with torch (CUDA), pytest, numpy and transformers,
# meson, ninja, a C compiler and OpenBLAS, the NVIDIA driver and NVRTC.
# meson-python is not there. With its wheels fetched beforehand (where PyPI
# is reachable) into the ignored folder .devdeps/python/, carried with the
# run, the package is built as a user's `pip install .` builds it; without
# them, by meson directly with the same options and install tag.
#
#     tests/python/run_gpu.sh --fetch          # here: meson-python's wheels
#     tests/python/run_gpu.sh [PYTEST ARGS]    # there: build, install, test
#
# Logs, the JUnit XML, the CUDA context's info and the per-call overhead
# (tools/python_overhead.py) go to $OUT (the device runner's folder) when it
# is set, else build-gpu-py/. Kernels compile into a fresh cache (a temporary
# folder), so the run covers NVRTC compiles as a user's first run does.
# Exit status: pytest's.
set -euo pipefail
cd "$(dirname "$0")/../.."
wheels=.devdeps/python

if [ "${1:-}" = --fetch ]; then
    mkdir -p "$wheels"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
        "meson-python>=0.15" "pyproject-metadata>=0.7.1" "packaging>=23"
    ls "$wheels"
    exit 0
fi

out="${OUT:-$PWD/build-gpu-py}"
work="$(mktemp -d /tmp/flashjit-py.XXXXXX)"
mkdir -p "$out"
log="$out/python-gpu.log"
export FLASHJIT_CACHE_DIR="$work/kernel-cache"

if ls "$wheels"/meson_python-*.whl >/dev/null 2>&1; then
    how=pip
else
    how=meson
fi

{
    echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(hostname)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
    python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
    python3 -c "import transformers; print('transformers', transformers.__version__)" || true
    if [ "$how" = pip ]; then
        echo "== build deps: meson-python from $wheels"
        python3 -m pip install -q --no-index --no-deps --target "$work/build-deps" "$wheels"/*.whl
        echo "== pip install . (no build isolation: meson and ninja from this machine)"
        PYTHONPATH="$work/build-deps${PYTHONPATH:+:$PYTHONPATH}" \
            python3 -m pip install --no-index --no-deps --no-build-isolation --target "$work/site" .
    else
        # What pip install . runs through meson-python, by hand: the same
        # options (pyproject.toml) and the package's install tag.
        echo "== no meson-python wheel in $wheels (tests/python/run_gpu.sh --fetch): meson setup + install"
        meson setup "$work/build" --prefix "$work/prefix" -Dpython=true -Dtools=false -Dtests=disabled
        ninja -C "$work/build"
        meson install -C "$work/build" --tags python-runtime --quiet
        pkg=$(find "$work/prefix" -name __init__.py -path "*/flashjit/__init__.py" | head -n 1)
        mkdir -p "$work/site"
        cp -r "$(dirname "$pkg")" "$work/site/"
    fi
} 2>&1 | tee "$log"

export PYTHONPATH="$work/site${PYTHONPATH:+:$PYTHONPATH}"
{
    echo "== flashjit.info('cuda')"
    python3 -c "import flashjit; print(flashjit.__file__); print(flashjit.info('cuda'))" ||
        echo "run_gpu.sh: flashjit.info('cuda') failed (above): the CUDA tests will say why"
} 2>&1 | tee -a "$log" | tee "$out/info.txt"

echo "== pytest tests/python (CPU and CUDA)" | tee -a "$log"
set +e
python3 -m pytest tests/python -rs -q --junitxml="$out/python-gpu.xml" "$@" 2>&1 | tee -a "$log"
status=${PIPESTATUS[0]}
set -e
echo "== pytest exit status $status; kernels compiled this run: $(ls "$FLASHJIT_CACHE_DIR" 2>/dev/null | wc -l) cache files" | tee -a "$log"
echo "== a call's host cost next to torch SDPA's (tools/python_overhead.py --device cuda)" | tee -a "$log"
python3 tools/python_overhead.py --device cuda 2>&1 | tee -a "$log" "$out/overhead.txt" || true
rm -rf "$work"
exit "$status"
