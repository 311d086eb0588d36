#!/usr/bin/env bash
# examples_cli.sh PROGRAM: --help exits 0, prints a usage and leaves the working folder empty; --bogus
# exits 2 with exactly one line on stderr and nothing on stdout.
set -u
program=$1
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"

"$program" --help > help.out 2> help.err
status=$?
if [ "$status" -ne 0 ]; then echo "FAIL: $program --help exited $status"; exit 1; fi
if ! grep -q "Usage" help.out; then echo "FAIL: $program --help printed no usage"; exit 1; fi
rm help.out help.err
if [ -n "$(ls -A)" ]; then echo "FAIL: $program --help created: $(ls -A)"; exit 1; fi

"$program" --bogus > bogus.out 2> bogus.err
status=$?
if [ "$status" -ne 2 ]; then echo "FAIL: $program --bogus exited $status, not 2"; exit 1; fi
if [ "$(wc -l < bogus.err)" -ne 1 ]; then echo "FAIL: $program --bogus wrote $(wc -l < bogus.err) lines to stderr:"; cat bogus.err; exit 1; fi
if [ -s bogus.out ]; then echo "FAIL: $program --bogus wrote to stdout"; exit 1; fi
echo "ok: $program"
