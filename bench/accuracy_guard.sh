#!/usr/bin/env bash
# accuracy_guard.sh: issue 34's accuracy guard (a benchmark, not a test). For each model, SEEDS runs of EPOCHS
# epochs at batch BATCH on DATA with the default path (bf16, every fused form) and as many with precision=fp32 and
# the fused forms off (YT_FUSE=0 YT_GRAD_BF16=0 YT_CONV_STATS=0); the best epoch's mAP50 and mAP50-95 of each run
# (the "Best epoch" line), their mean and spread (max - min) per path, and whether the two paths' means agree within
# the larger spread. Prints a markdown table for bench/RESULTS.md; exits 1 when a mean disagrees, 2 on a failed run.
#
# Usage: bench/accuracy_guard.sh [DATA]   (a data.yaml or a built-in set's name; default ../shared/data/coco128/data.yaml)
# Environment: CONFIGS ("cfg/s.ini cfg/yolo26s.ini"), SEEDS (3), EPOCHS (60), BATCH (16), DEVICE (0; empty: none given),
#   OUT (runs/accuracy_guard), YOLOTRAIN (./yolotrain), EXTRA (more key=value for every run, e.g. fraction=0.5),
#   PARALLEL (1: runs one at a time; N: a model's runs N at a time on the one device, which changes their speed only).
# On an H100 each gelan-s or YOLO26-s run of 60 epochs on coco128 takes 45-60 s (issue 34).
set -u
DATA=${1:-../shared/data/coco128/data.yaml}
CONFIGS=${CONFIGS:-"cfg/s.ini cfg/yolo26s.ini"}
SEEDS=${SEEDS:-3}
EPOCHS=${EPOCHS:-60}
BATCH=${BATCH:-16}
DEVICE=${DEVICE-0}
OUT=${OUT:-runs/accuracy_guard}
YOLOTRAIN=${YOLOTRAIN:-./yolotrain}
EXTRA=${EXTRA:-}
PARALLEL=${PARALLEL:-1}
[ -x "$YOLOTRAIN" ] || { echo "accuracy_guard: $YOLOTRAIN is not an executable; build it (make) or set YOLOTRAIN" >&2; exit 2; }
case $DATA in *.yaml|*.yml) [ -f "$DATA" ] || { echo "accuracy_guard: $DATA: no such file; give a data.yaml" >&2; exit 2; } ;; esac
mkdir -p "$OUT" || exit 2

# One run: its best epoch's "mAP50 mAP50-95" on stdout, or nothing (the log says why).
run() {   # run NAME CONFIG SEED PATH(default|reference)
    local name=$1 cfg=$2 seed=$3 path=$4 log="$OUT/$1.log"
    local env=() keys=()
    [ -n "$DEVICE" ] && keys+=(device="$DEVICE")
    if [ "$path" = reference ]; then env=(YT_FUSE=0 YT_GRAD_BF16=0 YT_CONV_STATS=0); keys+=(precision=fp32); fi
    # shellcheck disable=SC2086
    env "${env[@]}" "$YOLOTRAIN" "$cfg" data="$DATA" epochs="$EPOCHS" batch="$BATCH" seed="$seed" \
        project="$OUT" name="$name" exist_ok=1 noplots=1 tensorboard=0 "${keys[@]}" $EXTRA > "$log" 2>&1 || return 0
    grep -o 'Best epoch [0-9]*: .*mAP50 [0-9.]* mAP50-95 [0-9.]*' "$log" | tail -1 | awk '{print $(NF-2), $NF}'
}

# mean and spread of a list of numbers: "mean spread"
stats() { awk '{ s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1 }
               END { if (NR) printf "%.4f %.4f\n", s / NR, hi - lo }'; }

status=0
echo "| model | path | runs | mAP50 mean (spread) | mAP50-95 mean (spread) |"
echo "| --- | --- | --- | --- | --- |"
for cfg in $CONFIGS; do
    model=$(basename "$cfg" .ini)
    declare -A m50=() m95=()
    # every run of the model, PARALLEL at a time; each writes its result to its own file
    queue=()
    for path in default reference; do
        for seed in $(seq 1 "$SEEDS"); do queue+=("$path $seed"); done
    done
    for job in "${queue[@]}"; do
        read -r path seed <<< "$job"
        ( run "$model-$path-seed$seed" "$cfg" "$seed" "$path" > "$OUT/$model-$path-seed$seed.result" ) &
        while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do sleep 1; done
    done
    wait
    for path in default reference; do
        : > "$OUT/$model.$path.txt"
        for seed in $(seq 1 "$SEEDS"); do
            r=$(cat "$OUT/$model-$path-seed$seed.result")
            if [ -z "$r" ]; then
                echo "accuracy_guard: $model $path seed $seed failed or printed no best epoch; see $OUT/$model-$path-seed$seed.log" >&2
                status=2
                continue
            fi
            echo "$r" >> "$OUT/$model.$path.txt"
        done
        read -r m50m m50s < <(cut -d' ' -f1 "$OUT/$model.$path.txt" | stats)
        read -r m95m m95s < <(cut -d' ' -f2 "$OUT/$model.$path.txt" | stats)
        m50[$path]="${m50m:-nan} ${m50s:-nan}"
        m95[$path]="${m95m:-nan} ${m95s:-nan}"
        echo "| $model | $path | $(wc -l < "$OUT/$model.$path.txt") | ${m50m:-} (${m50s:-}) | ${m95m:-} (${m95s:-}) |"
    done
    # the means agree when they differ by no more than the larger of the two paths' spreads
    verdict=$(awk -v a="${m50[default]}" -v b="${m50[reference]}" -v c="${m95[default]}" -v d="${m95[reference]}" 'BEGIN {
        split(a, x, " "); split(b, y, " "); split(c, u, " "); split(d, v, " ");
        if (x[1] == "nan" || y[1] == "nan" || u[1] == "nan" || v[1] == "nan") { print "incomplete"; exit }
        s1 = x[2] > y[2] ? x[2] : y[2]; s2 = u[2] > v[2] ? u[2] : v[2];
        d1 = x[1] - y[1]; if (d1 < 0) d1 = -d1; d2 = u[1] - v[1]; if (d2 < 0) d2 = -d2;
        printf "%s (mAP50 means %.4f apart, spread %.4f; mAP50-95 %.4f apart, spread %.4f)\n",
               d1 <= s1 && d2 <= s2 ? "agree" : "DISAGREE", d1, s1, d2, s2 }')
    echo "$model: $verdict" >&2
    case $verdict in DISAGREE*) [ $status -eq 0 ] && status=1 ;; incomplete*) status=2 ;; esac
    unset m50 m95
done
exit $status
