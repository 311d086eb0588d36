#!/usr/bin/env bash
# xgrad-train's command line with the architecture variants, run as a user runs it: an unknown flag is
# named before a missing --data; a bad variant value (the later ones too: --qk-norm, --logit-softcap,
# --attention-window), an odd head width with RoPE, a bad --dropout and a
# --resume whose variant disagrees with the flags each exit 2 with one line naming the flag or key and
# write nothing; a variant run samples with xgrad-sample. Every failure of either program is one line
# "PROGRAM: ..." and the exit status docs/spec.md gives it. Usage: train_cli.sh TRAIN SAMPLE DIR
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

# expect_failure PROGRAM STATUS NAME NEEDLE ARGS...: exit STATUS, nothing on stdout, and on stderr exactly
# one line "PROGRAM: ..." holding NEEDLE (docs/spec.md, "Exit statuses").
expect_failure() {
    local program=$1 expected=$2 name=$3 needle=$4
    shift 4
    local status=0
    "$program" "$@" > "$dir/out.txt" 2> "$dir/err.txt" || status=$?
    [ "$status" -eq "$expected" ] || fail "$name: exit status $status, expected $expected"
    if [ -s "$dir/out.txt" ]; then fail "$name: printed on stdout: $(cat "$dir/out.txt")"; fi
    [ "$(wc -l < "$dir/err.txt")" -eq 1 ] || fail "$name: stderr is not one line: $(cat "$dir/err.txt")"
    grep -q "^$(basename "$program"): " "$dir/err.txt" || fail "$name: stderr does not start with the program's name"
    grep -qF -- "$needle" "$dir/err.txt" || fail "$name: stderr lacks '$needle': $(cat "$dir/err.txt")"
}
# expect_refusal NAME NEEDLE ARGS...: xgrad-train exits 2 (bad input) as expect_failure checks it.
expect_refusal() { expect_failure "$train" 2 "$@"; }
# expect_help PROGRAM: --help exits 0 with the usage on stdout and nothing on stderr.
expect_help() {
    local status=0
    "$1" --help > "$dir/out.txt" 2> "$dir/err.txt" || status=$?
    [ "$status" -eq 0 ] || fail "$1 --help: exit status $status"
    grep -q "^Usage: $(basename "$1")" "$dir/out.txt" || fail "$1 --help printed no usage: $(cat "$dir/out.txt")"
    if [ -s "$dir/err.txt" ]; then fail "$1 --help wrote on stderr: $(cat "$dir/err.txt")"; fi
}
model=(--layers 1 --d-model 16 --heads 2 --block 16 --batch 2 --sample-tokens 0 --no-plots --quiet)
common=(--data "$dir/text.txt" "${model[@]}")

expect_refusal "unknown flag" "--bogus" --bogus
grep -qF -- "--data" "$dir/err.txt" && fail "unknown flag: reported the missing --data instead"
expect_refusal "unknown norm" "--norm 'batchnorm' is not one of layernorm, rmsnorm" "${common[@]}" --out "$dir/a" --norm batchnorm
expect_refusal "unknown position" "--position 'alibi' is not one of learned, rope, none" "${common[@]}" --out "$dir/a" --position alibi
expect_refusal "unknown mlp" "--mlp 'relu' is not one of gelu_tanh, gelu, swiglu, relu2" "${common[@]}" --out "$dir/a" --mlp relu
expect_refusal "unknown qk_norm" "--qk-norm 'layer' is not one of none, rms" "${common[@]}" --out "$dir/a" --qk-norm layer
expect_refusal "negative cap" "--logit-softcap '-1' is not a decimal number >= 0 (0 off)" "${common[@]}" --out "$dir/a" \
    --logit-softcap -1
expect_refusal "non-numeric cap" "--logit-softcap 'big' is not a decimal number >= 0 (0 off)" "${common[@]}" \
    --out "$dir/a" --logit-softcap big
expect_refusal "negative window" "--attention-window '-2' is not a decimal integer >= 0 (0 off)" "${common[@]}" \
    --out "$dir/a" --attention-window -2
expect_refusal "fractional window" "--attention-window '2.5' is not a decimal integer >= 0 (0 off)" "${common[@]}" \
    --out "$dir/a" --attention-window 2.5
