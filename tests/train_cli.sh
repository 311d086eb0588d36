#!/usr/bin/env bash
# xgrad-train's command line with the architecture variants, run as a user runs it: an unknown flag is
# named before a missing --data; a bad variant value, an odd head width with RoPE, a bad --dropout and a
# --resume whose variant disagrees with the flags each exit 2 with one line naming the flag or key and
# write nothing; a variant run samples with xgrad-sample. Usage: train_cli.sh TRAIN SAMPLE DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
train=$1
sample=$2
dir=$3
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 3000 "the variants of a small model learn the same text." "$dir/text.txt"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_refusal NAME NEEDLE ARGS...: exit 2, exactly one line on stderr holding NEEDLE, no --out folder.
expect_refusal() {
    local name=$1 needle=$2
    shift 2
    local status=0
    "$train" "$@" > "$dir/out.txt" 2> "$dir/err.txt" || status=$?
    [ "$status" -eq 2 ] || fail "$name: exit status $status, expected 2"
    [ "$(wc -l < "$dir/err.txt")" -eq 1 ] || fail "$name: stderr is not one line: $(cat "$dir/err.txt")"
    grep -qF -- "$needle" "$dir/err.txt" || fail "$name: stderr lacks '$needle': $(cat "$dir/err.txt")"
}
common=(--data "$dir/text.txt" --layers 1 --d-model 16 --heads 2 --block 16 --batch 2
        --sample-tokens 0 --no-plots --quiet)

expect_refusal "unknown flag" "--bogus" --bogus
grep -qF -- "--data" "$dir/err.txt" && fail "unknown flag: reported the missing --data instead"
expect_refusal "unknown norm" "--norm 'batchnorm' is not one of layernorm, rmsnorm" "${common[@]}" --out "$dir/a" --norm batchnorm
expect_refusal "unknown position" "--position 'alibi' is not one of learned, rope, none" "${common[@]}" --out "$dir/a" --position alibi
expect_refusal "unknown mlp" "--mlp 'relu' is not one of gelu_tanh, gelu, swiglu" "${common[@]}" --out "$dir/a" --mlp relu
expect_refusal "unknown bias" "--bias 'some' is not one of mlp, all, none" "${common[@]}" --out "$dir/a" --bias some
expect_refusal "odd dh with RoPE" "position = rope needs an even head width" \
    --data "$dir/text.txt" --out "$dir/a" --d-model 6 --heads 2 --position rope --quiet
expect_refusal "bad dropout" "--dropout must be in [0, 1)" "${common[@]}" --out "$dir/a" --dropout 1.5
[ -e "$dir/a" ] && fail "a refused run created its --out folder"

llama=(--norm rmsnorm --position rope --mlp swiglu --bias none --kv-heads 1 --dropout 0.1)
"$train" "${common[@]}" --out "$dir/llama" --steps 3 "${llama[@]}"
cp "$dir/llama/model.safetensors" "$dir/model.before"
cp "$dir/llama/log.csv" "$dir/log.before"
expect_refusal "resume, other norm" "was trained with --norm rmsnorm, not layernorm" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume --position rope --mlp swiglu --bias none --kv-heads 1
expect_refusal "resume, tied head" "was trained with a tied head, not an untied head (--untied-head)" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" --untied-head
expect_refusal "resume, rope base" "was trained with --rope-base 10000, not 500" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" --rope-base 500
cmp -s "$dir/llama/model.safetensors" "$dir/model.before" || fail "a refused --resume changed the checkpoint"
cmp -s "$dir/llama/log.csv" "$dir/log.before" || fail "a refused --resume changed log.csv"
"$train" "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" || fail "--resume with the same flags"
[ "$(wc -l < "$dir/llama/log.csv")" -eq 6 ] || fail "the resumed log has $(wc -l < "$dir/llama/log.csv") lines"
"$sample" --checkpoint "$dir/llama/model.safetensors" --tokens 20 --prompt "the " > "$dir/sample.txt" ||
    fail "xgrad-sample on a variant checkpoint"

[ "$failures" -eq 0 ] && echo "train_cli: all checks passed"
exit "$failures"
