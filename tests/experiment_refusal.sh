#!/usr/bin/env bash
# xgrad-experiment refuses a bad spec before any run starts, with one line on stderr naming the problem
# and exit status 2: an xgrad-train flag that does not exist or a value it rejects (xgrad-train itself
# judges every variant's flags), and the spec's own mistakes. --help exits 0 with the usage on stdout.
# Usage: experiment_refusal.sh XGRAD_EXPERIMENT SPEC_DIR DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
program=$1
dir=$3
rm -rf "$dir" && mkdir -p "$dir"
practice_text 7 2000 "no run starts from a bad spec" "$dir/text.txt"
tiny=(--data "$dir/text.txt" --seeds 2 --steps 5 --set d-model=16 --set block=16 --set batch=4)
case_number=0

# refused EXPECTED_TEXT ARGS...: exit 2, one line naming EXPECTED_TEXT, no run folder written.
refused() {
    local expected=$1
    shift
    case_number=$((case_number + 1))
    local out="${out_folder:-$dir/out$case_number}" status=0
    "$program" --out "$out" "$@" > "$dir/stdout" 2> "$dir/stderr" || status=$?
    [ $status -eq 2 ] || { echo "case $case_number ($*): exit $status, not 2"; cat "$dir/stderr"; exit 1; }
    [ "$(wc -l < "$dir/stderr")" -eq 1 ] || { echo "case $case_number: not one line:"; cat "$dir/stderr"; exit 1; }
    grep -qF -- "$expected" "$dir/stderr" || { echo "case $case_number: no \"$expected\" in:"; cat "$dir/stderr"; exit 1; }
    if [ -d "$out" ] && find "$out" -name 'seed-*' | grep -q .; then
        echo "case $case_number: a run folder was created"; exit 1
    fi
    if [ -z "${out_folder:-}" ] && [ -e "$out" ]; then  # nor anything else: not even the check's .check/
        echo "case $case_number: --out was left behind:"; find "$out"; exit 1
    fi
}

status=0
"$program" --help > "$dir/stdout" 2> "$dir/stderr" || status=$?
[ $status -eq 0 ] && grep -q "^Usage: xgrad-experiment" "$dir/stdout" && [ ! -s "$dir/stderr" ] ||
    { echo "--help: exit $status, or no usage on stdout, or a line on stderr"; cat "$dir/stderr"; exit 1; }
refused "--bogus" "${tiny[@]}" --axis heads=1,2 --set bogus=1
refused "variant wide" "${tiny[@]}" --variant narrow:heads=2 --variant wide:heads=2,mlp-widht=3
refused "variant H3" "${tiny[@]}" --variant H1:heads=1 --variant H3:heads=3   # d % H != 0
refused "--heads" "${tiny[@]}" --axis heads=1,many
refused "--lr" "${tiny[@]}" --set lr=-1
refused "--steps is set by the runner" "${tiny[@]}" --set steps=3
refused "--seed is set by the runner" "${tiny[@]}" --axis seed=1,2
refused "baseline \"H9\"" "${tiny[@]}" --axis heads=1,2 --baseline H9
refused "no \"budget\"" --data "$dir/text.txt" --seeds 2
refused "no \"seeds\"" --data "$dir/text.txt" --steps 5
refused "no \"data\"" --seeds 2 --steps 5
refused "one of --steps, --tokens, --seconds" "${tiny[@]}" --tokens 100
refused "cannot read" --spec "$dir/missing.json" "${tiny[@]}"
echo '{"data": "x", "seed": 3}' > "$dir/typo.json"
refused "unknown key \"seed\"" --spec "$dir/typo.json" --steps 5
echo '{"data": "x", "fixed": {' > "$dir/broken.json"
refused "not valid JSON" --spec "$dir/broken.json"
echo '{"data": "x", "seeds": 2, "budget": {"epochs": 3}}' > "$dir/unit.json"
refused "unknown unit \"epochs\"" --spec "$dir/unit.json"
echo '{"seeds": [1, 1]}' > "$dir/twice.json"
refused "lists a seed twice" --spec "$dir/twice.json" --data "$dir/text.txt" --steps 5
refused "two variants are named" "${tiny[@]}" --variant a:heads=1 --variant a:heads=2
refused "cannot read $dir/missing.txt" --data "$dir/missing.txt" --seeds 1 --steps 5
refused "--jobs" "${tiny[@]}" --jobs 0
refused "--jobs: Value 100000 not in range 1 to 1024" "${tiny[@]}" --jobs 100000
refused "--threads: Value 100000 not in range 1 to 1024" "${tiny[@]}" --threads 100000
refused "--steps" --data "$dir/text.txt" --seeds 2 --steps -4
# Hostile specs (tests/hostile/ has more): bounded files, nesting, counts and budgets; names kept in --out.
refused "is a directory, not a file" --spec "$dir" "${tiny[@]}"
refused "is not a regular file" --spec /dev/zero "${tiny[@]}"
{ printf '{"data": "x", "seeds": '; head -c 200000 /dev/zero | tr '\0' '['; head -c 200000 /dev/zero | tr '\0' ']'
  printf '}'; } > "$dir/deep.json"  # valid JSON: its error message once recursed until the stack overflowed
