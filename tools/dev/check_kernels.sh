#!/usr/bin/env bash
# Renders kernel sources the way src/codegen.c does (a comment, the descriptor
# macros, then fwd_params.h, common.cuh, the attention headers (not for the
# combine kernel) and the template, each after a #line
# directive), compiles each with nvcc
# (-std=c++17 -cubin -Xptxas -v) for sm_80 and sm_90, optionally with NVRTC
# too, and prints registers / stack / spills / shared memory per kernel.
# Exits non-zero if anything fails to compile, spills, uses a stack frame, or
# (with --sass) lacks HMMA/LDSM/LDGSTS or touches local memory (LDL/STL).
#
# usage: tools/dev/check_kernels.sh [options] [CONFIG...]
#   CONFIG   d128.bf16.causal.m128n64w4s2[.split]   (mask: nomask, causal,
#            window, causal_window; .split = FJ_SPLIT_KV 1)
#            wgmma.d128.bf16.causal.m128n128g2s3[.split]  (flash_wgmma, g = warpgroups;
#                                                   sm_90 only, built for sm_90a)
#            combine.d128.bf16.w4                   (the split-KV combine kernel)
#            no CONFIG: the heuristic tile set (see heuristic_set below)
#   --masks "nomask causal"   mask kinds of the heuristic set (default: these two;
#                    window and causal_window may be added)
#   --arch "80 90"   SM versions to compile for (default: 80 90)
#   --nvrtc          also compile every source with NVRTC, with the options of
#                    src/cuda/nvrtc_compile.c (arch, -std=c++17, --fmad=true,
#                    -default-device)
#   --sass           check the SASS with cuobjdump (HMMA, LDSM, LDGSTS present
#                    in flash_fwd, HGMMA and LDGSTS in flash_wgmma; no LDL/STL
#                    anywhere)
#   --keep DIR       keep sources, cubins and logs in DIR (default: a temp dir,
#                    removed at exit)
#   -j N             parallel compiles (default and maximum 2: shared machine)
#   -D NAME=VALUE    extra macro for every source (experiments, e.g. FJ_ACC_BUDGET)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tpl="$root/kernel_templates"
cuda=${CUDA_HOME:-/usr/local/cuda}
nvcc="$cuda/bin/nvcc"

archs="80 90"
masks="nomask causal"
use_nvrtc=0
use_sass=0
keep=""
jobs=2
extra_defs=()
configs=()

die() { echo "check_kernels: $*" >&2; exit 2; }

while [ $# -gt 0 ]; do
    case "$1" in
        --arch) archs="$2"; shift 2 ;;
        --masks) masks="$2"; shift 2 ;;
        --nvrtc) use_nvrtc=1; shift ;;
        --sass) use_sass=1; shift ;;
        --keep) keep="$2"; shift 2 ;;
        -j) jobs="$2"; shift 2 ;;
        -D) extra_defs+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) die "unknown option $1" ;;
        *) configs+=("$1"); shift ;;
    esac
done
[ "$jobs" -ge 1 ] 2>/dev/null || die "-j needs a number"
[ "$jobs" -le 2 ] || jobs=2
[ -x "$nvcc" ] || die "no nvcc at $nvcc (set CUDA_HOME)"

