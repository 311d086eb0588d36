#!/usr/bin/env bash
# Runs every tool on every hostile file of tests/hostile/ (made by make_hostile.py): checkpoints, GPT and
# MHA inputs, GPT-2 and llama2.c folders, experiment specs and xgrad-sample's flags; and watches each
# process: its resident memory (VmRSS, polled from /proc) must stay under 1 GiB and it must end within a
# few seconds, else it is killed and the case fails. A hostile case must then exit with status 2, one
# line on stderr and no output files; a valid_* case must succeed (outcomes.txt lists the exceptions).
# Prints one line per run with the peak resident memory seen and the time taken.
#
#   replay.sh BIN_DIR WORK_DIR [CASE_FILTER]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
work=$2
filter=${3:-}
limit_kib=$((1024 * 1024))
limit_ms=${XGRAD_HOSTILE_TIMEOUT_MS:-5000}
failures=0
runs=0
rm -rf "$work" && mkdir -p "$work"

# The clock, the memory reading and the pause of the polling loop are bash builtins that set variables:
# a fork per poll (date, awk, sleep, a command substitution) cost this script most of its time.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; ms=$((t / 1000)); }
read_resident_kib() {
    local key value rest
    rss=""
    { while read -r key value rest; do
        if [ "$key" = "VmRSS:" ]; then rss=$value; return; fi
    done <"/proc/$1/status"; } 2>/dev/null
}
exec {pause_fd}<> <(:)
pause() { read -r -t 0.01 -u "$pause_fd" _ || true; }

# watch NAME EXPECTED OUTDIR CMD...: runs CMD, polls its memory, checks its status, stderr and outputs.
watch() {
    local name=$1 expected=$2 out=$3
    shift 3
    local err="$work/stderr" peak=0 start killed="" rss status ms
    now_ms
    start=$ms
    "$@" >/dev/null 2>"$err" &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
        read_resident_kib "$pid"
        if [ -n "$rss" ] && [ "$rss" -gt "$peak" ]; then peak=$rss; fi
        if [ "$peak" -gt "$limit_kib" ]; then killed="resident memory past 1 GiB"; fi
        now_ms
        if [ $((ms - start)) -gt "$limit_ms" ]; then killed="still running after ${limit_ms} ms"; fi
        if [ -n "$killed" ]; then kill -9 "$pid" 2>/dev/null; break; fi
        pause
    done
    wait "$pid"
    status=$?
    now_ms
    local elapsed=$((ms - start)) lines problem=""
    lines=$(wc -l <"$err")
    if [ -n "$killed" ]; then
        problem="killed: $killed"
    elif [ "$expected" = x ]; then
        [ "$status" -lt 128 ] || problem="died with status $status"
    elif [ "$status" -ne "$expected" ]; then
        problem="exit status $status, expected $expected"
    elif [ "$expected" -ne 0 ] && [ "$lines" -ne 1 ]; then
        problem="$lines lines on stderr, expected 1"
    elif tr -d '\n' <"$err" | LC_ALL=C grep -qa '[[:cntrl:]]'; then
        problem="a control byte on stderr (a message must escape what it quotes)"
    elif [ "$(wc -c <"$err")" -gt 4096 ]; then
        problem="a message of $(wc -c <"$err") bytes (at most 4096)"
    elif [ "$expected" -ne 0 ] && [ -n "$out" ] && [ -n "$(ls -A "$out" 2>/dev/null)" ]; then
        problem="left files in its output folder: $(ls -A "$out" | tr '\n' ' ')"
    fi
    runs=$((runs + 1))
    printf '%-6s %-44s %7d KiB %6d ms  %s\n' "$([ -z "$problem" ] && echo ok || echo FAIL)" "$name" "$peak" \
        "$elapsed" "$(head -c 160 "$err" | head -1)"
    if [ -n "$problem" ]; then
        failures=$((failures + 1))
        echo "       $problem" >&2
    fi
}