refused "JSON nested more than 64 levels deep (the limit)" --spec "$dir/deep.json"
refused "1000000000000 seeds; at most 10000 (the limit)" --data "$dir/text.txt" --seeds 1000000000000 --steps 5
hundred=$(seq -s, 1 100)
refused "more than 10000 variants (the limit)" "${tiny[@]}" --axis a=$hundred --axis b=$hundred --axis c=$hundred \
    --axis d=$hundred --axis e=$hundred --axis f=$hundred
refused "more than 100000 runs (the limit)" --data "$dir/text.txt" --seeds 10000 --steps 5 --axis heads=1,2,4,8,16,32,64,128,256,512,1024
for name in .. . a/b; do
    echo "{\"data\": \"x\", \"seeds\": 1, \"budget\": {\"steps\": 1}, \"variants\": [{\"name\": \"$name\"}]}" \
        > "$dir/name.json"
    refused "outside --out" --spec "$dir/name.json"
done
for name in report.md loss-curves.png curves grid.json steps.json report.md.tmp; do  # the runner's own files
    echo "{\"data\": \"x\", \"seeds\": 1, \"budget\": {\"steps\": 1}, \"variants\": [{\"name\": \"$name\"}]}" \
        > "$dir/name.json"
    refused "would take the name of the runner's own" --spec "$dir/name.json"
done
for name in .check .lock .hidden; do
    echo "{\"data\": \"x\", \"seeds\": 1, \"budget\": {\"steps\": 1}, \"variants\": [{\"name\": \"$name\"}]}" \
        > "$dir/name.json"
    refused "would be a hidden folder in --out" --spec "$dir/name.json"
done
for budget in '"steps": 1e300' '"steps": 0.4' '"tokens": 1e300' '"steps": -3' '"seconds": 1e300'; do
    echo "{\"data\": \"x\", \"seeds\": 1, \"budget\": {$budget}}" > "$dir/budget.json"
    refused "budget: " --spec "$dir/budget.json"
done
echo '{"data": "x", "seeds": 1, "budget": {"steps": 1}, "baseline": 5}' > "$dir/baseline.json"
refused "$dir/baseline.json: spec: \"baseline\" must be a variant's name (a string), got '5'" --spec "$dir/baseline.json"
echo '{"data": "x", "seeds": 1, "budget": {"steps": 1}, "fixed": 5}' > "$dir/fixed.json"
refused "\"fixed\" must be an object, got '5'" --spec "$dir/fixed.json" --set lr=1
mkdir -p "$dir/replot"
out_folder="$dir/replot"
refused "$dir/replot/grid.json: cannot read" --replot
echo '{"data": "x", "seeds": 1, "budget": {"steps": 1}, "variants": [{"name": "a"}]}' > "$dir/replot/grid.json"
echo '{"b": 3}' > "$dir/replot/steps.json"
refused "name no variant \"a\"" --replot
echo '{"a": "three"}' > "$dir/replot/steps.json"
refused "steps.json: \"a\" must be a whole number of steps from 1, got '\"three\"'" --replot
unset out_folder
echo "experiment refusal: $case_number bad specs refused before any run"