# The tiles the host heuristic uses first, over head dims that exercise every
# padding case (D % 16 == 8, D/8 odd) and both dtypes and mask kinds.
heuristic_set() {
    local d dt mask
    for d in 8 40 64 80 96 128 160 200 256; do
        for dt in f16 bf16; do
            for mask in $masks; do
                if [ "$d" -le 64 ]; then
                    [ $mask = nomask ] && echo "d$d.$dt.$mask.m128n128w4s2"
                    echo "d$d.$dt.$mask.m128n64w4s2"
                elif [ "$d" -le 128 ]; then
                    echo "d$d.$dt.$mask.m128n64w4s2"
                    echo "d$d.$dt.$mask.m64n64w4s2"
                else
                    echo "d$d.$dt.$mask.m64n64w4s2"
                    echo "d$d.$dt.$mask.m128n64w8s2"
                fi
            done
        done
    done
}
if [ ${#configs[@]} -eq 0 ]; then
    mapfile -t configs < <(heuristic_set)
fi

if [ -n "$keep" ]; then
    work="$keep"
    mkdir -p "$work"
else
    work=$(mktemp -d "${TMPDIR:-/tmp}/check_kernels.XXXXXX")
    trap 'rm -rf "$work"' EXIT
fi

cuobjdump=""
if [ $use_sass = 1 ]; then
    cuobjdump=$(command -v cuobjdump || true)
    [ -n "$cuobjdump" ] || [ ! -x "$cuda/bin/cuobjdump" ] || cuobjdump="$cuda/bin/cuobjdump"
    [ -n "$cuobjdump" ] || die "--sass needs cuobjdump (and nvdisasm) on PATH"
fi

nvrtc_bin=""
if [ $use_nvrtc = 1 ]; then
    # A minimal NVRTC driver with the options the library passes (keep in step
    # with src/cuda/nvrtc_compile.c), no include path.
    nvrtc_bin="$work/nvrtc_compile"
    cat >"$work/nvrtc_compile.c" <<'EOF'
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: nvrtc_compile SRC ARCH OUT.cubin\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *src = malloc((size_t)n + 1);
    if (!src || fread(src, 1, (size_t)n, f) != (size_t)n) return 2;
    src[n] = 0;
    fclose(f);
    nvrtcProgram prog;
    if (nvrtcCreateProgram(&prog, src, argv[1], 0, NULL, NULL) != NVRTC_SUCCESS) return 2;
    char arch[64];
    snprintf(arch, sizeof arch, "--gpu-architecture=sm_%s", argv[2]);
    const char *opts[] = {arch, "-std=c++17", "--fmad=true", "-default-device"};
    nvrtcResult r = nvrtcCompileProgram(prog, 4, opts);
    size_t ls = 0;
    nvrtcGetProgramLogSize(prog, &ls);
    char *log = malloc(ls + 1);
    if (log && nvrtcGetProgramLog(prog, log) == NVRTC_SUCCESS && ls > 1) fprintf(stderr, "%s\n", log);
    if (r != NVRTC_SUCCESS) { fprintf(stderr, "nvrtc: %s\n", nvrtcGetErrorString(r)); return 1; }
    size_t cs = 0;
    nvrtcGetCUBINSize(prog, &cs);
    char *cubin = malloc(cs);
    if (!cubin || nvrtcGetCUBIN(prog, cubin) != NVRTC_SUCCESS) return 2;
    FILE *o = fopen(argv[3], "wb");
    if (!o || fwrite(cubin, 1, cs, o) != cs) return 2;
    fclose(o);
    return 0;
}
EOF
    gcc -O1 -Wall -Wextra -o "$nvrtc_bin" "$work/nvrtc_compile.c" -I"$cuda/include" \
        -L"$cuda/lib64" -lnvrtc -Wl,-rpath,"$cuda/lib64" || die "cannot build the NVRTC driver"
fi

# ---- rendering ----------------------------------------------------------------

# render CONFIG OUT: writes the source the code generator would produce.
render() {
    local cfg="$1" out="$2"
    local d dt mask bm bn w st split=0 causal=0 window=0 template
    if [[ "$cfg" =~ ^combine\.d([0-9]+)\.(f16|bf16)\.w([0-9]+)$ ]]; then
        d=${BASH_REMATCH[1]}; dt=${BASH_REMATCH[2]}; w=${BASH_REMATCH[3]}
        bm=0; bn=0; st=0; split=1; template=combine.cu; mask=nomask
    elif [[ "$cfg" =~ ^d([0-9]+)\.(f16|bf16)\.(nomask|causal|window|causal_window)\.m([0-9]+)n([0-9]+)w([0-9]+)s([0-9]+)(\.split)?$ ]]; then
        d=${BASH_REMATCH[1]}; dt=${BASH_REMATCH[2]}; mask=${BASH_REMATCH[3]}
        bm=${BASH_REMATCH[4]}; bn=${BASH_REMATCH[5]}; w=${BASH_REMATCH[6]}; st=${BASH_REMATCH[7]}
        [ -n "${BASH_REMATCH[8]}" ] && split=1
        template=flash_fwd.cu
    elif [[ "$cfg" =~ ^wgmma\.d([0-9]+)\.(f16|bf16)\.(nomask|causal|window|causal_window)\.m([0-9]+)n([0-9]+)g([0-9]+)s([0-9]+)(\.split)?$ ]]; then
        d=${BASH_REMATCH[1]}; dt=${BASH_REMATCH[2]}; mask=${BASH_REMATCH[3]}
        bm=${BASH_REMATCH[4]}; bn=${BASH_REMATCH[5]}; w=$(( BASH_REMATCH[6] * 4 )); st=${BASH_REMATCH[7]}
        [ -n "${BASH_REMATCH[8]}" ] && split=1
        template=flash_wgmma.cu
    else
        echo "bad config '$cfg'" >&2
        return 1
    fi
    case $mask in causal) causal=1 ;; window) window=1 ;; causal_window) causal=1; window=1 ;; esac
    local dpad=$(( (d + 15) / 16 * 16 ))
    # the host's formula (src/kernel_desc.c): Q tile + STAGES K and V tiles
    local smem=$(( (bm + 2 * st * bn) * (dpad + 8) * 2 ))
    [ $template = combine.cu ] && smem=0
    # flash_wgmma: unpadded swizzled rows plus 1024 bytes of alignment slack
    [ $template = flash_wgmma.cu ] && smem=$(( (bm + 2 * st * bn) * d * 2 + 1024 ))
    {
        echo "// flashjit generated kernel $cfg (tools/dev/check_kernels.sh)"
        echo "#define FJ_HEAD_DIM $d"
        if [ $dt = bf16 ]; then echo "#define FJ_DTYPE_F16 0"; echo "#define FJ_DTYPE_BF16 1"
        else echo "#define FJ_DTYPE_F16 1"; echo "#define FJ_DTYPE_BF16 0"; fi
        echo "#define FJ_CAUSAL $causal"
        echo "#define FJ_HAS_WINDOW $window"
        echo "#define FJ_BLOCK_M $bm"
        echo "#define FJ_BLOCK_N $bn"
        echo "#define FJ_WARPS $w"
        echo "#define FJ_STAGES $st"
        echo "#define FJ_SPLIT_KV $split"
        echo "#define FJ_SMEM_BYTES $smem"
        local def
        for def in "${extra_defs[@]+"${extra_defs[@]}"}"; do echo "#define ${def%%=*} ${def#*=}"; done
        local f
        local shared="attention_rows.cuh softmax.cuh mask.cuh tile_io.cuh"
        [ $template = combine.cu ] && shared=""
        for f in fwd_params.h common.cuh $shared "$template"; do
            echo "#line 1 \"$f\""
            cat "$tpl/$f"
        done
    } >"$out"
    echo "$smem" >"$out.smem"
}