expect_refusal "unknown bias" "--bias 'some' is not one of mlp, all, none" "${common[@]}" --out "$dir/a" --bias some
expect_refusal "odd dh with RoPE" "position = rope needs an even head width" \
    --data "$dir/text.txt" --out "$dir/a" --d-model 6 --heads 2 --position rope --quiet
expect_refusal "bad dropout" "--dropout must be in [0, 1)" "${common[@]}" --out "$dir/a" --dropout 1.5
# Values that once failed only after the run had made its folder, or that CLI11 wrapped to 2^64 - 1.
expect_refusal "zero clip" "--clip must be a positive number" "${common[@]}" --out "$dir/a" --clip 0
expect_refusal "NaN clip" "--clip must be a positive number" "${common[@]}" --out "$dir/a" --clip nan
expect_refusal "no validation windows" "--eval-windows must be at least 1" "${common[@]}" --out "$dir/a" \
    --eval-windows 0
bare=(--data "$dir/text.txt" --layers 1 --d-model 16 --block 16 --no-plots --quiet)  # no --batch, --heads, --sample-tokens
expect_refusal "negative sample" "--sample-tokens: must be a count >= 0, got '-1'" "${bare[@]}" --out "$dir/a" \
    --sample-tokens -1
expect_refusal "endless sample" "--sample-tokens must be at most 1000000" "${bare[@]}" --out "$dir/a" \
    --sample-tokens 1000001
expect_refusal "negative batch" "--batch: must be a count >= 0, got '-1'" "${bare[@]}" --out "$dir/a" --batch -1
expect_refusal "steps past int64" "--steps: '18446744073709551616' is past the range of" "${common[@]}" \
    --out "$dir/a" --steps 18446744073709551616
expect_refusal "batch past uint64" "--batch: '18446744073709551616' is past the range of" "${bare[@]}" \
    --out "$dir/a" --batch 18446744073709551616
expect_refusal "warm-up of -1" "--warmup must be >= 0" "${common[@]}" --out "$dir/a" --warmup -1
expect_refusal "decay of -1" "--decay-steps >= 1" "${common[@]}" --out "$dir/a" --decay-steps -1
expect_refusal "negative heads" "--heads: must be a count >= 0, got '-2'" "${bare[@]}" --out "$dir/a" --heads -2
expect_refusal "negative sharpness period" "--sharpness-every: must be a count >= 0, got '-1'" "${common[@]}" \
    --out "$dir/a" --sharpness-every -1
expect_refusal "sharpness period past int64" "--sharpness-every: '9223372036854775808' is past the range of" \
    "${common[@]}" --out "$dir/a" --sharpness-every 9223372036854775808
expect_refusal "NaN rope base, learned positions" "rope_base must be a positive number" "${common[@]}" \
    --out "$dir/a" --rope-base nan
# Whose fault a failure is: 2 a value the library refuses (said as the flag), a run larger than the memory
# allowed, a malformed checkpoint; 1 a data file that is unreadable or too short, an --out it cannot make.
expect_refusal "a value the library refuses" "--steps" "${common[@]}" --out "$dir/a" --steps 0
expect_refusal "more memory than allowed" "--max-memory" "${common[@]}" --out "$dir/a" --max-memory 1K
mkdir -p "$dir/malformed" && printf 'not a checkpoint' > "$dir/malformed/model.safetensors"
expect_refusal "a malformed checkpoint" "$dir/malformed/model.safetensors" \
    "${common[@]}" --out "$dir/malformed" --resume
"$train" "${common[@]}" --out "$dir/stepless" --steps 1 || fail "a one-step run"
sed -i 's/"step":"1"/"step":"x"/' "$dir/stepless/model.safetensors"  # as long as before: a valid file
expect_refusal "a checkpoint without a valid step" 'has no valid "step" metadata' "${common[@]}" \
    --out "$dir/stepless" --steps 2 --resume
expect_failure "$train" 1 "unreadable data" "$dir/missing.txt" --data "$dir/missing.txt" "${model[@]}" --out "$dir/a"
printf 'tiny' > "$dir/short.txt"
expect_failure "$train" 1 "data shorter than a window" "$dir/short.txt" --data "$dir/short.txt" "${model[@]}" \
    --out "$dir/a"
[ -e "$dir/a" ] && fail "a refused run created its --out folder"
expect_failure "$train" 1 "an --out it cannot make" "$dir/text.txt/run" "${common[@]}" --out "$dir/text.txt/run"
expect_help "$train"

