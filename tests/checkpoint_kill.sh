#!/usr/bin/env bash
# Crash safety: xgrad-train is killed with SIGKILL, many times, while it writes a checkpoint every step:
# each kill is aimed into a write, at a random moment of it. After every kill the checkpoint under the
# final name must load (xgrad-sample reads it strictly) and hold a step; some kill must have landed while
# a temporary checkpoint existed (none would mean the aim no longer finds the writes); finally --resume
# runs to the end.
# Usage: checkpoint_kill.sh TRAIN SAMPLE DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
# shellcheck source-path=SCRIPTDIR source=poll.sh
source "$(dirname "$0")/poll.sh"
train=$1
sample=$2
dir=$3
kills=${KILLS:-20}
rm -rf "$dir" && mkdir -p "$dir"
practice_text 9 5000 "kill the writer mid-sentence and the old checkpoint must survive." "$dir/text.txt"
# A model of ~0.8 M parameters: each checkpoint (weights and AdamW state) is ~10 MB, so writes take time.
args=(--data "$dir/text.txt" --out "$dir/run" --layers 4 --d-model 128 --heads 4 --block 16 --batch 2
      --eval-every 0 --eval-windows 8 --save-every 1 --sample-tokens 0 --no-plots --quiet --decay-steps 100000)
"$train" "${args[@]}" --steps 1  # a first checkpoint
# Whether a temporary checkpoint exists: a write is under way (io/safetensors.cpp writes the file as
# .model.safetensors.tmp- and six random characters from mkstemp, beside the checkpoint, then renames it
# over the checkpoint; the name train/trainer.cpp clears after a kill). log.csv's own temporary is not a
# checkpoint's write.
writing() { compgen -G "$dir/run/.model.safetensors.tmp-*" > /dev/null; }
RANDOM=42
landed_in_write=0
for i in $(seq 1 "$kills"); do
    touch "$dir/launched"
    "$train" "${args[@]}" --resume --steps 100000 &
    pid=$!
    # The kill is aimed into a write of the training loop, not of its start: once the run has replaced the
    # checkpoint (it writes one every step; at most 10 s of waiting, or until the run ends by itself), at
    # its next write (at most 1 s more), after a further 0 to 9 ms. A write of this checkpoint takes
    # about 10 to 25 ms, a training step about 5 ms: kills at random moments of the loop landed in a
    # write about half the time (24 of 40).
    for ((waited = 0; waited < 1000; waited++)); do
        [ "$dir/run/model.safetensors" -nt "$dir/launched" ] && break
        kill -0 "$pid" 2>/dev/null || break
        pause 0.01
    done
    for ((waited = 0; waited < 1000; waited++)); do
        writing && break
        kill -0 "$pid" 2>/dev/null || break
        pause 0.001
    done
    printf -v delay "0.%03d" $((RANDOM % 10))
    pause "$delay"
    if writing; then
        landed_in_write=$((landed_in_write + 1))
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if ! "$sample" --checkpoint "$dir/run/model.safetensors" --tokens 1 --prompt "a" > /dev/null 2> "$dir/err.txt"; then
        echo "kill $i: the checkpoint does not load: $(cat "$dir/err.txt")"
        exit 1
    fi
done
if ((landed_in_write == 0)); then
    echo "none of $kills kills landed while a temporary checkpoint existed: the test no longer finds the writes"
    exit 1
fi
step=$(tail -1 "$dir/run/log.csv" | cut -d, -f1)
"$train" "${args[@]}" --resume --steps $((step + 3))
last=$(tail -1 "$dir/run/log.csv" | cut -d, -f1)
rows=$(($(wc -l < "$dir/run/log.csv") - 1))
if [ "$last" != "$((step + 3))" ] || [ "$rows" != "$last" ]; then
    echo "after the kills --resume should log steps 1..$((step + 3)) once each; log has $rows rows ending at $last"
    exit 1
fi
echo "checkpoint_kill: $kills kills (at least $landed_in_write while a temporary checkpoint existed); every checkpoint loaded; --resume went on to step $last with one log row per step"
