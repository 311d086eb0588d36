#!/usr/bin/env bash
# xgrad-train --precision: a value other than fp32 or bf16 exits 2 with one line and writes nothing;
# the same run at bf16 and at fp32 logs different losses (operands rounded to bfloat16) that stay close,
# or, on a CPU without bfloat16 dot products, says so in one line and logs the fp32 losses.
# Usage: train_precision_cli.sh TRAIN DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
train=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 3000 "a small model learns the same text in two precisions." "$dir/text.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
common=(--data "$dir/text.txt" --layers 1 --d-model 32 --heads 2 --block 32 --batch 4 --steps 20
        --sample-tokens 0 --no-plots --quiet)

status=0
"$train" "${common[@]}" --out "$dir/bad" --precision fp16 > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -eq 2 ] || fail "--precision fp16: exit status $status, expected 2"
[ "$(wc -l < "$dir/err.txt")" -eq 1 ] || fail "--precision fp16: stderr is not one line: $(cat "$dir/err.txt")"
grep -qF -- "--precision" "$dir/err.txt" || fail "--precision fp16: stderr does not name the flag"
[ -e "$dir/bad" ] && fail "a refused run created its --out folder"

"$train" "${common[@]}" --out "$dir/fp32" --precision fp32 2> "$dir/fp32.err" || fail "--precision fp32 run"
"$train" "${common[@]}" --out "$dir/bf16" --precision bf16 2> "$dir/bf16.err" || fail "--precision bf16 run"
[ -s "$dir/fp32.err" ] && fail "the fp32 run wrote to stderr: $(cat "$dir/fp32.err")"
losses() { cut -d, -f2 "$1/log.csv" | tail -n +2; }
if [ -s "$dir/bf16.err" ]; then
    [ "$(wc -l < "$dir/bf16.err")" -eq 1 ] && grep -qF "float32" "$dir/bf16.err" ||
        fail "bf16 on a CPU without bfloat16: not one line naming float32: $(cat "$dir/bf16.err")"
    [ "$(losses "$dir/bf16")" = "$(losses "$dir/fp32")" ] || fail "bf16 fell back to float32 but logged other losses"
else
    [ "$(losses "$dir/bf16")" != "$(losses "$dir/fp32")" ] || fail "bf16 logged exactly the fp32 losses"
    paste -d' ' <(losses "$dir/fp32") <(losses "$dir/bf16") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 0.05) bad = 1 } END { exit bad }' ||
        fail "bf16 train losses differ from fp32 by more than 0.05 within 20 steps"
fi

[ "$failures" -eq 0 ] && echo "train_precision_cli: all checks passed"
exit "$failures"
