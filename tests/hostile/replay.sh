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

# Every check is a bash builtin that sets a variable: the clock, the memory reading, the pause of the
# polling loop, the reading of a message and of a folder. A fork costs 14 to 30 ms on a virtual machine
# whose page faults are slow (docs/performance.md, "The build"): forks per case were most of this
# script's time, so the only processes left are the tools and the copies the cases need.
now_ms() { local t=${EPOCHREALTIME/[.,]/}; ms=$((t / 1000)); }
# The file is read to its end: bash's read buffers what it took from a file that cannot seek back (/proc),
# and a loop left early would hand the rest to the next read from standard input (read_message's).
read_resident_kib() {
    local key value rest
    rss=""
    { while read -r key value rest; do
        if [ "$key" = "VmRSS:" ]; then rss=$value; fi
    done <"/proc/$1/status"; } 2>/dev/null
}
# shellcheck source=../poll.sh
source "$here/../poll.sh"
shopt -s nullglob dotglob
# entries PATH: sets `entries` to the names in the folder PATH; to PATH's own name when it is a file (a
# tool that writes its output folder as a file left a file too); to none when PATH does not exist.
entries() {
    if [ -e "$1" ] && [ ! -d "$1" ]; then
        entries=("${1##*/}")
        return
    fi
    entries=("$1"/*)
    entries=("${entries[@]##*/}")
}

