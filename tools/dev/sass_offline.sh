#!/usr/bin/env bash
# The SASS of one generated kernel on a machine with no GPU and no CUDA
# toolkit: `flashjit source --ptx` (NVRTC, as the library compiles), then
# ptxas and cuobjdump, all from NVIDIA's PyPI wheels (fetched once into
# .cuda-tools/, git-ignored; not .devdeps, which device runs carry). Prints ptxas's registers and spills,
# the loops' instruction mix, and for the warp-specialized kernels each key
# step's mix and where the wait for P V falls (tools/dev/sass_steps.py).
# Device time is scarce; registers, spills and the per-tile instruction
# count are not, and they answer most "why is this slower" questions first.
# The wheels' NVRTC and ptxas are the newest 13.x, not necessarily the
# NVRTC the library links (13.0 here, in CI and on the GPU machine), and
# the two can allocate differently: flash_tma's causal d128 kernel keeps its
# wgmma descriptors in uniform registers under 13.0 but moves each through
# R2UR under 13.5. For the code that runs, compile with the library's NVRTC
# (`flashjit compile-all ... --cache-dir DIR`; the cubin starts at the
# first "\x7fELF" of each .fjk) and read it with .cuda-tools/bin/cuobjdump.
#
#   tools/dev/sass_offline.sh [--keep DIR] NAME | FLAGS
#     NAME    a canonical kernel name: flash_tma.d128.bf16.nomask.m128n128c2s2x2.sm_90
#     FLAGS   flashjit source's problem flags: --head-dim 128 --seqlen-q 4096 [--causal]
#   BUILD=build   the build whose tools/flashjit renders the source
set -euo pipefail
cd "$(dirname "$0")/../.."
keep=""
if [ "${1:-}" = --keep ]; then keep=$2; shift 2; fi
[ $# -gt 0 ] || { sed -n '2,21p' "$0"; exit 2; }
tools=.cuda-tools
flashjit=${BUILD:-build}/tools/flashjit
[ -x "$flashjit" ] || { echo "no $flashjit: build first (meson setup build && ninja -C build)"; exit 2; }

if [ ! -x "$tools/bin/nvdisasm" ] || ! ls "$tools"/lib/libnvrtc.so* >/dev/null 2>&1; then
    echo "== fetching NVRTC, ptxas, cuobjdump and nvdisasm (PyPI wheels) into $tools" >&2
    rm -rf "$tools" && mkdir -p "$tools/wheels" "$tools/bin" "$tools/lib" "$tools/unpacked"
    python3 -m pip download -q --no-deps --only-binary=:all: -d "$tools/wheels" \
        "nvidia-cuda-nvrtc==13.*" "nvidia-cuda-nvcc==13.*" "nvidia-cuda-cuobjdump==13.*" \
        "nvidia-cuda-nvdisasm==13.*"
    for w in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$w" "$tools/unpacked"; done
    for t in ptxas cuobjdump nvdisasm; do
        cp "$(find "$tools/unpacked" -name "$t" -type f | head -1)" "$tools/bin/"
    done
    find "$tools/unpacked" -name 'libnvrtc*.so*' -exec cp {} "$tools/lib/" \;
    chmod +x "$tools/bin/"*
    rm -rf "$tools/wheels" "$tools/unpacked"
fi

dir=${keep:-$(mktemp -d)}
mkdir -p "$dir"
[ -n "$keep" ] || trap 'rm -rf "$dir"' EXIT
nvrtc=$(ls "$tools"/lib/libnvrtc.so.* | grep -v builtins | grep -v alt | head -1)
LD_LIBRARY_PATH="$PWD/$tools/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FLASHJIT_LIBNVRTC="$PWD/$nvrtc" \
    "$flashjit" source "$@" --ptx >"$dir/kernel.ptx" 2>"$dir/source.log" || { cat "$dir/source.log"; exit 1; }
sed -n 's/^flashjit source: //p' "$dir/source.log"
arch=$(sed -n 's/^\.target \(sm_[0-9a-z]*\).*/\1/p' "$dir/kernel.ptx" | head -1)
"$tools/bin/ptxas" -arch="$arch" -v -o "$dir/kernel.cubin" "$dir/kernel.ptx" 2>&1 |
    grep -E "registers|spill|stack" | sed 's/^ptxas info *: //'
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/cuobjdump" -sass "$dir/kernel.cubin" >"$dir/kernel.sass"
python3 tools/dev/sass_steps.py "$dir/kernel.sass"
[ -z "$keep" ] || echo "kept: $dir (kernel.ptx, kernel.cubin, kernel.sass)"
