#!/bin/sh
# xgrad-sample against llama2.c's run.c on the same weights, one core, greedy: the wall time and peak
# resident size of 1 token (load + one forward) and of 256 tokens (run.c: prompt "a", as it stops at id 1), medians of RUNS runs, interleaved so
# that both programs see the same load of a shared machine. Decode speed = 255 / (t(256) - t(1)).
#
#   bench/decode_vs_llama2c.sh XGRAD_SAMPLE CHECKPOINT RUN_BINARY LLAMA2C_FOLDER [RUNS]
#
# CHECKPOINT is an xgrad checkpoint of a llama2.c-shaped model (norm rmsnorm, position rope, mlp swiglu,
# bias none) and LLAMA2C_FOLDER the same weights written by `xgrad-convert --from xgrad --to llama2c`.
# RUN_BINARY is run.c built from llama2.c's public source outside this repository
# (gcc -Ofast -march=native run.c -lm). Needs /usr/bin/time (GNU time) and taskset.
set -eu
sample=$1 checkpoint=$2 run=$3 folder=$4 runs=${5:-7}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# One timed run: appends "milliseconds peak_kB" to $out/$1 (the wall time from date's nanoseconds: GNU
# time's own is in hundredths of a second).
timed() {
    name=$1
    shift
    start=$(date +%s%N)
    /usr/bin/time -f "%M" -o "$out/last" taskset -c 0 "$@" > /dev/null 2>&1
    end=$(date +%s%N)
    echo "$(((end - start) / 1000)) $(cat "$out/last")" | awk '{ printf "%.3f %s\n", $1 / 1000, $2 }' >> "$out/$name"
}

i=0
while [ "$i" -lt "$runs" ]; do
    timed xgrad_1 "$sample" --checkpoint "$checkpoint" --prompt a --tokens 1 --temperature 0
    timed runc_1 "$run" "$folder/model.bin" -z "$folder/tokenizer.bin" -t 0 -n 1 -i a
    timed xgrad_256 "$sample" --checkpoint "$checkpoint" --prompt a --tokens 256 --temperature 0
    timed runc_256 "$run" "$folder/model.bin" -z "$folder/tokenizer.bin" -t 0 -n 256 -i a
    i=$((i + 1))
done

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
column_median() { awk -v c="$2" '{ print $c }' "$out/$1" | median; }
report() {
    t1=$(column_median "${1}_1" 1) m1=$(column_median "${1}_1" 2)
    t256=$(column_median "${1}_256" 1) m256=$(column_median "${1}_256" 2)
    awk -v n="$2" -v t1="$t1" -v m1="$m1" -v t256="$t256" -v m256="$m256" 'BEGIN {
        rate = (t256 > t1) ? 255000 / (t256 - t1) : 0
        printf "| %s | %.1f ms, %.0f MB | %.1f ms, %.0f MB | %.0f |\n", n, t1, m1 / 1024, t256, m256 / 1024, rate }'
}
echo "medians of $runs runs, taskset -c 0, greedy"
echo "| program | 1 token: wall, peak RSS | 256 tokens: wall, peak RSS | decode tokens/s |"
echo "|---|---|---|---|"
report xgrad "xgrad-sample"
report runc "llama2.c run.c"
