#!/usr/bin/env bash
# Where the build's time goes: configures a fresh build folder with ccache off and every compile and link
# timed, builds, then prints the 10 slowest translation units, the slowest links, the time by folder and
# the totals.
#
#   tools/build_times.sh [--dir DIR] [--top N] [TARGET...] [-- CMAKE_OPTION...]     (or ./dev build-times)
#
# DIR defaults to build-times/ (removed and made again: a build from scratch); TARGETs default to all.
# Times are CPU seconds of the compiler (user + system), which another job on the machine slows far less
# than wall time; the last lines give the build's wall time and, from the CPU total, what two idle cores
# would take at best.
set -euo pipefail

# The launcher: CMake runs every compile and link as `build_times.sh COMPILER ARGS...` with the log named
# in the environment. One line per command: CPU seconds, wall seconds, kind, what it made.
if [ -n "${XGRAD_BUILD_TIMES_LOG:-}" ] && [ "${1:-}" != "" ] && [ "${1#/}" != "$1" ]; then
    times=$(mktemp)
    status=0
    /usr/bin/time -f '%U %S %e' -o "$times" "$@" || status=$?
    what="" kind=link output=""
    while (($#)); do
        case "$1" in
            -c) kind=compile; what=$2; shift ;;
            -o) output=$2; shift ;;
        esac
        shift
    done
    [ "$kind" = link ] && what=$output
    read -r user sys wall < <(tail -1 "$times")
    rm -f "$times"
    awk -v u="$user" -v s="$sys" -v w="$wall" -v k="$kind" -v f="$what" \
        'BEGIN { printf "%.2f %.2f %s %s\n", u + s, w, k, f }' >>"$XGRAD_BUILD_TIMES_LOG"
    exit "$status"
fi

cd "$(dirname "$0")/.."
dir=build-times
top=10
targets=()
while (($#)); do
    case "$1" in
        --dir) dir=$2; shift 2 ;;
        --top) top=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;  # its opening comment
        *) targets+=(--target "$1"); shift ;;
    esac
done
[ -x /usr/bin/time ] || { echo "build_times: needs /usr/bin/time (Debian's time package)" >&2; exit 1; }

rm -rf "$dir"
mkdir -p "$dir"
log=$(cd "$dir" && pwd)/build_times.log
launcher=$PWD/tools/build_times.sh
export CCACHE_DISABLE=1 XGRAD_BUILD_TIMES_LOG=$log
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher" \
    -DCMAKE_CXX_LINKER_LAUNCHER="$launcher" -DXGRAD_CCACHE="$launcher" "$@" >/dev/null
: >"$log"
start=$SECONDS
cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >"$dir/build.out" 2>&1 ||
    { tail -30 "$dir/build.out" >&2; echo "build_times: the build failed ($dir/build.out)" >&2; exit 1; }
wall=$((SECONDS - start))

source_dir=$PWD/
echo "the $top slowest translation units (CPU seconds, wall seconds):"
grep ' compile ' "$log" | sort -rn | head -"$top" | while read -r cpu twall _ what; do
    printf '%8.1f %8.1f  %s\n' "$cpu" "$twall" "${what#"$source_dir"}"
done
echo "the 3 slowest links:"
grep ' link ' "$log" | sort -rn | head -3 | while read -r cpu twall _ what; do
    printf '%8.1f %8.1f  %s\n' "$cpu" "$twall" "${what##*/}"
done
echo "by folder (CPU seconds, translation units; a generated file counts under its build folder's):"
build_dir=$(cd "$dir" && pwd)/
grep ' compile ' "$log" | while read -r cpu _ _ what; do
    what=${what#"$source_dir"}
    what=${what#"$build_dir"}
    echo "$cpu ${what%%/*}"
done | awk '{ cpu[$2] += $1; n[$2]++ } END { for (f in cpu) printf "%8.1f %4d  %s\n", cpu[f], n[f], f }' | sort -rn
awk -v wall="$wall" -v cores="$(nproc)" '
    { cpu[$3] += $1; n[$3]++ }
    END {
        printf "total: %d translation units %.0f CPU s, %d links %.0f CPU s; all %.0f CPU s (%.1f min)\n",
            n["compile"], cpu["compile"], n["link"], cpu["link"], cpu["compile"] + cpu["link"],
            (cpu["compile"] + cpu["link"]) / 60
        printf "wall: %.0f s on %d cores here; two idle cores: at least %.0f s (%.1f min)\n",
            wall, cores, (cpu["compile"] + cpu["link"]) / 2, (cpu["compile"] + cpu["link"]) / 120
    }' "$log"