# expect_for CASE TOOL: the exit status the case must give (outcomes.txt, else valid_* 0 and others 2).
expect_for() {
    local listed
    listed=$(awk -v c="$1" -v t="$2" '$1 == c && $2 == t { print $3 }' "$here/outcomes.txt")
    if [ -n "$listed" ]; then echo "$listed"; else case "$1" in valid_*) echo 0 ;; *) echo 2 ;; esac; fi
}
selected() { [ -z "$filter" ] || [[ "$1" == *$filter* ]]; }

for file in "$here"/checkpoints/*.safetensors; do
    name=$(basename "$file" .safetensors)
    selected "$name" || continue
    out="$work/out"
    rm -rf "$out"
    watch "gpt-npy  $name" "$(expect_for "$name" gpt-npy)" "$out" \
        "$bin/xgrad-gpt-npy" --checkpoint "$file" --in "$here/gpt_in/valid_base" --out "$out"
    case "$name" in valid_gpt_*) continue ;; esac
    watch "sample   $name" "$(expect_for "$name" sample)" "" \
        "$bin/xgrad-sample" --checkpoint "$file" --prompt "ab" --tokens 3
    run="$work/run"
    rm -rf "$run" && mkdir -p "$run" && cp "$file" "$run/model.safetensors"
    expected=$(expect_for "$name" resume)
    watch "resume   $name" "$expected" "" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$run" --resume --steps 2 --layers 1 --d-model 4 \
        --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet
    if [ "$expected" = 2 ] && { ! cmp -s "$file" "$run/model.safetensors" || [ -e "$run/log.csv" ]; }; then
        failures=$((failures + 1))
        echo "       resume $name changed its folder" >&2
    fi
done

for dir in "$here"/gpt_in/*/; do
    name=$(basename "$dir")
    selected "$name" || continue
    checkpoint="$here/checkpoints/valid_base.safetensors"
    [ -f "$dir/checkpoint" ] && checkpoint="$here/checkpoints/$(cat "$dir/checkpoint").safetensors"
    out="$work/out"
    rm -rf "$out"
    watch "gpt-npy  in/$name" "$(expect_for "$name" gpt-npy)" "$out" \
        "$bin/xgrad-gpt-npy" --checkpoint "$checkpoint" --in "$dir" --out "$out"
done

for dir in "$here"/mha_in/*/; do
    name=$(basename "$dir")
    selected "$name" || continue
    args=(--heads 1)
    [ -f "$dir/args" ] && read -r -a args <"$dir/args"
    out="$work/out"
    rm -rf "$out"
    watch "mha-npy  in/$name" "$(expect_for "$name" mha-npy)" "$out" \
        "$bin/xgrad-mha-npy" --in "$dir" --out "$out" "${args[@]}"
done

# GPT-2's tokenizer files: beside a valid model of the valid files' size as a Hugging Face folder (made
# here from checkpoints/valid_gpt_gpt2_vocab), and as xgrad-train --tokenizer gpt2:DIR. A huge, sparse
# vocab.json is made here too (the repository keeps small files).
hf_base="$work/hf_base"
if ! "$bin/xgrad-convert" --from xgrad --to hf-gpt2 "$here/checkpoints/valid_gpt_gpt2_vocab.safetensors" \
    "$hf_base" >/dev/null; then
    echo "cannot make the Hugging Face folder for tokenizer_in/" >&2
    failures=$((failures + 1))
fi
mkdir -p "$work/tokenizer_in" && cp -r "$here/tokenizer_in/." "$work/tokenizer_in/"
mkdir -p "$work/tokenizer_in/vocab_huge_sparse"
cp "$here/tokenizer_in/valid_gpt2/merges.txt" "$work/tokenizer_in/vocab_huge_sparse/"
truncate -s 20G "$work/tokenizer_in/vocab_huge_sparse/vocab.json"
for dir in "$work"/tokenizer_in/*/; do
    name=$(basename "$dir")
    selected "$name" || continue
    folder="$work/hf"
    rm -rf "$folder" && cp -r "$hf_base" "$folder" && cp "$dir"* "$folder/"
    out="$work/out"
    rm -rf "$out" && mkdir -p "$out"
    watch "convert  tokenizer_in/$name" "$(expect_for "$name" convert)" "$out" \
        "$bin/xgrad-convert" --from hf-gpt2 --to xgrad "$folder" "$out/model.safetensors"
    run="$work/run"
    rm -rf "$run"
    watch "train    tokenizer_in/$name" "$(expect_for "$name" train)" "$run" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$run" --tokenizer "gpt2:$dir" --steps 1 --layers 1 \
        --d-model 4 --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet
