#!/usr/bin/env bash
# A grid under `mpirun -np 2 xgrad-experiment`: the two processes share the runs (each run whole, on one
# rank, started once), a grid whose mpirun was killed with SIGKILL resumes from its checkpoints under a new
# mpirun, and the report is the report of one process running the same grid, apart from the times and
# the machine line. Usage: experiment_mpi.sh XGRAD_EXPERIMENT DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
# shellcheck source-path=SCRIPTDIR source=poll.sh
source "$(dirname "$0")/poll.sh"
program=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 5 3000 "runs shared out over the ranks of a grid" "$dir/text.txt"
steps=5000  # long enough that the kill lands mid-run, even on a fast idle CPU (600 was not)
grid=(--data "$dir/text.txt" --axis heads=1,2 --seeds 2 --steps $steps --jobs 1 --threads 1
      --set d-model=16 --set block=16 --set batch=4 --set eval-every=100 --set eval-windows=4 --set save-every=20
      --set no-plots=true --quiet)
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2)
runs=("heads=1/seed-1" "heads=2/seed-1" "heads=1/seed-2" "heads=2/seed-2")
fail() { echo "$1"; exit 1; }

# The one-process grid to compare with runs beside the two processes rather than before them: the test
# holds both cores (PROCESSORS 2), and the three processes keep them busy.
"$program" "${grid[@]}" --out "$dir/one" &
one=$!
trap 'kill $one 2> /dev/null || true' EXIT  # a failure below leaves no grid running

# Two processes, killed once both have a run under way past a checkpoint.
"${mpirun[@]}" "$program" "${grid[@]}" --out "$dir/two" &
launcher=$!
past_checkpoint() { logged_steps "$1" && ((steps_logged >= 50)); }
for _ in $(seq 3000); do  # up to 60 s
    past_checkpoint "$dir/two/heads=1/seed-1" && past_checkpoint "$dir/two/heads=2/seed-1" && break
    pause 0.02
done
kill -9 $launcher
wait $launcher 2> /dev/null || true
for _ in $(seq 100); do  # up to 10 s for the ranks and their children to go
    pgrep -f -- "--out $dir/two" > /dev/null || break
    pause 0.1
done
pgrep -f -- "--out $dir/two" > /dev/null && fail "processes of the grid outlived the killed mpirun"
unfinished=0
for run in "${runs[@]}"; do
    [ -f "$dir/two/$run/finished" ] || unfinished=$((unfinished + 1))
done
[ $unfinished -gt 0 ] || fail "every run had finished before the kill"

"${mpirun[@]}" "$program" "${grid[@]}" --out "$dir/two"
wait $one || fail "the one-process grid failed"
for run in "${runs[@]}"; do
    d="$dir/two/$run"
    [ -f "$d/finished" ] || fail "$run did not finish"
    logged=$(tail -n +2 "$d/log.csv" | cut -d, -f1)
    [ "$logged" = "$(seq $steps)" ] || fail "$run: log.csv does not hold steps 1..$steps exactly once"
    cmp <(cut -d, -f1-4 "$dir/one/$run/log.csv") <(cut -d, -f1-4 "$d/log.csv") ||
        fail "$run: losses differ from the one-process grid's"
done
# Each run on one rank: the runs alternate between the ranks in the order of the plan, and a resumed run
# continues on whichever rank takes it then.
grep -q "^fresh on rank 0 of 2" "$dir/two/heads=1/seed-1/attempts.txt" || fail "heads=1/seed-1 did not start on rank 0"
grep -q "^fresh on rank 1 of 2" "$dir/two/heads=2/seed-1/attempts.txt" || fail "heads=2/seed-1 did not start on rank 1"
grep -q "^resume on rank" "$dir"/two/*/*/attempts.txt || fail "no run was resumed"

# The reports agree but for the machine line and the columns of speed and time.
same_results() {
    awk -F'|' 'BEGIN { OFS = "|" }
               /^Machine:/ { next }
               /^\|/ && !in_table { in_table = 1; split("", timed);
                                    for (i = 1; i <= NF; i++) if ($i ~ /tokens\/s|seconds/) timed[i] = 1 }
               /^\|/ { for (i in timed) $i = " . "; print; next }
               { in_table = 0; print }' "$1"
}
diff <(same_results "$dir/one/report.md") <(same_results "$dir/two/report.md") ||
    fail "the two processes' report differs from one process's"
echo "experiment mpi: 2 processes, killed with $unfinished runs unfinished and resumed; same report as 1 process"
