#!/usr/bin/env bash
# Exercise 20.1's grid (docs/experiments/heads.json) as `./dev experiment --quick` runs it: a tiny model,
# a few steps, two seeds. Every variant must get a row, a comparison and a verdict with finite numbers,
# --replot must rebuild the same report from the runs on disk, and fail (exit 1) on checkpoints it
# cannot read.
# Usage: experiment_quick.sh XGRAD_EXPERIMENT SPEC_DIR DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
program=$1
specs=$2
dir=$3
rm -rf "$dir" && mkdir -p "$dir"
practice_text 3 2000 "many heads or one big head? each head attends on" "$dir/text.txt"
"$program" --spec "$specs/heads.json" --data "$dir/text.txt" --out "$dir/out" --seeds 2 --steps 6 \
    --set d-model=16 --set block=16 --set batch=4 --set eval-windows=8 --set eval-every=3 > "$dir/output.txt"
report="$dir/out/report.md"
fail() { echo "$1"; cat "$report"; exit 1; }
for variant in H1 H2 H4 H8 H8-G2 H8-G1; do
    tables=3  # results, comparison with the baseline, runs (two rows: one per seed)
    [ $variant = H1 ] && tables=2
    [ "$(grep -c "^| $variant |" "$report")" -eq $((tables + 1)) ] || fail "$variant: not in each table of $report"
    [ -f "$dir/out/$variant/seed-2/finished" ] || fail "$variant/seed-2 did not finish"
done
[ "$(grep -c '^- \*\*H.*\*\* vs H1: ' "$report")" -eq 5 ] || fail "not five verdict lines against H1"
results=$(sed -n '/^## Results/,/^## Against/p' "$report")
if grep -qi "nan\|inf\|n/a" <<< "$results"; then
    fail "non-finite or missing numbers in the results table"
fi
grep -q "2/2 |" <<< "$results" || fail "the seeds column does not say 2/2"
if command -v gnuplot > /dev/null; then
    [ -s "$dir/out/loss-curves.png" ] || fail "no loss-curves.png"
    [ -s "$dir/out/attention-H8.png" ] || fail "no attention-H8.png"
fi
cp "$report" "$dir/report-first.md"
"$program" --out "$dir/out" --replot --quiet
cmp "$report" "$dir/report-first.md" || fail "--replot wrote another report"
# A report it cannot rebuild is a failure of the run, not of the input (docs/spec.md, "Exit statuses"):
# exit 1, one line naming the file it could not read.
cp -r "$dir/out" "$dir/broken"
find "$dir/broken" -name model.safetensors -exec sh -c 'printf broken > "$1"' _ {} \;
status=0
"$program" --out "$dir/broken" --replot --quiet > "$dir/broken.out" 2> "$dir/broken.err" || status=$?
[ $status -eq 1 ] || fail "--replot over broken checkpoints: exit $status, not 1: $(cat "$dir/broken.err")"
[ "$(wc -l < "$dir/broken.err")" -eq 1 ] && grep -q "^xgrad-experiment: $dir/broken/.*/model.safetensors" \
    "$dir/broken.err" || fail "--replot over broken checkpoints: not one line naming one: $(cat "$dir/broken.err")"
# Budgets in tokens and seconds become steps: tokens / (B T) exactly; seconds by a timed probe.
tiny=(--data "$dir/text.txt" --axis heads=1,2 --seeds 1 --set d-model=16 --set block=16 --set batch=4 --dry-run)
"$program" "${tiny[@]}" --out "$dir/tokens" --tokens 650 > "$dir/tokens.txt"
[ "$(grep -c -- '--steps 11 ' "$dir/tokens.txt")" -eq 2 ] || fail "650 tokens at B T = 64 are not 11 steps each"
"$program" "${tiny[@]}" --out "$dir/seconds" --seconds 0.5 > "$dir/seconds.txt"
grep -q '"heads=2": [1-9][0-9]*' "$dir/seconds/steps.json" || fail "no steps chosen for 0.5 s: $(cat "$dir/seconds/steps.json")"
[ "$(grep -c -- '--steps [1-9][0-9]* ' "$dir/seconds.txt")" -eq 2 ] || fail "the dry run does not show two runs"
[ ! -e "$dir/seconds/.check" ] || fail "the probes' folder was left behind"
echo "experiment --quick: 12 runs, $(grep -c '^- \*\*' "$report") verdicts, --replot reproduces the report"
