#!/usr/bin/env bash
# examples_mha_demo_folder.sh PROGRAM: mha_demo run into a folder named "it's a $HOME" writes
# mha_graph.dot there and, when Graphviz's dot is installed, mha_graph.svg and mha_graph.png beside it
# (tests/examples_cli.cmake).
set -u
program=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
folder="$scratch/it's a \$HOME"
fail() {
    echo "FAIL: $1; the demo's last lines:"
    tail -n 12 "$scratch/run.out"
    exit 1
}
"$program" "$folder" > "$scratch/run.out" 2>&1 || fail "$program exited non-zero"
[ -s "$folder/mha_graph.dot" ] || fail "no $folder/mha_graph.dot"
if command -v dot > /dev/null; then
    for picture in mha_graph.svg mha_graph.png; do
        [ -s "$folder/$picture" ] || fail "dot is installed but there is no $folder/$picture"
    done
fi
echo "ok: $program drew into '$folder'"
