#!/usr/bin/env bash
# make layers (part): the docs and the help say what the code has.
# (a) Every key of cfg/schema.c's table (cfg_keys: what the INI parser and the command line accept) is
#     named, as `key`, in cfg/README.md. (Its help, what `yolotrain MODE --help` prints, is the last
#     argument of its row there: the macros require it and test_config checks none is empty.) Where
#     cfg/README.md states a key's default as a number or "" right after its name (`epochs` (300),
#     `lr0` 0.01, `data` ("" = ...)), it is the default of the key's row.
# (b) Every repo path named in a source comment (core/ gpu/ io/ cfg/ bench/ test/ and the Makefile) or in
#     the docs (README.md and the folders' README.md; bench/RESULTS.md and bench/HISTORY.md are history
#     and not checked) exists: core/spec/conv.c, gpu/bn.cu:77 (a :line suffix is allowed), io/ (a folder).
#     A name without an extension (bench/step, a built program) passes when it or it.c exists. Not
#     checked: globs and brace lists (io/plot*.c), placeholders (bench/NAME, a word in capitals, or
#     followed by <what>), build outputs (.o .d .a), a value after = (csv=bench/balance.csv: what a
#     program writes), and a path inside another (../shared/..., tensorflow/core/...). The docs'
#     relative Markdown links ([x](../io/README.md#plots)) must exist too, with the heading they name.
# Prints each miss as file:line and fails. Only bash, grep, sed and awk.
cd "$(dirname "$0")/.."
bad=0

# ---- (a) keys
keys=$(sed -n '/^const Key cfg_keys\[\] *= *{/,/^};/p' cfg/schema.c |
       grep -oE '(INT|INTM|INTX|BOOL|DBL|STR|ENUM) *\( *"[a-z0-9_]+", *"[a-z0-9_]+"|HYPC? *\( *[a-z0-9_]+' |
       sed -E 's/.*"([a-z0-9_]+)"$/\1/; s/^HYPC? *\( *//')
if [ "$(printf '%s\n' "$keys" | grep -c .)" -lt 20 ]; then
    echo "test/docs_check.sh: could not read the key table (const Key cfg_keys[]) of cfg/schema.c"; bad=1
fi
for k in $keys; do
    if ! grep -qF "\`$k\`" cfg/README.md && ! grep -qF "\`$k=" cfg/README.md; then
        echo "cfg/README.md: key $k (cfg/schema.c) is not described (no \`$k\`)"; bad=1
    fi
done

