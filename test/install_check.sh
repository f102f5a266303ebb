#!/usr/bin/env bash
# make install / make uninstall into a temporary PREFIX (cfg/README.md): the installed binary,
# run from a folder without configs, finds them by bare name (s.ini, model=yolo26n.ini, cfg/t.ini);
# a missing one says where it looked; make uninstall leaves nothing behind. Prints ok/FAIL lines as
# the test binaries do and exits 1 on a failure. Runs from the repository root; the make variables of
# the calling make (NVCC=, ...) reach `make install` through MAKEFLAGS.
set -u
root=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/yt-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix dir"          # a blank in the path must not matter
fail=0
check() {                         # check NAME CONDITION-EXIT-STATUS [DETAIL]
    if [ "$2" -eq 0 ]; then echo "ok   make install: $1"; else echo "FAIL make install: $1"; [ -n "${3:-}" ] && printf '    %s\n' "$3"; fail=1; fi
}
out=$(make -s --no-print-directory install PREFIX="$prefix" 2>&1); rc=$?
check "installs" $rc "$out"
[ -x "$prefix/bin/yolotrain" ] && [ -f "$prefix/share/yolotrain/cfg/s.ini" ] && [ -f "$prefix/share/yolotrain/cfg/yolo26n.ini" ]
check "binary in PREFIX/bin, configs in PREFIX/share/yolotrain/cfg" $?
mkdir -p "$tmp/work" && cd "$tmp/work"
out=$("$prefix/bin/yolotrain" info s.ini 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "share/yolotrain/cfg/s.ini: 23 layers" <<<"$out"
check "yolotrain info s.ini finds the installed config" $? "$out"
out=$("$prefix/bin/yolotrain" info model=yolo26n.ini 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "share/yolotrain/cfg/yolo26n.ini:" <<<"$out"
check "model=yolo26n.ini finds the installed config" $? "$out"
out=$("$prefix/bin/yolotrain" info cfg/t.ini 2>&1); rc=$?
[ $rc -eq 0 ] && grep -q "share/yolotrain/cfg/t.ini:" <<<"$out"
check "cfg/t.ini finds the installed config" $? "$out"
printf '[model]\nnc = 3\n' > s.ini
out=$("$prefix/bin/yolotrain" info s.ini 2>&1)
grep -q "name a model config\|no layers\|layers" <<<"$out" && ! grep -q "share/yolotrain" <<<"$out"
check "a config in the current directory wins over the installed one" $? "$out"
out=$("$prefix/bin/yolotrain" info nosuch.ini 2>&1); rc=$?
[ $rc -eq 2 ] && grep -q "nosuch.ini: cannot open" <<<"$out" && grep -q "nor in .*share/yolotrain/cfg" <<<"$out"
check "a missing config says where it was looked for" $? "$out"
cd "$root"
out=$(make -s --no-print-directory uninstall PREFIX="$prefix" 2>&1); rc=$?
[ $rc -eq 0 ] && [ ! -e "$prefix/bin/yolotrain" ] && [ ! -e "$prefix/share/yolotrain" ]
check "make uninstall removes what make install wrote" $? "$out"
exit $fail