llama=(--norm rmsnorm --position rope --mlp swiglu --bias none --kv-heads 1 --dropout 0.1)
"$train" "${common[@]}" --out "$dir/llama" --steps 3 "${llama[@]}"
cp "$dir/llama/model.safetensors" "$dir/model.before"
cp "$dir/llama/log.csv" "$dir/log.before"
expect_refusal "resume, other norm" "was trained with --norm rmsnorm, not layernorm" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume --position rope --mlp swiglu --bias none --kv-heads 1
expect_refusal "resume, tied head" "was trained with tied_head = true, not false (--untied-head)" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" --untied-head
expect_refusal "resume, rope base" "was trained with --rope-base 10000, not 500" \
    "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" --rope-base 500
practice_text 5 300 "other words: 0123456789" "$dir/other.txt"  # bytes the checkpoint's vocabulary lacks
expect_failure "$train" 1 "resume, other data" "--resume" \
    --data "$dir/other.txt" "${model[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}"
expect_refusal "a new run refused in an old run's folder" "--clip" "${common[@]}" --out "$dir/llama" --clip 0
cmp -s "$dir/llama/model.safetensors" "$dir/model.before" || fail "a refused --resume changed the checkpoint"
cmp -s "$dir/llama/log.csv" "$dir/log.before" || fail "a refused --resume changed log.csv"
"$train" "${common[@]}" --out "$dir/llama" --steps 5 --resume "${llama[@]}" || fail "--resume with the same flags"
[ "$(wc -l < "$dir/llama/log.csv")" -eq 6 ] || fail "the resumed log has $(wc -l < "$dir/llama/log.csv") lines"
"$sample" --checkpoint "$dir/llama/model.safetensors" --tokens 20 --prompt "the " > "$dir/sample.txt" ||
    fail "xgrad-sample on a variant checkpoint"
expect_help "$sample"
# The later variants (docs/spec.md, "More architecture variants") train, resume only with the same flags, and
# sample (the window shorter than the context, so decoding drops keys).
speedrun=(--qk-norm rms --mlp relu2 --logit-softcap 30 --attention-window 4)
"$train" "${common[@]}" --out "$dir/speedrun" --steps 3 "${speedrun[@]}" || fail "training the later variants"
grep -q '"model_keys":"mlp,qk_norm,logit_softcap,attention_window"' "$dir/speedrun/model.safetensors" ||
    fail "the checkpoint does not name its later keys in model_keys"
expect_refusal "resume, other window" "was trained with --attention-window 4, not 0" \
    "${common[@]}" --out "$dir/speedrun" --steps 5 --resume --qk-norm rms --mlp relu2 --logit-softcap 30
"$sample" --checkpoint "$dir/speedrun/model.safetensors" --tokens 40 --prompt "the " > "$dir/sample.txt" ||
    fail "xgrad-sample on the later variants"
# The later variants' flags run the checkpoint's tensors as that variant (docs/spec.md); an --mlp of other
# tensors (GELU's two matrices for SwiGLU's three) is refused.
"$sample" --checkpoint "$dir/llama/model.safetensors" --tokens 5 --prompt "the " --attention-window 2 \
    --qk-norm rms --logit-softcap 30 > "$dir/sample.txt" || fail "sample with the later variants' flags"
expect_failure "$sample" 2 "sample, an MLP of other tensors" "mlp = gelu needs other tensors than the checkpoint's" \
    --checkpoint "$dir/llama/model.safetensors" --mlp gelu --prompt "the "
expect_failure "$sample" 2 "sample, a bad window" "--attention-window 'x' is not" \
    --checkpoint "$dir/llama/model.safetensors" --attention-window x
expect_failure "$sample" 2 "sample, unknown flag" "--bogus" --checkpoint "$dir/llama/model.safetensors" --bogus
expect_failure "$sample" 2 "sample, empty prompt" "--prompt" --checkpoint "$dir/llama/model.safetensors" --prompt ""
expect_failure "$sample" 2 "sample, malformed checkpoint" "$dir/malformed/model.safetensors" \
    --checkpoint "$dir/malformed/model.safetensors"

[ "$failures" -eq 0 ] && echo "train_cli: all checks passed"
exit "$failures"
