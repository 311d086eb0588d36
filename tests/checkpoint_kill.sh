#!/usr/bin/env bash
# Crash safety: xgrad-train is killed with SIGKILL at random moments while it writes a checkpoint every
# step, many times. After every kill the checkpoint under the final name must load (xgrad-sample reads
# it strictly) and hold a step; finally --resume runs to the end. Usage: checkpoint_kill.sh TRAIN SAMPLE DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
# shellcheck source-path=SCRIPTDIR source=poll.sh
source "$(dirname "$0")/poll.sh"
train=$1
sample=$2
dir=$3
kills=${KILLS:-40}
rm -rf "$dir" && mkdir -p "$dir"
practice_text 9 5000 "kill the writer mid-sentence and the old checkpoint must survive." "$dir/text.txt"
# A model of ~0.8 M parameters: each checkpoint (weights and AdamW state) is ~10 MB, so writes take time.
args=(--data "$dir/text.txt" --out "$dir/run" --layers 4 --d-model 128 --heads 4 --block 16 --batch 2
      --eval-every 0 --eval-windows 8 --save-every 1 --sample-tokens 0 --no-plots --quiet --decay-steps 100000)
"$train" "${args[@]}" --steps 1  # a first checkpoint
RANDOM=42
landed_in_write=0
for i in $(seq 1 "$kills"); do
    touch "$dir/launched"
    "$train" "${args[@]}" --resume --steps 100000 &
    pid=$!
    # The kill lands at a random moment of the training loop, not of its start: once the run has replaced
    # the checkpoint (it writes one every step), after a further 0 to 99 ms, a few steps' time. At most
    # 10 s of waiting for that first checkpoint, or until the run ends by itself.
    for ((waited = 0; waited < 1000; waited++)); do
        [ "$dir/run/model.safetensors" -nt "$dir/launched" ] && break
        kill -0 "$pid" 2>/dev/null || break
        pause 0.01
    done
    pause "0.0$((RANDOM % 10))"
    if compgen -G "$dir/run/*.tmp*" > /dev/null || compgen -G "$dir/run/.*tmp*" > /dev/null; then
        landed_in_write=$((landed_in_write + 1))
    fi
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    if ! "$sample" --checkpoint "$dir/run/model.safetensors" --tokens 1 --prompt "a" > /dev/null 2> "$dir/err.txt"; then
        echo "kill $i: the checkpoint does not load: $(cat "$dir/err.txt")"
        exit 1
    fi
done
step=$(tail -1 "$dir/run/log.csv" | cut -d, -f1)
"$train" "${args[@]}" --resume --steps $((step + 3))
last=$(tail -1 "$dir/run/log.csv" | cut -d, -f1)
rows=$(($(wc -l < "$dir/run/log.csv") - 1))
if [ "$last" != "$((step + 3))" ] || [ "$rows" != "$last" ]; then
    echo "after the kills --resume should log steps 1..$((step + 3)) once each; log has $rows rows ending at $last"
    exit 1
fi
echo "checkpoint_kill: $kills kills (at least $landed_in_write while a temporary checkpoint existed); every checkpoint loaded; --resume went on to step $last with one log row per step"
