#!/usr/bin/env bash
# xgrad-experiment resumes a grid whose runner was killed with SIGKILL mid-run: its xgrad-train children
# die with it, the restarted runner skips the finished runs, continues the interrupted one from its
# checkpoint with --resume (with the losses of a run that never stopped) and completes every run once.
# Usage: experiment_resume.sh XGRAD_EXPERIMENT SPEC_DIR DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
# shellcheck source-path=SCRIPTDIR source=poll.sh
source "$(dirname "$0")/poll.sh"
program=$1
dir=$3
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 3000 "a run that stops must continue where it stopped" "$dir/text.txt"
steps=1000  # long enough that the second run cannot finish between two polls, even on a fast idle CPU
grid=(--data "$dir/text.txt" --out "$dir/out" --axis heads=1,2 --seeds 2 --steps $steps --jobs 1 --threads 1
      --set d-model=16 --set block=16 --set batch=4 --set eval-every=100 --set eval-windows=4 --set save-every=20
      --set no-plots=true --quiet)
fail() { echo "$1"; exit 1; }

"$program" "${grid[@]}" &
runner=$!
first="$dir/out/heads=1/seed-1"
second="$dir/out/heads=2/seed-1"
for _ in $(seq 3000); do  # up to 60 s: the first run finished and the second past a checkpoint
    [ -f "$first/finished" ] && logged_steps "$second" && ((steps_logged >= 50)) && break
    pause 0.02
done
[ -f "$first/finished" ] || fail "the first run did not finish in time"
kill -9 $runner
wait $runner 2> /dev/null || true
for _ in $(seq 100); do  # up to 10 s for the children to notice (a loaded machine is slow to schedule them)
    pgrep -f -- "--out $dir/out/" > /dev/null || break
    pause 0.1
done
if pgrep -f -- "--out $dir/out/" > /dev/null; then
    fail "xgrad-train children outlived the killed runner"
fi
logged_steps "$second"
killed_at=$steps_logged
[ "$killed_at" -lt $steps ] || fail "the second run had finished before the kill (rows: $killed_at)"
[ ! -f "$second/finished" ] || fail "the second run is marked finished"

"$program" "${grid[@]}"
for run in "heads=1/seed-1" "heads=2/seed-1" "heads=1/seed-2" "heads=2/seed-2"; do
    d="$dir/out/$run"
    [ -f "$d/finished" ] || fail "$run did not finish"
    logged=$(tail -n +2 "$d/log.csv" | cut -d, -f1)
    [ "$logged" = "$(seq $steps)" ] || fail "$run: log.csv does not hold steps 1..$steps exactly once"
done
[ "$(cat "$first/attempts.txt")" = "fresh" ] || fail "the finished run was started again: $(cat "$first/attempts.txt")"
[ "$(tr '\n' ' ' < "$second/attempts.txt")" = "fresh resume " ] ||
    fail "the killed run was not resumed: $(cat "$second/attempts.txt")"

# The resumed run logs what one uninterrupted run with the same flags logs.
mapfile -t args < "$second/command.txt"
args=("${args[@]/#$second/$dir/straight}")
"$(dirname "$program")/xgrad-train" "${args[@]}" --threads 1 > /dev/null
cmp <(cut -d, -f1-4 "$second/log.csv") <(cut -d, -f1-4 "$dir/straight/log.csv") ||
    fail "the resumed run's losses differ from an uninterrupted run's"
echo "experiment resume: killed after $killed_at steps of the second run; every run complete once"
