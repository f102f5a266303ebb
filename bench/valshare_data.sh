#!/bin/sh
# valshare_data.sh: the dataset of issue 18's epoch-level figure ("a 60-epoch run of batch 16 on 200
# training / 90 validation images spends <= 15% of its wall time in validation"), built from coco128.
#   bench/valshare_data.sh COCO128_DIR OUT_DIR      (then: ./yolotrain cfg/s.ini data=OUT_DIR/data.yaml ...)
# coco128 has 128 images (its own val split is the same 128). Here:
#   train: its 128 images, then its first 72 again under other names (r_*.jpg): 200 images, of which
#          72 are repeats (the loader dedupes a path listed twice, so the repeats are copies);
#   val:   its first 90 images (in name order), also among the training images, as coco128's own val is.
# Images and labels are copied (cp), so OUT_DIR stands alone; an image without a label file stays without.
set -eu
if [ $# -ne 2 ]; then echo "usage: $0 COCO128_DIR OUT_DIR" >&2; exit 2; fi
src=$1 out=$2
img=$src/images/train2017 lab=$src/labels/train2017
[ -d "$img" ] || { echo "$0: $img: no such folder (want coco128's images/train2017)" >&2; exit 2; }
n=$(ls "$img" | grep -ci '\.jpg$' || true)
[ "$n" -ge 90 ] || { echo "$0: $img holds $n images; want at least 90" >&2; exit 2; }
rm -rf "$out/images" "$out/labels"
mkdir -p "$out/images/train" "$out/labels/train" "$out/images/val" "$out/labels/val"
put() {   # put STEM SPLIT NAME: image STEM.jpg (and its labels) as SPLIT/NAME
    cp "$img/$1.jpg" "$out/images/$2/$3.jpg"
    if [ -f "$lab/$1.txt" ]; then cp "$lab/$1.txt" "$out/labels/$2/$3.txt"; fi
}
k=0
for f in $(ls "$img" | grep -i '\.jpg$' | sort); do
    s=${f%.*}
    put "$s" train "$s"
    if [ $k -lt 72 ]; then put "$s" train "r_$s"; fi
    if [ $k -lt 90 ]; then put "$s" val "$s"; fi
    k=$((k + 1))
done
{
    echo "# issue 18's 200 training / 90 validation images from $src (bench/valshare_data.sh)"
    echo "train: images/train"
    echo "val: images/val"
    sed -n '/^nc:/,$p' "$src/data.yaml"
} > "$out/data.yaml"
echo "$out/data.yaml: train $(ls "$out/images/train" | wc -l) images, val $(ls "$out/images/val" | wc -l)"
