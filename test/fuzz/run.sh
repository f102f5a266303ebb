#!/usr/bin/env bash
# run.sh: build the libFuzzer targets of test/fuzz/ and fuzz each for a bounded time.
#
#   bash test/fuzz/run.sh [target ...]     default: every target; run from anywhere
#   FUZZ_SECONDS=60  seconds per target (default 60); FUZZ_SECONDS=0 only replays the corpora
#   FUZZ_CC=clang    the compiler (needs clang's libFuzzer runtime: Debian/Ubuntu libclang-rt-14-dev,
#                    or libclang-rt-dev for the default clang)
#
# Targets (each links the project's own sources, listed in SRCS below, with ASan and UBSan):
#   fuzz_config       cfg/ INI text + hyp yaml + command-line overrides -> config_load, print round trip
#   fuzz_datayaml     data.yaml text -> dataspec_read, then dataset_open inside a scratch dataset
#   fuzz_labels       one label file -> dataset_open of a one-image scratch dataset
#   fuzz_listfile     one image-list file (train: list.txt) -> dataset_open of a two-image scratch dataset
#   fuzz_annot        a COCO .json or a VOC .xml (first byte picks) -> dataset_open of a one-image scratch dataset
#   fuzz_image        JPEG/PNG bytes -> image_decode_mem and image_info
#   fuzz_exif         an APP1 payload -> exif_orientation, exif_orient; spliced into a JPEG -> decode, info
#   fuzz_safetensors  file bytes -> st_open, st_find, st_read_f32
#   fuzz_pt           file bytes -> pt_open (zip + restricted pickle machine), st_find, st_read_f32
# Binaries go to build/fuzz/, the growing corpus to build/fuzz/corpus/<target>/ (seeded from
# test/fuzz/corpus/<target>/, which stays as committed), crashing inputs to build/fuzz/crashes/.
# Prints libFuzzer's final line per target (executions, exec/s, coverage) and exits 1 on any crash,
# leak, sanitizer report, failed check of a target (abort) or timeout (10 s for one input). On a
# failure it also prints what the target wrote before the report, libFuzzer's seed and the input in
# base64, so a failure seen only in CI's output can be rebuilt (base64 -d > input). A crash found
# becomes a regression file once fixed:
#   build/fuzz/fuzz_x build/fuzz/crashes/fuzz_x-crash-...   # reproduce
#   cp build/fuzz/crashes/fuzz_x-crash-... test/fuzz/corpus/fuzz_x/regress-<what>   # after the fix
# Every run replays the whole seed corpus first, so the regression files are checked each time.
set -u
cd "$(dirname "$0")/../.." || exit 2
CC=${FUZZ_CC:-clang}
SECONDS_EACH=${FUZZ_SECONDS:-60}
OUT=build/fuzz
CFLAGS="-std=c11 -D_GNU_SOURCE -O1 -g -I. -pthread -Wall -Wextra -Wno-unused-parameter -Wshadow
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
LIBS="-lpng -ljpeg -linih -lyaml -lz -lm"

IMAGE="io/image.c io/image_jpeg.c io/image_png.c io/exif.c core/base/util.c core/base/readfile.c"
DATASET="io/dataset.c io/data_yaml.c io/annot.c io/coco.c io/voc.c io/json.c io/xml.c io/strlist.c $IMAGE"
declare -A SRCS=(
    [fuzz_config]="cfg/config.c cfg/hyp_yaml.c cfg/layers.c cfg/schema.c $DATASET"
    [fuzz_datayaml]="$DATASET"
    [fuzz_labels]="$DATASET"
    [fuzz_listfile]="$DATASET"
    [fuzz_annot]="$DATASET"
    [fuzz_image]="$IMAGE"
    [fuzz_exif]="$IMAGE"
    [fuzz_safetensors]="io/safetensors.c core/base/util.c core/base/readfile.c"
    [fuzz_pt]="io/pt.c io/zip.c io/safetensors.c core/base/util.c core/base/readfile.c"
)
declare -A MAX_LEN=([fuzz_config]=8192 [fuzz_datayaml]=2048 [fuzz_labels]=2048 [fuzz_listfile]=2048 [fuzz_annot]=4096
                    [fuzz_image]=8192 [fuzz_exif]=1024 [fuzz_safetensors]=4096 [fuzz_pt]=4096)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_config fuzz_datayaml fuzz_labels fuzz_listfile fuzz_annot fuzz_image fuzz_exif fuzz_safetensors fuzz_pt)

mkdir -p "$OUT/crashes"
failed=0
for t in "${targets[@]}"; do
    if [ -z "${SRCS[$t]:-}" ]; then echo "run.sh: unknown target $t" >&2; exit 2; fi
    # shellcheck disable=SC2086  # the source and flag lists are meant to split
    if ! $CC $CFLAGS -o "$OUT/$t" "test/fuzz/$t.c" ${SRCS[$t]} $LIBS; then
        echo "$t: build failed (is libclang_rt.fuzzer installed? see the header)" >&2
        exit 2
    fi
    mkdir -p "$OUT/corpus/$t"
    log="$OUT/$t.log"
    replay_only=()
    [ "$SECONDS_EACH" = 0 ] && replay_only=(-runs=0)
    # first dir: where new inputs go; the seed dir is only read
    "$OUT/$t" "$OUT/corpus/$t" "test/fuzz/corpus/$t" -max_total_time="$SECONDS_EACH" \
        -max_len="${MAX_LEN[$t]}" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
        -artifact_prefix="$OUT/crashes/$t-" "${replay_only[@]}" \
        </dev/null >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]* ft: [0-9]* corp: [0-9]*/[0-9a-zA-Z]*' "$log" | tail -1)
    echo "$t: ${execs:-?} executions, ${rate:-?} exec/s, $cov"
    if [ $rc -ne 0 ]; then
        failed=1
        grep -m1 -E 'ERROR: |SUMMARY: |==[0-9]+==|runtime error|deadly signal|-- timeout' "$log"
        # what the target itself printed before the report (a failed check's message, perror's
        # line), without libFuzzer's progress lines: CI keeps only this output, not the log
        sed -n '/==[0-9]*== *ERROR: /q;/^#[0-9]/d;/^INFO: /d;/^MS: /d;p' "$log" | tail -n 25 | sed 's/^/  | /'
        art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        echo "$t: FAILED (exit $rc; libFuzzer's $(grep -m1 -o 'Seed: [0-9]*' "$log")); full log: $log"
        if [ -n "$art" ]; then
            # the input itself, so a failure seen only in CI can be rebuilt: base64 -d > input
            echo "  the input ($(wc -c <"$art") bytes), base64:"
            base64 -w 100 "$art" | sed 's/^/    /'
            echo "  reproduce: $OUT/$t $art"
            echo "  once fixed, keep it as a regression file: cp $art test/fuzz/corpus/$t/regress-<what>"
        fi
    fi
done
exit $failed
