#!/usr/bin/env bash
# make layers (part): the folders of core/ (core/README.md) are layers, and an include goes down only.
# (a) Folders, lowest first. A file may include a header of its own folder or of a folder ranked below
#     its own: core/base/ (what io/ and cfg/ may use) < cfg/ < io/ < core/spec/ (ops, model, losses,
#     optimizers, the backend table) < core/trainer/ (the Trainer of one device, the families) <
#     core/procs/ (several processes, the transport) < core/devices/ (several devices in this process, the
#     backends) < core/train/ (the step over the run's devices and processes, the run) < core/eval/
#     (validation, detection, export, plots) < core/main.c. A .c or .h file directly in core/
#     other than main.c has no folder and fails. The known includes that go up are listed below
#     (UP_OK); a new one fails.
# (b) No cycle between files: a .c file and its .h are one unit (an X_impl.h belongs to X), an edge is
#     an #include "core/..", "io/.." or "cfg/.." between units of core/ io/ cfg/, and tsort (coreutils)
#     finds the loops. The known loops are broken by the edges of CYCLE_OK, each commented; a new loop
#     fails.
# Prints each miss and fails. Only bash, grep, awk, sort and tsort.
cd "$(dirname "$0")/.."

# folder -> rank (lowest first)
RANKS='base 1 cfg 2 io 3 spec 4 trainer 5 procs 6 devices 7 train 8 eval 9 main 10'

# (a) includes that go up a layer, as FILE HEADER. The run (core/train/train.c) validates and draws each
# epoch. (The multi-device circle is gone, issue 35: the step over devices and processes,
# core/train/step.c, drives several devices and processes, which run the phases of each device's Trainer
# below them, core/trainer/.)
UP_OK='
core/train/train.c core/eval/val.h
core/train/train.c core/eval/plots.h
core/train/train.c core/eval/drawer.h
'

# (b) edges, as UNIT UNIT, left out of the loop search; each breaks a known loop.
CYCLE_OK='
core/spec/loss_host core/spec/loss
core/spec/loss_host core/spec/loss26
core/eval/confusion core/eval/metrics
cfg/parts cfg/config
io/image_codec io/image
'
# Why each: loss_host.h names the types of loss.h and loss26.h, whose .c files call loss_host's
# preparation; confusion.h and metrics.h each name the other's types; cfg/parts.h and
# io/image_codec.h are the inner headers of cfg/config.c and io/image.c, which include them back.

bad=0
edges=$(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"(core|io|cfg)/[A-Za-z0-9_/]+\.h"' \
        --include='*.c' --include='*.h' core io cfg |
        awk -F: '{ match($0, /"[^"]+"/); print $1, $2, substr($0, RSTART + 1, RLENGTH - 2) }')
if [ "$(printf '%s\n' "$edges" | grep -c .)" -lt 100 ]; then
    echo "test/layer_check.sh: could not read the includes of core/ io/ cfg/"; exit 1
fi

# ---- (a) the direction between folders
out=$(printf '%s\n' "$edges" | awk -v ranks="$RANKS" -v ok="$UP_OK" '
function folder(p,    n, a) {
    n = split(p, a, "/")
    if (a[1] != "core") return a[1]
    if (n == 2) return p == "core/main.c" ? "main" : "none"
    return a[2]
}
BEGIN {
    n = split(ranks, r, " "); for (i = 1; i < n; i += 2) rank[r[i]] = r[i + 1]
    n = split(ok, o, "\n"); for (i = 1; i <= n; i++) if (o[i] != "") allowed[o[i]] = 1
}
{
    f = $1; h = $3; a = folder(f); b = folder(h)
    if (!(a in rank)) { if (!seen[f]++) print f ": in no folder of core/ (core/README.md names them)"; next }
    if (!(b in rank)) { print f ":" $2 ": includes " h ", in no folder of core/"; next }
    if (a == b || rank[b] < rank[a]) next
    if ((f " " h) in allowed) { used[f " " h] = 1; next }
    print f ":" $2 ": includes " h ": core/README.md layers go " (a == "main" ? "" : a " -> ") b " is upward"
}
END { for (k in allowed) if (!(k in used)) print "test/layer_check.sh: UP_OK names " k ", which is no longer an upward include: remove it" }')
if [ -n "$out" ]; then echo "$out"; bad=1; fi

# ---- (b) no loop between files
pairs=$(printf '%s\n' "$edges" | awk -v ok="$CYCLE_OK" '
function unit(p) { sub(/\.[ch]$/, "", p); sub(/_impl$/, "", p); return p }
BEGIN { n = split(ok, o, "\n"); for (i = 1; i <= n; i++) if (o[i] != "") skip[o[i]] = 1 }
{ u = unit($1); v = unit($3); if (u != v && !((u " " v) in skip)) print u, v; if ((u " " v) in skip) used[u " " v] = 1 }
END { for (k in skip) if (!(k in used)) print "UNUSED", k }' | sort -u)
unused=$(printf '%s\n' "$pairs" | grep '^UNUSED ' | sed 's/^UNUSED /test\/layer_check.sh: CYCLE_OK names /; s/$/, no longer an include: remove it/')
if [ -n "$unused" ]; then echo "$unused"; bad=1; fi
loops=$(printf '%s\n' "$pairs" | grep -v '^UNUSED ' | tsort 2>&1 >/dev/null)
if [ -n "$loops" ]; then
    echo "test/layer_check.sh: a loop of includes between files (each block: the files of one loop):"
    printf '%s\n' "$loops" | sed 's/^tsort: -: input contains a loop:/--/; s/^tsort: /  /'
    bad=1
fi
exit $bad