# ---- one job: CONFIG ARCH -> one result line ------------------------------------

one() {
    local cfg="$1" arch="$2"
    local base="$work/$cfg.sm_$arch"
    local status=ok regs=- stack=- sst=- sld=- smem=- note=""
    if ! render "$cfg" "$base.cu" 2>"$base.log"; then
        printf '%s\t%s\t-\t-\t-\t-\t-\tFAIL render\n' "$cfg" "$arch"
        return
    fi
    smem=$(cat "$base.cu.smem")
    # flash_wgmma needs the arch-specific target (wgmma exists on sm_90a only)
    local target=sm_$arch
    [[ "$cfg" == wgmma.* ]] && target=sm_${arch}a
    if ! "$nvcc" -std=c++17 -cubin -arch=$target -Xptxas -v -o "$base.cubin" "$base.cu" \
            >"$base.log" 2>&1; then
        status=FAIL; note="nvcc: $(grep -m1 -i error "$base.log" || tail -n1 "$base.log")"
    else
        regs=$(sed -n 's/.*Used \([0-9]*\) registers.*/\1/p' "$base.log" | head -n1)
        stack=$(sed -n 's/.* \([0-9]*\) bytes stack frame.*/\1/p' "$base.log" | head -n1)
        sst=$(sed -n 's/.* \([0-9]*\) bytes spill stores.*/\1/p' "$base.log" | head -n1)
        sld=$(sed -n 's/.* \([0-9]*\) bytes spill loads.*/\1/p' "$base.log" | head -n1)
        if grep -qi "warning" "$base.log"; then note="warnings (see log)"; status=FAIL; fi
        if [ "${sst:-0}" != 0 ] || [ "${sld:-0}" != 0 ] || [ "${stack:-0}" != 0 ]; then
            status=FAIL; note="spills/stack"
        fi
        if [ $use_sass = 1 ]; then
            "$cuobjdump" --dump-sass "$base.cubin" >"$base.sass" 2>&1 || { status=FAIL; note="cuobjdump failed"; }
            if grep -qE '\b(LDL|STL)\b' "$base.sass"; then status=FAIL; note="local memory in SASS"; fi
            if [[ "$cfg" != combine.* ]]; then
                local op
                local ops="HMMA LDSM LDGSTS"
                [[ "$cfg" == wgmma.* ]] && ops="HGMMA LDGSTS"
                for op in $ops; do
                    grep -q "$op" "$base.sass" || { status=FAIL; note="no $op in SASS"; }
                done
            fi
        fi
    fi
    if [ $use_nvrtc = 1 ]; then
        if ! "$nvrtc_bin" "$base.cu" "${target#sm_}" "$base.nvrtc.cubin" >"$base.nvrtc.log" 2>&1; then
            status=FAIL; note="nvrtc: $(head -n3 "$base.nvrtc.log" | tr '\n' ' ')"
        elif [ -s "$base.nvrtc.log" ]; then
            status=FAIL; note="nvrtc log not empty (warnings?)"
        fi
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s %s\n' "$cfg" "$arch" "$regs" "$stack" "$sst" "$sld" \
        "$smem" "$status" "$note"
}

export -f one render
export work tpl nvcc use_nvrtc use_sass cuobjdump nvrtc_bin
extra_defs_str=$(printf '%s\n' "${extra_defs[@]+"${extra_defs[@]}"}")
export extra_defs_str

results="$work/results.tsv"
for cfg in "${configs[@]}"; do
    for arch in $archs; do echo "$cfg $arch"; done
done | xargs -P "$jobs" -L 1 bash -c \
    'mapfile -t extra_defs < <(printf "%s" "$extra_defs_str"); one "$0" "$1"' >"$results"

sort -t $'\t' -k1,1 -k2,2n "$results" | awk -F'\t' '
    BEGIN { printf "%-40s %5s %5s %6s %6s %6s %7s  %s\n", "kernel", "sm", "regs", "stack", "spillS", "spillL", "smem", "status"
            fail = 0 }
    { printf "%-40s %5s %5s %6s %6s %6s %7s  %s\n", $1, $2, $3, $4, $5, $6, $7, $8
      if ($8 !~ /^ok/) fail++ }
    END { printf "%d kernels, %d failed\n", NR, fail; exit fail ? 1 : 0 }'
