#!/usr/bin/env bash
# make layers (part): every kernel in gpu/*.cu begins with pdl_entry() (gpu/pdl.cuh). gpu/graph_pdl.c lets a
# kernel of ours start before the one it follows has finished; one that touched memory before waiting would
# race with it. Prints each kernel that does not, and fails.
cd "$(dirname "$0")/.."
awk '
function report() { printf "%s:%d: a kernel whose first statement is not pdl_entry();\n", FILENAME, kline; bad = 1 }
FNR == 1 { state = 0 }
{
    line = $0
    if (state == 0) {
        i = index(line, "__global__")
        if (!i) next
        state = 1; depth = 0; kline = FNR; line = substr(line, i + 10)
    }
    for (k = 1; k <= length(line); k++) {
        ch = substr(line, k, 1)
        if (state == 1) {
            if (ch == "(") depth++
            else if (ch == ")") depth--
            else if (ch == ";" && depth == 0) { state = 0; break }         # a declaration
            else if (ch == "{" && depth == 0) state = 2
        } else if (state == 2) {
            if (ch ~ /[ \t]/) continue
            if (substr(line, k, 2) == "//") break                        # a comment: the next line
            if (substr(line, k, 12) != "pdl_entry();") report()
            state = 0
            # a second kernel on the same line is not looked for
            break
        }
    }
}
END { exit bad }
' gpu/*.cu
