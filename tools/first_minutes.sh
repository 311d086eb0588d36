#!/usr/bin/env bash
# A newcomer's first commands, timed as the newcomer runs them: each of `./dev demo` and `./dev test` in a
# fresh clone of this repository's HEAD, with ccache off (CCACHE_DISABLE=1), against its budget in seconds
# (demo_budget and test_budget below; --help prints them), apt-get included (docs/performance.md, "The
# build").
#
#   tools/first_minutes.sh [--repo DIR] [--dir DIR] [--demo-budget S] [--test-budget S] [demo] [test]
#
# Runs demo then test (both by default), each in a clone of its own under DIR (default
# build-first-minutes/ in the repository; removed and made again, so it must be new, empty or made by this
# script before), and prints one line each: wall time, CPU time and whether it installed packages (only
# the first command on a fresh machine does: run `test` alone there to time it with apt-get). Each
# command's output is kept in DIR/COMMAND.log, every line led by the seconds since the command started,
# so that the log shows where the time went (apt-get, the configure, the build, the suite). Exit status
# 0 when every command succeeded within its budget, 1 when one failed or took longer, 2 for a bad argument.
set -euo pipefail

demo_budget=240  # seconds
test_budget=360

usage_error() {
    echo "first_minutes: $1 (see --help)" >&2
    exit 2
}
seconds_argument() {
    [[ "$2" =~ ^[0-9]+$ ]] || usage_error "$1 must be a whole number of seconds, got '${2:0:24}'"
}

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$repo/build-first-minutes
commands=()
while (($#)); do
    case "$1" in
        --repo | --dir | --demo-budget | --test-budget)
            (($# >= 2)) || usage_error "$1 needs a value"
            case "$1" in
                --repo) repo=$2 ;;
                --dir) dir=$2 ;;
                --demo-budget) seconds_argument "$1" "$2"; demo_budget=$2 ;;
                --test-budget) seconds_argument "$1" "$2"; test_budget=$2 ;;
            esac
            shift 2
            ;;
        demo | test) commands+=("$1"); shift ;;
        -h | --help)
            awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"  # the opening comment
            echo "# budgets: demo $demo_budget s, test $test_budget s"
            exit 0
            ;;
        *) usage_error "unknown argument '${1:0:40}'" ;;
    esac
done
((${#commands[@]})) || commands=(demo test)
git -C "$repo" rev-parse --verify -q HEAD >/dev/null 2>&1 || usage_error "--repo '${repo:0:80}' is not a git repository"

# DIR is removed and made again, so it must be new, empty or one this script made (it holds the mark):
# never a folder of someone's work given by mistake.
mark=.first-minutes
if [ -e "$dir" ] && [ ! -e "$dir/$mark" ] && [ -n "$(ls -A "$dir" 2>/dev/null || echo not-a-folder)" ]; then
    usage_error "--dir '${dir:0:80}' holds files this script did not make; give a new or empty folder"
fi
rm -rf "$dir"
mkdir -p "$dir"
touch "$dir/$mark"
dir=$(cd "$dir" && pwd)
model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
git -C "$repo" log -1 --format='%h %s' | cut -c1-100
echo "on ${model:-an unknown CPU}, $(nproc) cores; ccache off"

# stamped START: copies standard input to standard output, each line led by the seconds since START (an
# EPOCHREALTIME), to a tenth.
stamped() {
    local start=${1/[.,]/} line now elapsed
    while IFS= read -r line || [ -n "$line" ]; do
        now=${EPOCHREALTIME/[.,]/}
        elapsed=$((now - start))  # microseconds
        printf '%7s %s\n' "$((elapsed / 1000000)).$((elapsed / 100000 % 10))" "$line"
    done
}

status=0
for command in "${commands[@]}"; do
    budget=$demo_budget
    [ "$command" = test ] && budget=$test_budget
    clone=$dir/$command
    log=$dir/$command.log
    git clone -q "$repo" "$clone"
    times=$dir/$command.times
    start=$SECONDS
    # bash's `times`, second line: the CPU time of every process ./dev started and waited for.
    if ! (cd "$clone" && CCACHE_DISABLE=1 ./dev "$command" && times >"$times") 2>&1 | stamped "$EPOCHREALTIME" >"$log"; then
        echo "first_minutes: ./dev $command failed after $((SECONDS - start)) s (see $log)" >&2
        status=1
        continue
    fi
    wall=$((SECONDS - start))
    read -r user sys < <(tail -1 "$times" | tr 'ms' '  ' | awk '{ print $1 * 60 + $2, $3 * 60 + $4 }')
    installed="packages already installed"
    grep -q '^ *[0-9.]* installing: ' "$log" && installed="installed packages"
    verdict="within its budget of $budget s"
    if ((wall > budget)); then
        verdict="OVER its budget of $budget s by $((wall - budget)) s"
        status=1
    fi
    printf './dev %-4s %d min %02d s (%.0f + %.0f CPU s, %s): %s\n' "$command" $((wall / 60)) $((wall % 60)) \
        "$user" "$sys" "$installed" "$verdict"
done
exit "$status"
