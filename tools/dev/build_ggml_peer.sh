#!/usr/bin/env bash
# Builds ggml (CPU only) from a checkout and tools/dev/ggml_attention.c
# against it, for tools/compare_torch_cpu.py --ggml-lib: ggml's
# FLASH_ATTN_EXT as the CPU peer next to PyTorch, in the same process.
#
#   tools/dev/build_ggml_peer.sh GGML_SOURCE_DIR [OUT_DIR]
#
# GGML_SOURCE_DIR: a checkout of https://github.com/ggml-org/ggml (its
# build goes to GGML_SOURCE_DIR/build, native CPU flags, Release);
# OUT_DIR (default build-ggml): where libfjt_ggml.so goes, with an rpath to
# ggml's libraries. Prints the library's path last.
set -euo pipefail
src=$(cd "${1:?usage: $0 GGML_SOURCE_DIR [OUT_DIR]}" && pwd)
out=${2:-build-ggml}
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -f "$src/build/src/libggml.so" ]; then
    cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
        -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=ON >/dev/null
    cmake --build "$src/build" -j"$(nproc)" >/dev/null
fi
# libggml, libggml-base and libggml-cpu may sit in different folders
dirs=()
for l in libggml.so libggml-base.so libggml-cpu.so; do
    f=$(find "$src/build" -name "$l" | head -1)
    [ -n "$f" ] || { echo "no $l under $src/build" >&2; exit 1; }
    dirs+=("$(dirname "$f")")
done
link=()
for d in $(printf '%s\n' "${dirs[@]}" | sort -u); do link+=(-L"$d" "-Wl,-rpath,$d"); done
mkdir -p "$out"
cc -O2 -std=c11 -Wall -Wextra -Werror -fPIC -shared -I"$src/include" "$here/ggml_attention.c" \
    "${link[@]}" -lggml -lggml-base -lggml-cpu -lm -o "$out/libfjt_ggml.so"
git -C "$src" log -1 --format='ggml %h %cs' 2>/dev/null || echo "ggml (not a git checkout)"
echo "$out/libfjt_ggml.so"
