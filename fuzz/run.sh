#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and runs each for a bounded time, as many at a
# time as there are cores.
#
#   fuzz/run.sh [SECONDS]     (default 30 per target; ./dev fuzz installs clang first)
#
# Each target starts from its committed seeds (fuzz/corpus/<name>) and every input that ever found a bug
# (fuzz/regressions/<name>); what it discovers goes to build-fuzz/corpus/<name>, not into the repository.
# Any crash, leak, timeout (10 s for one input), out-of-memory (2 GB resident, or one allocation over
# 1 GB: a small input must never make a reader allocate that much) or sanitizer report fails the run; the
# input that caused it is left in build-fuzz/artifacts/<name>/. Once the bug is fixed, copy that input to
# fuzz/regressions/<name>/: ctest replays it from then on (fuzz_replay_<name>).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}

cmake -S fuzz -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz -j "$(nproc)"

# fuzz NAME: runs one target for $seconds and leaves its exit status in build-fuzz/NAME.status.
fuzz() {
    local name=$1 work=build-fuzz/corpus/$1 artifacts=build-fuzz/artifacts/$1 dict=() status=0 max_len=4096
    mkdir -p "$work" "$artifacts"
    [ -f "fuzz/$name.dict" ] && dict=(-dict="fuzz/$name.dict")
    [ "$name" = checkpoint ] && max_len=16384  # a whole small model with its header
    "./build-fuzz/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
        -max_len="$max_len" \
        -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" \
        "$work" "fuzz/corpus/$name" "fuzz/regressions/$name" >"build-fuzz/$name.log" 2>&1 || status=$?
    echo "$status" >"build-fuzz/$name.status"
}

# As many targets at a time as there are cores (each is one process): every target still gets its
# $seconds, in a fraction of the wall time.
targets=($(tr ';' ' ' <build-fuzz/targets.txt))
rm -f build-fuzz/*.status
at_a_time=$(nproc)
for ((i = 0; i < ${#targets[@]}; i += at_a_time)); do
    batch=("${targets[@]:i:at_a_time}")
    echo "fuzzing ${batch[*]} for ${seconds}s"
    for name in "${batch[@]}"; do
        fuzz "$name" &
    done
    wait
done

failed=()
summary=()
for name in "${targets[@]}"; do
    log=build-fuzz/$name.log
    work=build-fuzz/corpus/$name
    status=$(cat "build-fuzz/$name.status")
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    summary+=("$(printf '%-16s %12s executions  coverage %6s edges  corpus %5s inputs' "$name" "${runs:-?}" \
        "${coverage:-?}" "$(ls "$work" | wc -l)")")
    if [ "$status" -ne 0 ]; then
        failed+=("$name")
        echo "fuzz_$name FAILED (status $status); the end of its log ($log):" >&2
        tail -40 "$log" >&2
        echo "the input is in build-fuzz/artifacts/$name/" >&2
    fi
done

printf '%s\n' "${summary[@]}"
if ((${#failed[@]})); then
    echo "fuzzing found problems in: ${failed[*]}" >&2
    exit 1
fi
echo "fuzzing: no crash, leak, timeout or sanitizer report"
