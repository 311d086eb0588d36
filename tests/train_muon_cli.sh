#!/usr/bin/env bash
# xgrad-train --optimizer muon as a user runs it: a Muon run and its --resume; a bad --optimizer,
# --muon-lr or --muon-momentum, and a --resume across optimisers (both ways), each exit 2 with one line
# "xgrad-train: ..." naming the flags and leave every file as it was. Usage: train_muon_cli.sh TRAIN DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
train=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 3000 "muon orthogonalises the momentum of the matrices" "$dir/text.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
common=(--data "$dir/text.txt" --block 16 --layers 2 --d-model 16 --heads 2 --batch 4 --eval-every 4
        --eval-windows 8 --sample-tokens 0 --no-plots --quiet)

# refused NAME NEEDLE ARGS...: exit 2, nothing on stdout, one line "xgrad-train: ..." holding NEEDLE.
refused() {
    local name=$1 needle=$2
    shift 2
    local status=0
    "$train" "$@" > "$dir/out.txt" 2> "$dir/err.txt" || status=$?
    [ "$status" -eq 2 ] || fail "$name: exit status $status, expected 2"
    if [ -s "$dir/out.txt" ]; then fail "$name: printed on stdout: $(cat "$dir/out.txt")"; fi
    [ "$(wc -l < "$dir/err.txt")" -eq 1 ] || fail "$name: stderr is not one line: $(cat "$dir/err.txt")"
    grep -qF -- "xgrad-train: $needle" "$dir/err.txt" || fail "$name: stderr lacks '$needle': $(cat "$dir/err.txt")"
}
# A listing of a folder with every file's checksum: what "nothing written" compares.
snapshot() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }

"$train" "${common[@]}" --out "$dir/muon" --steps 4 --optimizer muon --muon-lr 0.03 --muon-momentum 0.9
"$train" "${common[@]}" --out "$dir/muon" --steps 6 --optimizer muon --muon-lr 0.03 --muon-momentum 0.9 --resume
[ "$(tail -n 1 "$dir/muon/log.csv" | cut -d, -f1)" = 6 ] || fail "the Muon run did not resume to step 6"
"$train" "${common[@]}" --out "$dir/adamw" --steps 2

refused "unknown optimizer" "--optimizer 'sgd' is not one of adamw, muon" "${common[@]}" --out "$dir/x" --steps 2 \
    --optimizer sgd
refused "zero Muon lr" "--muon-lr must be a positive number" "${common[@]}" --out "$dir/x" --steps 2 --muon-lr 0
refused "momentum 1" "--muon-momentum must be in [0, 1)" "${common[@]}" --out "$dir/x" --steps 2 --muon-momentum 1
[ ! -e "$dir/x" ] || fail "a refused run wrote $dir/x"

before_muon=$(snapshot "$dir/muon")
before_adamw=$(snapshot "$dir/adamw")
refused "muon checkpoint, adamw flag" "--resume: $dir/muon/model.safetensors was trained with --optimizer muon, not adamw" \
    "${common[@]}" --out "$dir/muon" --steps 8 --resume
refused "adamw checkpoint, muon flag" "--resume: $dir/adamw/model.safetensors was trained with --optimizer adamw, not muon" \
    "${common[@]}" --out "$dir/adamw" --steps 8 --resume --optimizer muon
[ "$(snapshot "$dir/muon")" = "$before_muon" ] || fail "the refused resume changed $dir/muon"
[ "$(snapshot "$dir/adamw")" = "$before_adamw" ] || fail "the refused resume changed $dir/adamw"

[ $failures -eq 0 ] || exit 1
echo "train muon cli: a Muon run resumed; 5 refusals, each one line and exit 2, nothing written"
