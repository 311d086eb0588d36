# shellcheck shell=bash
# Sourced by the shell tests (bash): a practice text to train on, made with awk, so no data file is needed.
# practice_text SEED COUNT WORDS FILE writes COUNT words drawn at random (awk's srand(SEED)) from WORDS,
# split on blanks, each followed by a space, to FILE.
practice_text() {
    awk -v seed="$1" -v count="$2" -v words="$3" 'BEGIN {
        srand(seed); n = split(words, w, " ");
        for (i = 0; i < count; i++) printf "%s ", w[int(rand() * n) + 1] }' > "$4"
}
