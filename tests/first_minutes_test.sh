#!/usr/bin/env bash
# tools/first_minutes.sh on small repositories of its own whose ./dev only returns at once: its lines,
# verdicts, exit statuses and refusals, in a second (the real measurement takes minutes:
# docs/performance.md, "The build").
# Usage: first_minutes_test.sh DIR
set -euo pipefail
script=$(cd "$(dirname "$0")/.." && pwd)/tools/first_minutes.sh
work=$1
rm -rf "$work" && mkdir -p "$work"
cd "$work"
fail() { echo "first_minutes_test: $1"; exit 1; }

# fake_repo NAME BODY: a git repository NAME whose ./dev runs BODY.
fake_repo() {
    mkdir "$1"
    printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1/dev"
    chmod +x "$1/dev"
    git -C "$1" init -q
    git -C "$1" add dev
    git -C "$1" -c user.name=xgrad-test -c user.email=test@localhost commit -qm "a fake ./dev"
}
# run NAME ARGS...: runs the script, sets `status`, `out` (stdout) and `err` (stderr).
run() {
    local name=$1
    shift
    status=0
    "$script" "$@" >"$name.out" 2>"$name.err" || status=$?
    out=$(<"$name.out")
    err=$(<"$name.err")
}
expect() {  # expect WHAT CONDITION-STATUS: fails with WHAT and the script's output when the condition failed
    [ "$2" = 0 ] || fail "$1; stdout: $out; stderr: $err"
}

# ccache off, a clone of the repository's HEAD (not the repository itself), the command as an argument;
# `test` says it installed a package, as ./dev does.
# shellcheck disable=SC2016  # the fake ./dev's script, expanded when it runs
fake_repo quick '[ "${CCACHE_DISABLE:-}" = 1 ] || exit 9
[ "$PWD" != "'"$work"'/quick" ] || exit 8
touch "ran_$1"
[ "$1" = test ] && echo "installing: a-package"
exit 0'
run both --repo quick --dir both
[ $status = 0 ] || fail "a quick ./dev should pass, got status $status: $out $err"
[ -e both/demo/ran_demo ] && [ -e both/test/ran_test ]; expect "each command runs in a clone of its own" $?
[[ "$out" == *"./dev demo 0 min 0"?" s ("*"packages already installed): within its budget of 240 s"* ]]
expect "the demo's line" $?
[[ "$out" == *"./dev test 0 min 0"?" s ("*"installed packages): within its budget of 360 s"* ]]
expect "the suite's line" $?
[[ "$out" == *"a fake ./dev"* && "$out" == *"cores; ccache off"* ]]; expect "the commit and the machine" $?
run again --repo quick --dir both demo
[ $status = 0 ] && [ ! -e both/test ]; expect "a folder it made before is made again" $?

fake_repo slow 'echo early; sleep 1.1; echo late'
run over --repo slow --dir over --test-budget 0 test
[ $status = 1 ] || fail "over budget should exit 1, got $status"
[[ "$out" == *"./dev test 0 min 0"[12]" s "*"OVER its budget of 0 s by "[12]" s"* ]]; expect "the verdict" $?
[[ "$out" != *"./dev demo"* ]]; expect "only the command asked for runs" $?
# The log's lines are led by the seconds since the command started.
# stamp WORD: sets `tenths` to the stamp of the log's line WORD, in tenths of a second.
stamp() {
    local seconds
    seconds=$(sed -nE "s/^ +([0-9]+)\.([0-9]) $1\$/\1\2/p" over/test.log)
    [ -n "$seconds" ] && tenths=$((10#$seconds))
}
stamped=1
if stamp early && early=$tenths && stamp late && ((tenths - early >= 10)); then stamped=0; fi
expect "each line of the log stamped with its time, 'late' 1.1 s after 'early': $(cat over/test.log)" $stamped

fake_repo broken 'echo "it broke"; exit 3'
run failed --repo broken --dir failed demo
[ $status = 1 ] || fail "a failing ./dev should exit 1, got $status"
[[ "$err" == "first_minutes: ./dev demo failed after "*" s (see $work/failed/demo.log)" ]]; expect "the failure" $?
grep -qE '^ +[0-9]+\.[0-9] it broke$' failed/demo.log; expect "the log keeps ./dev's output" $?

# Refusals: one line on stderr, status 2, nothing run, nothing removed.
mkdir -p work_of_someone && echo "keep me" >work_of_someone/notes.txt
echo "a file" >a_file
for args in "--repo quick --dir work_of_someone" "--repo quick --dir a_file" "--bogus" "--demo-budget 1.5" \
    "--test-budget -1" "--dir" "--repo $work/nowhere demo" "tests"; do
    # shellcheck disable=SC2086  # the arguments are split on purpose
    run refused $args
    [ $status = 2 ] || fail "'$args' should be refused with status 2, got $status"
    [ "$(wc -l <refused.err)" = 1 ] && [[ "$err" == "first_minutes: "*" (see --help)" ]]
    expect "'$args': one line on stderr" $?
done
[ "$(<work_of_someone/notes.txt)" = "keep me" ] && [ "$(<a_file)" = "a file" ]; expect "a refusal removes nothing" $?
echo "first_minutes: the lines, the verdicts and the refusals are right"
