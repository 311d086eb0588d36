#!/usr/bin/env bash
# The Exercise 20.1 pipeline in seconds: heads_experiment --quick trains every variant for a few steps
# on a small generated text and must write its table (a row per variant, finite losses).
# Usage: heads_experiment_quick.sh HEADS_EXPERIMENT DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
program=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 3 2000 "many heads or one big head? each head attends on" "$dir/text.txt"
"$program" --quick --data "$dir/text.txt" --out "$dir/out" --threads 1 > "$dir/output.txt"
table="$dir/out/results.md"
for variant in H1 H2 H4 H8 H8-G2 H8-G1; do
    grep -q "^| $variant |" "$table" || { echo "no row for $variant in $table"; cat "$table"; exit 1; }
done
if grep -qi "nan\|inf" "$table"; then
    echo "non-finite numbers in $table"; cat "$table"; exit 1
fi
ls "$dir/out"/H8-G1-seed2/log.csv > /dev/null
echo "heads_experiment --quick: $(grep -c '^| H' "$table") variants in the table"