# each row's key and default (its second-to-last string), a row running from its macro to `"),`
defaults=$(sed -n '/^const Key cfg_keys\[\] *= *{/,/^};/p' cfg/schema.c | awk '
/^[[:space:]]*(INT|INTM|INTX|BOOL|DBL|STR|ENUM|HYPC?) *\(/ { row = ""; inrow = 1 }
inrow { row = row " " $0; if ($0 ~ /"\),[[:space:]]*(\/\/.*)?$/) { inrow = 0; print row } }' | awk '{
    n = 0; s = $0
    while (match(s, /"([^"\\]|\\.)*"/)) { lit[++n] = substr(s, RSTART + 1, RLENGTH - 2); s = substr(s, RSTART + RLENGTH) }
    if ($0 ~ /HYPC? *\(/) { match($0, /HYPC? *\( *[a-z0-9_]+/); k = substr($0, RSTART, RLENGTH); sub(/.*\( */, "", k) }
    else k = lit[2]
    print k "\t" lit[n - 1]
}')
if [ "$(printf '%s\n' "$defaults" | grep -c .)" -ne "$(printf '%s\n' "$keys" | grep -c .)" ]; then
    echo "test/docs_check.sh: could not read every row's default from cfg/schema.c"; bad=1
fi
while IFS=$'\t' read -r k d; do
    [ -n "$k" ] || continue
    said=$(grep -oE "\`$k\` \(?[^;:,) ]*" cfg/README.md | head -n 1 | sed -E "s/^\`$k\` \(?//")
    if [ "$said" = '""' ]; then
        [ -z "$d" ] || { echo "cfg/README.md: \`$k\` is said to default to \"\"; cfg/schema.c has $d"; bad=1; }
    elif [[ "$said" =~ ^-?[0-9]+(\.[0-9]+)?$ ]]; then
        awk -v a="$said" -v b="$d" 'BEGIN { exit !(b ~ /^-?[0-9.]+$/ && a + 0 == b + 0) }' ||
            { echo "cfg/README.md: \`$k\` is said to default to $said; cfg/schema.c has ${d:-\"\"}"; bad=1; }
    fi
done <<< "$defaults"

# ---- (b) paths
docs=$(ls README.md */README.md 2>/dev/null)
srcs=$(find core gpu io cfg bench test -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
        -o -name '*.sh' -o -name '*.py' \) | sort)
# file<TAB>line<TAB>path<TAB>kind, kind: p a path named in the text, l a Markdown link
found=$(awk '
function scan(text,    s, tok, prev, next_ch) {
    s = " " text
    while (match(s, /[^A-Za-z0-9_.\/-](core|gpu|io|cfg|bench|test)\/[A-Za-z0-9_.\/-]*/)) {
        prev = substr(s, RSTART, 1)
        tok = substr(s, RSTART + 1, RLENGTH - 1)
        next_ch = substr(s, RSTART + RLENGTH, 1)
        s = substr(s, RSTART + RLENGTH)
        if (next_ch == "*" || next_ch == "{" || next_ch == "<") continue   # a glob, a brace list, <what>
        if (prev == "=") continue                                # key=value: an argument
        sub(/[.]+$/, "", tok)                                    # the end of a sentence
        if (tok ~ /\.[oda]$/) continue                          # a build output
        if (tok ~ /(^|[\/_.-])[A-Z][A-Z]*([\/_.-]|$)/) continue   # a placeholder: NAME, test_X
        printf "%s\t%d\t%s\tp\n", FILENAME, FNR, tok
    }
}
function links(text,    s, t) {
    s = text
    while (match(s, /\]\([^) ]+\)/)) {
        t = substr(s, RSTART + 2, RLENGTH - 3)
        s = substr(s, RSTART + RLENGTH)
        if (t ~ /^[a-z]+:/) continue                             # http:, mailto:
        printf "%s\t%d\t%s\tl\n", FILENAME, FNR, t
    }
}
FNR == 1 { block = 0; md = FILENAME ~ /\.md$/; hash = FILENAME ~ /(\.sh|\.py|Makefile)$/ }
{
    line = $0
    if (md) { scan(line); links(line); next }
    if (hash) {
        if (match(line, /(^|[ \t])#/)) scan(substr(line, RSTART))
        next
    }
    text = ""
    if (block) {
        e = index(line, "*/")
        if (!e) { scan(line); next }
        text = substr(line, 1, e - 1); line = substr(line, e + 2); block = 0
    }
    c = index(line, "//"); b = index(line, "/*")
    if (c && (!b || c < b)) text = text " " substr(line, c + 2)
    else if (b) {
        rest = substr(line, b + 2); e = index(rest, "*/")
        if (e) text = text " " substr(rest, 1, e - 1)
        else { text = text " " rest; block = 1 }
    }
    if (text != "") scan(text)
}' $docs $srcs Makefile)

while IFS=$'\t' read -r file line path kind; do
    [ -n "$file" ] || continue
    if [ "$kind" = l ]; then
        target=${path%%#*} anchor=
        [ "$target" = "$path" ] || anchor=${path#*#}
        if [ -z "$target" ]; then target=$file; else target="$(dirname "$file")/$target"; fi
        if [ ! -e "$target" ]; then echo "$file:$line: the link $path does not exist"; bad=1; continue; fi
        # an #anchor names a heading of the target, as GitHub spells it (lower case, no punctuation, - for spaces)
        if [ -n "$anchor" ] && ! awk -v a="$anchor" '/^#+ / { t = tolower($0); sub(/^#+ +/, "", t); gsub(/[^a-z0-9 _-]/, "", t);
                gsub(/ /, "-", t); if (t == a) { found = 1; exit } } END { exit !found }' "$target"; then
            echo "$file:$line: the link $path names no heading of $target"; bad=1
        fi
        continue
    fi
    [ -e "$path" ] && continue
    base=${path##*/}
    if [ "${path%/}" = "$path" ] && [ "${base#*.}" = "$base" ] && [ -e "$path.c" ]; then continue; fi
    echo "$file:$line: $path does not exist"; bad=1
done <<< "$found"
exit $bad
