#!/usr/bin/env bash
# Runs every test binary in $1 from the repository root and prints the totals line.
# A binary that dies without reporting (crash, timeout) counts as one failure.
set -u
dir=$1
pass=0; fail=0; skip=0
limit=${TEST_TIMEOUT:-1200}
for t in "$dir"/test_*; do
    [ -x "$t" ] || continue
    out=$(timeout "$limit" "$t" 2>&1); rc=$?
    printf '%s\n' "$out" | grep -v '^# '
    p=$(printf '%s\n' "$out" | grep -c '^ok ')
    f=$(printf '%s\n' "$out" | grep -c '^FAIL ')
    s=$(printf '%s\n' "$out" | grep -c '^skip ')
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $(basename "$t"): exited with status $rc without reporting a failed test"
        f=$((f + 1))
    fi
    pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
done
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
