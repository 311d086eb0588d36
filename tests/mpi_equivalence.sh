#!/usr/bin/env bash
# Data-parallel equivalence: `mpirun -np 2` with batch B logs the same losses as one process with batch
# 2B (the same global batch, drawn the same way), to 1e-6 relative in float32, and the same learning
# rates exactly. Then --resume under MPI continues the two-process run. Usage: mpi_equivalence.sh TRAIN DIR
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=practice_text.sh
source "$(dirname "$0")/practice_text.sh"
train=$1
dir=$2
rm -rf "$dir" && mkdir -p "$dir"
practice_text 7 3000 "the cat sat on a mat. dogs" "$dir/text.txt"
common=(--data "$dir/text.txt" --block 16 --layers 2 --d-model 16 --heads 2 --lr 1e-2 --eval-every 4
        --eval-windows 16 --sample-tokens 0 --no-plots --quiet --decay-steps 8)
mpirun=(mpirun --allow-run-as-root --oversubscribe -np 2)

"${mpirun[@]}" "$train" "${common[@]}" --out "$dir/two" --batch 4 --steps 4
"${mpirun[@]}" "$train" "${common[@]}" --out "$dir/two" --batch 4 --steps 8 --resume
"$train" "${common[@]}" --out "$dir/one" --batch 8 --steps 8

# Compare step, train_loss, val_loss and lr row by row.
awk -F, 'NR == FNR { one[FNR] = $0; next }
         {
             split(one[FNR], a, ",");
             if (FNR == 1) { next }
             rows++;
             if (a[1] != $1 || a[4] != $4) { printf "row %d: step/lr differ: %s | %s\n", FNR, one[FNR], $0; bad = 1 }
             for (c = 2; c <= 3; c++) {
                 if ((a[c] == "") != ($c == "")) { printf "row %d column %d: one empty\n", FNR, c; bad = 1; continue }
                 if (a[c] == "") continue;
                 d = a[c] - $c; if (d < 0) d = -d;
                 rel = d / (a[c] < 0 ? -a[c] : a[c]);
                 if (rel > worst) worst = rel;
                 if (rel > 1e-6) { printf "row %d column %d: %s vs %s (rel %.2e)\n", FNR, c, a[c], $c, rel; bad = 1 }
             }
         }
         END {
             if (rows != 8) { printf "expected 8 rows, got %d\n", rows; bad = 1 }
             printf "mpirun -np 2 (B=4, resumed at step 4) vs one process (B=8): %d rows, worst relative difference %.2e\n", rows, worst;
             exit bad
         }' "$dir/one/log.csv" "$dir/two/log.csv"
