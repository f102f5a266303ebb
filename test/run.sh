#!/usr/bin/env bash
# Runs every test binary in $1 from the repository root and prints the totals line.
# A binary that dies without reporting (crash, timeout) counts as one failure.
# Each binary writes its scratch files under a TMPDIR of its own, removed when it passes (a crashed or
# timed-out binary cannot clean up after itself; a failed one's files are kept and their folder named).
set -u
dir=$1
pass=0; fail=0; skip=0
limit=${TEST_TIMEOUT:-1200}
base_tmp=${TMPDIR:-/tmp}
for t in "$dir"/test_*; do
    [ -x "$t" ] || continue
    tmp=$(mktemp -d "$base_tmp/yt-run-$(basename "$t")-XXXXXX")
    out=$(TMPDIR=$tmp timeout "$limit" "$t" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^# '
    p=$(printf '%s\n' "$out" | grep -c '^ok ')
    f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
    s=$(printf '%s\n' "$out" | grep -c '^skip ')
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $(basename "$t"): exited with status $rc without reporting a failed test"
        f=$((f + 1))
    fi
    if [ "$f" -eq 0 ] && [ -z "${YT_KEEP_TMP:-}" ]; then rm -rf "$tmp"; else echo "# $(basename "$t") left its files in $tmp"; fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
