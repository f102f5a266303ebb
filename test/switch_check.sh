#!/usr/bin/env bash
# switch_check.sh (make layers, test_switches): the switch registry (core/base/switches.c) against the source.
# Fails when a YT_ name appears in a .c, .cu, .cuh or .h file of core/ gpu/ io/ cfg/ bench/ test/ but not in
# the registry, when the registry names a variable nothing in them uses, or when a variant or test hook
# names no test (or a test that does not exist, or that never mentions it), or when core/ gpu/ io/ cfg/ call
# getenv for a YT_ name outside the registry. Run from the repository root.
# YT_VERSION is exempt: a make variable (the commit, compiled into core/main.c), not the environment's.
set -u
reg=core/base/switches.c
dirs=(core gpu io cfg bench test)
fail=0

# the registry's rows: NAME KIND TESTS, from `[SW_X] = { "YT_X", SWITCH_KIND, ..., "tests" },`
rows=$(awk '
    /^ *\[SW_[A-Z0-9_]+\] = \{/ { row = "" ; inrow = 1 }
    inrow { row = row $0 }
    inrow && /\}, *$/ {
        inrow = 0
        match(row, /"YT_[A-Z0-9_]+"/); name = substr(row, RSTART + 1, RLENGTH - 2)
        match(row, /SWITCH_[A-Z_]+/); kind = substr(row, RSTART, RLENGTH)
        match(row, /"[^"]*" *\}, *$/); t = substr(row, RSTART + 1, RLENGTH); sub(/" *\}, *$/, "", t)
        gsub(/,/, "", t)
        print name, kind, t
    }' "$reg")
names=$(echo "$rows" | awk '{ print $1 }' | sort -u)
if [ -z "$names" ]; then echo "switch_check: no registry rows found in $reg"; exit 1; fi

files=$(find "${dirs[@]}" -type f \( -name '*.c' -o -name '*.cu' -o -name '*.cuh' -o -name '*.h' \) | sort)
used=$(grep -ohE 'YT_[A-Z0-9_]+' $files | grep -vx 'YT_VERSION' | sort -u)

for n in $used; do
    if ! grep -qx "$n" <<<"$names"; then
        fail=1
        echo "switch_check: $n is used but not in the registry ($reg); add a row:"
        grep -nwE "$n" $files | head -3 | sed 's/^/    /'
    fi
done
for n in $names; do
    if [ -z "$(grep -lw "$n" $files | grep -vE "^($reg|core/base/switches\.h)\$")" ] &&
       [ -z "$(grep -lw "SW_${n#YT_}" $files | grep -vE "^($reg|core/base/switches\.h)\$")" ]; then
        fail=1
        echo "switch_check: $n is in the registry but nothing reads it: remove its row"
    fi
done

# the registry is the only reader: no getenv of a YT_ name elsewhere in core/ gpu/ io/ cfg/
bad=$(grep -rnE 'getenv\("YT_' core gpu io cfg | grep -v "^$reg:")
if [ -n "$bad" ]; then fail=1; echo "switch_check: read YT_ variables through core/base/switches.h (switch_str), not getenv:"; echo "$bad" | sed 's/^/    /'; fi

while read -r name kind tests; do
    case "$kind" in SWITCH_DIAGNOSTIC|SWITCH_USER) continue ;; esac
    if [ -z "$tests" ]; then
        fail=1
        echo "switch_check: $name ($kind) names no test that pins it: name one, or move the variant to bench/lost/"
        continue
    fi
    mentioned=0
    for t in $tests; do
        if [ ! -f "test/$t.c" ]; then fail=1; echo "switch_check: $name names test $t, but test/$t.c does not exist"; continue; fi
        grep -qwE "$name|SW_${name#YT_}" "test/$t.c" && mentioned=1
    done
    if [ $mentioned = 0 ]; then fail=1; echo "switch_check: $name: none of its tests ($tests) mentions it"; fi
done <<<"$rows"

[ $fail = 0 ] && echo "switch_check: ok ($(echo "$names" | wc -l) switches, every YT_ name of the source in the registry)"
exit $fail
