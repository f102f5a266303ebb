#!/usr/bin/env bash
# e2e.sh: end to end, a real training run with the loader (issues 34 and 37's end-to-end figures). Makes coco128
# repeated COPIES times as distinct files (so nothing is read twice under one name), then trains CONFIG on it once
# per RUN and prints the last epoch's images/s of each (its progress line at the epoch's end), the exit status and
# the wall seconds.
#
# Usage: bench/e2e.sh RUN [RUN ...]
#   RUN: NAME or NAME:ARGS, ARGS a comma-separated list of key=value (yolotrain arguments, after the defaults below)
#   and VAR=value for the environment (a name in capitals), e.g. `base nocache:cache=ram q8:CUDA_DEVICE_MAX_CONNECTIONS=8`.
# Environment: COCO128 (../shared/data/coco128), COPIES (32), SET (/tmp/yt-e2e-coco128xCOPIES), CONFIG (cfg/s.ini),
#   YOLOTRAIN (./yolotrain), OUT (runs/e2e), DEFAULTS ("device=0 epochs=2 batch=64 workers=4 augment=gpu
#   close_mosaic=0 noval=1 noplots=1 tensorboard=0").
# The figure of issue 37: `bench/e2e.sh base` on the GPU machine (4 workers, no cache) against `./bench/step cfg/s.ini
# 640 64 8 0 bf16` in the same call.
set -u
COCO128=${COCO128:-../shared/data/coco128}
COPIES=${COPIES:-32}
SET=${SET:-/tmp/yt-e2e-coco128x$COPIES}
CONFIG=${CONFIG:-cfg/s.ini}
YOLOTRAIN=${YOLOTRAIN:-./yolotrain}
OUT=${OUT:-runs/e2e}
DEFAULTS=${DEFAULTS:-"device=0 epochs=2 batch=64 workers=4 augment=gpu close_mosaic=0 noval=1 noplots=1 tensorboard=0"}
[ $# -ge 1 ] || { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ -x "$YOLOTRAIN" ] || { echo "e2e: $YOLOTRAIN is not an executable; build it (make) or set YOLOTRAIN" >&2; exit 2; }
[ -d "$COCO128/images/train2017" ] && [ -f "$COCO128/data.yaml" ] ||
    { echo "e2e: $COCO128 holds no images/train2017 and data.yaml; set COCO128 to coco128's folder" >&2; exit 2; }

# The set: every image and label file COPIES times, suffixed _K; data.yaml's classes from coco128's.
n_src=$(ls "$COCO128/images/train2017" | wc -l)
if [ "$(ls "$SET/images/train2017" 2>/dev/null | wc -l)" != $((n_src * COPIES)) ]; then
    rm -rf "$SET" && mkdir -p "$SET/images/train2017" "$SET/labels/train2017" || exit 2
    for k in $(seq -w 0 $((COPIES - 1))); do
        for f in "$COCO128"/images/train2017/*; do
            b=$(basename "$f"); cp "$f" "$SET/images/train2017/${b%.*}_$k.${b##*.}"
        done
        for f in "$COCO128"/labels/train2017/*.txt; do
            [ -f "$f" ] && cp "$f" "$SET/labels/train2017/$(basename "$f" .txt)_$k.txt"
        done
    done
    { echo "train: images/train2017"; echo "val: images/train2017"; sed -n '/^nc:/,$p' "$COCO128/data.yaml"; } > "$SET/data.yaml"
fi
mkdir -p "$OUT" || exit 2

status=0
for run in "$@"; do
    name=${run%%:*} args=()
    envs=()
    [ "$name" != "$run" ] && IFS=, read -r -a args <<< "${run#*:}"
    keys=()
    for a in "${args[@]}"; do
        case $a in [A-Z]*=*) envs+=("$a") ;; *) keys+=("$a") ;; esac
    done
    t0=$(date +%s)
    # shellcheck disable=SC2086  # DEFAULTS is a list of words
    env "${envs[@]}" "$YOLOTRAIN" "$CONFIG" data="$SET/data.yaml" $DEFAULTS project="$OUT" name="$name" exist_ok=1 \
        "${keys[@]}" > "$OUT/$name.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] && status=1
    # the last epoch's closing progress line: "... 64/64 873.2img/s ETA 0:00"
    ips=$(grep -a 'img/s' "$OUT/$name.log" | tail -1 | sed -n 's/.* \([0-9.]*\)img\/s.*/\1/p')
    printf '%-16s %10s images/s  (exit %d, %d s; %s %s)\n' "$name" "${ips:--}" $rc $(( $(date +%s) - t0 )) \
        "${envs[*]}" "${keys[*]}"
done
exit $status
