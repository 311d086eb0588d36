# shellcheck shell=bash
# Sourced by the shell tests that wait on a process they started: waiting and looking without a fork. A
# fork costs 14 to 30 ms of CPU on a virtual machine whose page faults are slow (docs/performance.md, "The
# build"), so a loop that polled every 20 ms with `sleep`, `wc` and a subshell kept a core busy beside the
# program it watched.

# pause SECONDS: waits SECONDS (a read from a pipe nobody writes, which times out).
exec {pause_fd}<> <(:)
pause() { read -r -t "$1" -u "$pause_fd" _ || true; }

# logged_steps RUN_DIR: sets `steps_logged` to the rows of RUN_DIR/log.csv below its header, 0 without one.
logged_steps() {
    steps_logged=0
    [ -f "$1/log.csv" ] || return 0
    local lines
    mapfile -t lines < "$1/log.csv"
    ((${#lines[@]} == 0)) || steps_logged=$((${#lines[@]} - 1))
}
