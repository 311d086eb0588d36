#!/usr/bin/env bash
# xgrad-train --tokenizer bpe:N, then xgrad-sample through the checkpoint's tokenizer: a prompt it encodes
# is continued; a prompt with a character the tokenizer lacks is one line on stderr and exit status 2.
#   sample_tokenizer.sh XGRAD_TRAIN XGRAD_SAMPLE SCRATCH_DIR
set -euo pipefail
train=$1 sample=$2 dir=$3
rm -rf "$dir" && mkdir -p "$dir"
. "$(dirname "$0")/practice_text.sh"
practice_text 7 6000 "the cat sat on a mat and ran far away at night" "$dir/text.txt"
"$train" --data "$dir/text.txt" --out "$dir/run" --steps 3 --layers 1 --d-model 16 --heads 2 --block 16 \
    --batch 4 --tokenizer bpe:40 --quiet --no-plots --sample-tokens 0 >/dev/null
out=$("$sample" --checkpoint "$dir/run/model.safetensors" --prompt "the cat" --tokens 5)
case "$out" in "the cat"*) ;; *) echo "FAILED: sample does not continue the prompt: $out"; exit 1 ;; esac
status=0
"$sample" --checkpoint "$dir/run/model.safetensors" --prompt "the zebra" --tokens 5 >"$dir/out" 2>"$dir/err" || status=$?
if [ "$status" -ne 2 ] || [ "$(wc -l <"$dir/err")" -ne 1 ] || ! grep -q "byte 0x7a at position 4" "$dir/err" ||
    [ -s "$dir/out" ]; then
    echo "FAILED: unencodable prompt gave status $status, stderr: $(cat "$dir/err")"
    exit 1
fi
echo "sample_tokenizer: ok"
