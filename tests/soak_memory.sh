#!/usr/bin/env bash
# Soak: 10,000 training steps of a small config keep the resident memory flat after warm-up. Reads
# log.csv's rss_mib column and fails if it grows by more than 1 MiB between step 1,000 and the end
# (a leak of even 100 bytes a step would show as 0.9 MiB). Usage: soak_memory.sh TRAIN DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
train=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 20000 "a soak test trains for a long time and watches its" "$dir/text.txt"
"$train" --data "$dir/text.txt" --out "$dir/run" --steps 10000 --layers 1 --d-model 16 --heads 2 --block 16 \
    --batch 4 --eval-every 2500 --eval-windows 32 --save-every 2500 --sample-tokens 0 --no-plots --quiet
awk -F, 'NR > 1 && $1 == 1000 { base = $8 }
         NR > 1 && $1 >= 1000 && $8 > peak { peak = $8 }
         NR > 1 { last = $8; first = first ? first : $8; steps = $1 }
         END {
             printf "soak: %d steps; resident memory %.2f MiB at step 1, %.2f MiB at step 1000, peak %.2f MiB after it, %.2f MiB at the end (growth after warm-up %.2f MiB)\n",
                    steps, first, base, peak, last, peak - base;
             exit (steps == 10000 && peak - base <= 1.0) ? 0 : 1
         }' "$dir/run/log.csv"