# read_message FILE: sets `message` to FILE's bytes up to its first NUL byte, at most 4097 of them,
# `message_bytes` to their count, `message_lines` to the number of newlines among them and
# `message_control` to 1 when they hold a control byte other than a newline or stop at a NUL byte.
read_message() {
    local LC_ALL=C newlines
    message="" message_control=0
    # Status 0: a NUL byte ended the read (a control byte), or 4097 bytes did (a message too long, which
    # watch reports first).
    IFS= read -r -n 4097 -d '' message <"$1" && message_control=1
    message_bytes=${#message}
    newlines=${message//[!$'\n']/}
    message_lines=${#newlines}
    [[ ${message//$'\n'/} == *[[:cntrl:]]* ]] && message_control=1
}

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
        pause 0.01
    done
    wait "$pid"
    status=$?
    now_ms
    local elapsed=$((ms - start)) problem="" verdict=ok first_line
    read_message "$err"
    entries=()
    [ -z "$out" ] || entries "$out"
    if [ -n "$killed" ]; then
        problem="killed: $killed"
    elif [ "$expected" = x ]; then
        [ "$status" -lt 128 ] || problem="died with status $status"
    elif [ "$status" -ne "$expected" ]; then
        problem="exit status $status, expected $expected"
    elif [ "$message_bytes" -gt 4096 ]; then
        problem="a message of more than 4096 bytes"
    elif [ "$message_control" = 1 ]; then
        problem="a control byte on stderr (a message must escape what it quotes)"
    elif [ "$expected" -ne 0 ] && [ "$message_lines" -ne 1 ]; then
        problem="$message_lines lines on stderr, expected 1"
    elif [ "$expected" -ne 0 ] && [ -n "$out" ] && ((${#entries[@]})); then
        problem="left files in its output folder: ${entries[*]}"
    fi
    runs=$((runs + 1))
    [ -z "$problem" ] || verdict=FAIL
    first_line=${message%%$'\n'*}
    printf '%-6s %-44s %7d KiB %6d ms  %s\n' "$verdict" "$name" "$peak" "$elapsed" "${first_line:0:160}"
    if [ -n "$problem" ]; then
        failures=$((failures + 1))
        echo "       $problem" >&2
    fi
}

# The exit status a case must give: outcomes.txt's exceptions, else 0 for valid_* and 2 for the others.
declare -A listed_outcome
while read -r case_name tool status; do
    case "$case_name" in '#'* | '') continue ;; esac
    listed_outcome["$case_name $tool"]=$status
done <"$here/outcomes.txt"
# expect_for CASE TOOL: sets `expected`.
expect_for() {
    expected=${listed_outcome["$1 $2"]:-}
    [ -n "$expected" ] && return
    case "$1" in valid_*) expected=0 ;; *) expected=2 ;; esac
}
# fresh DIR: DIR absent (rm only when there is something to remove: it is a process).
fresh() { if [ -e "$1" ] || [ -L "$1" ]; then rm -rf "$1"; fi; }
selected() { [ -z "$filter" ] || [[ "$1" == *$filter* ]]; }
# A fixture folder gone missing would drop its cases silently: each must hold some.
for kind in checkpoints gpt_in mha_in tokenizer_in convert specs; do
    entries "$here/$kind"
    if ((${#entries[@]} == 0)); then
        failures=$((failures + 1))
        echo "       no cases in $here/$kind" >&2
    fi
done
for list in outcomes.txt sample_flags.txt train_flags.txt; do
    [ -s "$here/$list" ] || { failures=$((failures + 1)); echo "       $here/$list is missing or empty" >&2; }
done

for file in "$here"/checkpoints/*.safetensors; do
    name=${file##*/}
    name=${name%.safetensors}
    selected "$name" || continue
    out="$work/out"
    fresh "$out"
    expect_for "$name" gpt-npy
    watch "gpt-npy  $name" "$expected" "$out" \
        "$bin/xgrad-gpt-npy" --checkpoint "$file" --in "$here/gpt_in/valid_base" --out "$out"
    case "$name" in valid_gpt_*) continue ;; esac
    expect_for "$name" sample
    watch "sample   $name" "$expected" "" \
        "$bin/xgrad-sample" --checkpoint "$file" --prompt "ab" --tokens 3
    run="$work/run"
    fresh "$run"
    mkdir "$run" && cp "$file" "$run/model.safetensors"
    expect_for "$name" resume
    watch "resume   $name" "$expected" "" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$run" --resume --steps 2 --layers 1 --d-model 4 \
        --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet
    if [ "$expected" = 2 ] && { [ -e "$run/log.csv" ] || ! cmp -s "$file" "$run/model.safetensors"; }; then
        failures=$((failures + 1))
        echo "       resume $name changed its folder" >&2
    fi
done

for dir in "$here"/gpt_in/*/; do
    name=${dir%/}
    name=${name##*/}
    selected "$name" || continue
    checkpoint="$here/checkpoints/valid_base.safetensors"
    if [ -f "$dir/checkpoint" ]; then
        read -r base <"$dir/checkpoint"
        checkpoint="$here/checkpoints/$base.safetensors"
    fi
    out="$work/out"
    fresh "$out"
    expect_for "$name" gpt-npy
    watch "gpt-npy  in/$name" "$expected" "$out" \
        "$bin/xgrad-gpt-npy" --checkpoint "$checkpoint" --in "$dir" --out "$out"
done

for dir in "$here"/mha_in/*/; do
    name=${dir%/}
    name=${name##*/}
    selected "$name" || continue
    args=(--heads 1)
    [ -f "$dir/args" ] && read -r -a args <"$dir/args"
    out="$work/out"
    fresh "$out"
    expect_for "$name" mha-npy
    watch "mha-npy  in/$name" "$expected" "$out" \
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
    name=${dir%/}
    name=${name##*/}
    selected "$name" || continue
    folder="$work/hf"
    fresh "$folder"
    cp -r "$hf_base" "$folder" && cp "$dir"* "$folder/"
    out="$work/out"
    fresh "$out"
    mkdir "$out"
    expect_for "$name" convert
    watch "convert  tokenizer_in/$name" "$expected" "$out" \
        "$bin/xgrad-convert" --from hf-gpt2 --to xgrad "$folder" "$out/model.safetensors"
    run="$work/run"
    fresh "$run"
    expect_for "$name" train
    watch "train    tokenizer_in/$name" "$expected" "$run" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$run" --tokenizer "gpt2:$dir" --steps 1 --layers 1 \
        --d-model 4 --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet
done

# xgrad-convert on GPT-2 and llama2.c folders: a fixture of tests/data/convert_fixtures/ with the case's
# files put over it (config.json, model.safetensors with a tokenizer model, tokenizer.model).
fixtures="$here/../data/convert_fixtures"
for dir in "$here"/convert/*/; do
    name=${dir%/}
    name=${name##*/}
    selected "$name" || continue
    folder="$work/convert_in"
    fresh "$folder"
    fresh "$work/converted"
    base="" format=""
    read -r base <"$dir/base"
    read -r format <"$dir/format"
    if [ -z "$base" ] || [ -z "$format" ]; then
        failures=$((failures + 1))
        echo "       convert $name: its base or format file is missing or empty" >&2
        continue
    fi
    cp -r "$fixtures/$base" "$folder"
    for entry in "$dir"*; do
        entry_name=${entry##*/}
        case "$entry_name" in base | format) continue ;; esac
        fresh "$folder/$entry_name"
        cp -r "$entry" "$folder/"
    done
    expect_for "$name" convert
    watch "convert  $name" "$expected" "" \
        "$bin/xgrad-convert" --from "$format" --to xgrad "$folder" "$work/converted"
    if [ -e "$work/converted" ] && [ "$expected" != 0 ]; then
        failures=$((failures + 1))
        echo "       convert $name left its output" >&2
    fi
done

# xgrad-experiment on grid specs, planning only (--dry-run): nothing may be run or written outside --out.
for file in "$here"/specs/*.json; do
    name=${file##*/}
    name=${name%.json}
    selected "$name" || continue
    out="$work/grid"
    fresh "$out"
    expect_for "$name" experiment
    watch "grid     $name" "$expected" "" \
        "$bin/xgrad-experiment" --spec "$file" --data "$here/text.txt" --out "$out" --dry-run --quiet \
        --xgrad-train "$bin/xgrad-train"
    entries "$work"
    for entry in "${entries[@]}"; do
        case "$entry" in grid | stderr | convert_in | converted | out | run | hf | hf_base | tokenizer_in) ;;
        *)
            failures=$((failures + 1))
            echo "       grid $name wrote outside --out: ${entries[*]}" >&2
            break
            ;;
        esac
    done
done

# xgrad-sample's flags, on the valid checkpoint.
while read -r name flags; do
    case "$name" in '#'* | '') continue ;; esac
    selected "$name" || continue
    read -r -a extra <<<"$flags"
    checkpoint=(--checkpoint "$here/checkpoints/valid_base.safetensors")
    [[ "$flags" == *--checkpoint* ]] && checkpoint=()
    expect_for "$name" sample
    watch "sample   flags/$name" "$expected" "" \
        "$bin/xgrad-sample" "${checkpoint[@]}" --prompt ab "${extra[@]}"
done <"$here/sample_flags.txt"

# xgrad-train's flags, on a tiny run.
while read -r name flags; do
    case "$name" in '#'* | '') continue ;; esac
    selected "$name" || continue
    read -r -a extra <<<"$flags"
    fresh "$work/train"
    expect_for "$name" train
    watch "train    flags/$name" "$expected" "" \
        "$bin/xgrad-train" --data "$here/text.txt" --out "$work/train" --steps 1 --layers 1 --d-model 4 \
        --heads 2 --block 4 --batch 2 --eval-windows 4 --sample-tokens 0 --no-plots --quiet "${extra[@]}"
done <"$here/train_flags.txt"

echo "hostile files: $runs runs, $failures failed"
[ "$failures" -eq 0 ]
