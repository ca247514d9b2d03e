#!/usr/bin/env bash
# Issue 26, item 3 on the GPU host: a real DDP job (benchmarks/jobs/ddp_jpeg.py, torchrun, 2 ranks, ResNet on the
# GPU(s), JPEG decoding in each rank's workers on its own CPUs) with a straggler made on purpose, traced by
# `lotus run`; `lotus analyze ranks` must name the rank and its cause. The job's own clock (its loop's wait in
# next() per rank) is written beside (truth/). One command, results in $OUT:
#
#   OUT=res VARIANTS="none cpus:1 transform:1 step:0" bash benchmarks/device_ranks.sh
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-ranks}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
data 8192 || exit 1
{ nvidia-smi --query-gpu=name --format=csv,noheader; nproc; $PY -c "import torch; print(torch.__version__)"; } \
    > "$OUT/env.txt" 2>&1
for v in ${VARIANTS:-none cpus:1 transform:1 step:0}; do
    kind=${v%%:*}; r=${v#*:}; [ "$kind" = none ] && r=-1
    name=$kind; t0=$(date +%s)
    rm -rf "${WORK:?}/$name"
    $PY -m lotus run -o "$WORK/$name" -- $PY -m torch.distributed.run --standalone --nproc-per-node "${RANKS:-2}" \
        "$REPO/benchmarks/jobs/ddp_jpeg.py" --data "$DATA" --images "${IMAGES:-8192}" --epochs "${EPOCHS:-2}" \
        --batch-size "${BATCH:-64}" --workers "${WORKERS:-5}" --slow "$kind" --slow-rank "$r" \
        --slow-cpus "${SLOW_CPUS:-2}" --slow-ms "${SLOW_MS:-40}" --out "$OUT/$name/truth" \
        > "$OUT/$name.run.log" 2>&1
    echo "$name: rc $? in $(( $(date +%s) - t0 )) s"
    $PY -m lotus analyze ranks -d "$WORK/$name" > "$OUT/$name/ranks.txt" 2>&1
    $PY -m lotus analyze ranks -d "$WORK/$name" --json > "$OUT/$name/ranks.json" 2>"$OUT/$name/ranks.err"
    $PY -m lotus analyze verdict -d "$WORK/$name" > "$OUT/$name/verdict.txt" 2>&1
    head -8 "$OUT/$name/ranks.txt"; cat "$OUT/$name"/truth/*.json; echo
done
pack_out  # more than 8 files: one archive (device_lib.sh)
