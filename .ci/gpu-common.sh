# shellcheck shell=bash
# The shared part of the GPU machine's scripts (.ci/gpu-verify, .ci/gpu-bench,
# .ci/gpu-profile), sourced by each: the dependencies carried in .devdeps/,
# the build, a step runner that logs each step, and the summary printed last.
#
# Only the checkout reaches the GPU machine, and nothing can be installed
# there from a registry. What it lacks travels in .devdeps/ (git-ignored;
# name it in the device call's carry):
#   .devdeps/*.deb   unpacked into / (cmocka: libcmocka0 and libcmocka-dev,
#                    from `apt-get download` on a Debian/Ubuntu machine)
#   .devdeps/*.whl   installed into /tmp/site (FlashAttention-3: the fa3_fwd
#                    wheel, the `fa3` peer of compare_torch.py)
# Each script writes its full logs under $OUT as logs.tgz (the device tool
# brings back at most 8 files), its JSON next to it, and prints a short
# table last. Environment for all three:
#   OUT        where results go (default /tmp/flashjit-gpu-out)
#   BUILD      the build directory (default build-gpu; reused when configured)
#   FLASHJIT_CACHE_DIR  the kernel cache (default /tmp/flashjit-cache)
#   FORCE_BUCKETS  the buckets a forced config covers (see forced_tuning_file)

set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
OUT=${OUT:-/tmp/flashjit-gpu-out}
LOG=/tmp/flashjit-gpu-logs
BUILD=${BUILD:-build-gpu}
# shellcheck disable=SC2034  # used by the scripts that source this
LIB=$BUILD/libflashjit.so
FLASHJIT=$BUILD/tools/flashjit
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-/tmp/flashjit-cache}
export PYTHONUNBUFFERED=1
rm -rf "$LOG"
mkdir -p "$OUT" "$LOG"
summary=()

# step NAME COMMAND...: runs it with its output in $LOG/NAME.log, records
# PASS, SKIP(77) (a test that found no GPU) or FAIL(exit status) and the
# seconds it took; the logs are packed after every step, so a call cut short
# still brings them back.
step() {
    local name=$1 t0=$SECONDS r=PASS
    shift
    "$@" >"$LOG/$name.log" 2>&1 || { r=$?; [ $r = 77 ] && r="SKIP($r)" || r="FAIL($r)"; }
    summary+=("$(printf '%-26s %-9s %4ds' "$name" "$r" $((SECONDS - t0)))")
    echo "[$name] $r $((SECONDS - t0))s"
    tar -czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null
}

# The summary of every step, last; the exit status is 1 if any step failed
# or skipped (on the GPU machine a skipped GPU test is a check not made).
finish() {
    tar -czf "$OUT/logs.tgz" -C "$LOG" . 2>/dev/null
    echo "== steps (full logs: logs.tgz)"
    printf '%s\n' "${summary[@]}"
    case "${summary[*]}" in *FAIL* | *SKIP*) exit 1 ;; esac
    exit 0
}

# The carried .debs and wheels (see the top of this file).
install_devdeps() {
    local f
    for f in .devdeps/*.deb; do [ -e "$f" ] && dpkg -x "$f" /; done
    ldconfig
    if compgen -G ".devdeps/*.whl" >/dev/null; then
        python3 -m pip install -q --no-index --no-deps --target /tmp/site .devdeps/*.whl
        # the fa3_fwd wheel's interface imports its config under this name
        [ -f /tmp/site/fa3_fwd_config.py ] &&
            printf 'from fa3_fwd_config import CONFIG\n' >/tmp/site/flash_attn_config.py
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    fi
}

# The device as the tuning file names it (spaces as _) and its arch.
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr ' ' _)
GPU_ARCH=sm_$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)

# A user tuning file that forces CONFIG on every head dim (8..256), dtype,
# mask and bucket (FORCE_BUCKETS, default all: 1 is decode, 512..32768
# prefill) of this device, written to /tmp/tune-CONFIG.txt (its path is
# printed). Where CONFIG does not fit a point the plan falls back to the
# shipped table or the heuristic and its describe text says why.
forced_tuning_file() {
    local cfg=$1 f=/tmp/tune-$1.txt today d t m b
    today=$(date -u +%F)
    {
        echo "flashjit-tuning 1"
        for d in $(seq 8 8 256); do for t in bf16 f16; do for m in nomask causal window causal_window; do
            for b in ${FORCE_BUCKETS:-1 512 1024 2048 4096 8192 16384 32768}; do
                echo "$GPU_NAME $GPU_ARCH flash_fwd $d $t $m $b $cfg 1 $today"
            done
        done; done; done
    } >"$f"
    echo "$f"
}

# The machine, the build (release, with the tests: cmocka comes from
# .devdeps) and what flashjit sees there.
setup_and_build() {
    install_devdeps
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv \
        >"$LOG/gpu.txt" 2>&1
    echo "== $(tail -1 "$LOG/gpu.txt") ($GPU_ARCH); $(git log -1 --format='%h %s' 2>/dev/null || echo 'no git')"
    step build bash -c "{ [ -f $BUILD/build.ninja ] || meson setup $BUILD -Dbuildtype=release; } && ninja -C $BUILD"
    step info "$FLASHJIT" info
    grep -q PASS <<<"${summary[0]}" || { echo "the build failed:"; tail -30 "$LOG/build.log"; finish; }
}
