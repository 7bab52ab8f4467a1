#!/usr/bin/env bash
# Stage the data that parts (c) and (d) of the GPU check need for the trip to the GPU machine.
# The `../shared` beside a checkout does not travel there; a folder of the checkout that git
# ignores travels when the device run names it in `carry`.
# This copies the book text and SST-2's train/dev files (about 38 MB; what travels is capped at
# 64 MiB) into .gpu-data/, which .git/info/exclude keeps out of git, so nothing of it can be
# committed. Run it just before the device call; delete .gpu-data/ afterwards.
#
#   bash gpu_check/stage_data.sh [DATA]      (default ../shared/data)
#   then the device run: carry [".gpu-data"], command "bash gpu_check/gpu_check.sh $OUT"
set -euo pipefail
cd "$(dirname "$0")/.."
SRC="${1:-../shared/data}"
DEST=.gpu-data
if [ ! -d "$SRC/books" ] || [ ! -f "$SRC/glue/SST-2/train.tsv" ] || [ ! -f "$SRC/glue/SST-2/dev.tsv" ]; then
    echo "gpu_stage_data: error: $SRC has no books/ and glue/SST-2/{train,dev}.tsv" >&2
    exit 2
fi
mkdir -p .git/info
grep -qx "/$DEST/" .git/info/exclude 2>/dev/null || echo "/$DEST/" >> .git/info/exclude
if [ -e "$DEST" ] && [ ! -f "$DEST/.staged-by-gpu-check" ]; then
    echo "gpu_stage_data: error: $DEST exists and was not staged by this script" >&2
    exit 2
fi
rm -rf "$DEST"
mkdir -p "$DEST/books" "$DEST/glue/SST-2"
cp "$SRC"/books/*.txt "$DEST/books/"
cp "$SRC/glue/SST-2/train.tsv" "$SRC/glue/SST-2/dev.tsv" "$DEST/glue/SST-2/"
touch "$DEST/.staged-by-gpu-check"
du -sh "$DEST"