done

# xgrad-convert on GPT-2 and llama2.c folders: a fixture of tests/data/convert_fixtures/ with the case's
# files put over it (config.json, model.safetensors with a tokenizer model, tokenizer.model).
fixtures="$here/../data/convert_fixtures"
for dir in "$here"/convert/*/; do
    name=$(basename "$dir")
    selected "$name" || continue
    folder="$work/convert_in"
    rm -rf "$folder" "$work/converted" && cp -r "$fixtures/$(cat "$dir/base")" "$folder"
    for entry in "$dir"*; do
        case "$(basename "$entry")" in base | format) continue ;; esac
        rm -rf "${folder:?}/$(basename "$entry")" && cp -r "$entry" "$folder/"
    done
    watch "convert  $name" "$(expect_for "$name" convert)" "" \
        "$bin/xgrad-convert" --from "$(cat "$dir/format")" --to xgrad "$folder" "$work/converted"
    if [ -e "$work/converted" ] && [ "$(expect_for "$name" convert)" != 0 ]; then
        failures=$((failures + 1))
        echo "       convert $name left its output" >&2
    fi
done

# xgrad-experiment on grid specs, planning only (--dry-run): nothing may be run or written outside --out.
for file in "$here"/specs/*.json; do
    name=$(basename "$file" .json)
    selected "$name" || continue
    out="$work/grid"
    rm -rf "$out"
    watch "grid     $name" "$(expect_for "$name" experiment)" "" \
        "$bin/xgrad-experiment" --spec "$file" --data "$here/text.txt" --out "$out" --dry-run --quiet \
        --xgrad-train "$bin/xgrad-train"
    if [ -n "$(ls -A "$work" | grep -v -x -e grid -e stderr -e convert_in -e converted -e out -e run -e hf -e hf_base -e tokenizer_in)" ]; then
        failures=$((failures + 1))
        echo "       grid $name wrote outside --out: $(ls -A "$work" | tr '\n' ' ')" >&2
    fi
done

# xgrad-sample's flags, on the valid checkpoint.
while read -r name flags; do
    case "$name" in '#'* | '') continue ;; esac
    selected "$name" || continue
    read -r -a extra <<<"$flags"
    checkpoint=(--checkpoint "$here/checkpoints/valid_base.safetensors")
    [[ "$flags" == *--checkpoint* ]] && checkpoint=()
    watch "sample   flags/$name" "$(expect_for "$name" sample)" "" \
        "$bin/xgrad-sample" "${checkpoint[@]}" --prompt ab "${extra[@]}"
done <"$here/sample_flags.txt"

# xgrad-train's flags, on a tiny run.
while read -r name flags; do
    case "$name" in '#'* | '') continue ;; esac
    selected "$name" || continue
    read -r -a extra <<<"$flags"
    rm -rf "$work/train"
    watch "train    flags/$name" "$(expect_for "$name" train)" "" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$work/train" --steps 1 --layers 1 --d-model 4 \
        --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet "${extra[@]}"
done <"$here/train_flags.txt"

echo "hostile files: $runs runs, $failures failed"
[ "$failures" -eq 0 ]
