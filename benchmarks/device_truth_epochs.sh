#!/usr/bin/env bash
# Issue 24: how noisy is a truth? The job alone (benchmarks/reference_train.py, by its own clock over whole epochs)
# at one setting, alternating a short truth (--seconds 8: one 64-batch epoch counted, as the corpus's truths) with
# a long one (--seconds ${LONG_S:-40}: ~5 epochs), ROUNDS times, on the oversub shape's 4-CPU cell (ResNet-18 on
# generated JPEGs, 4 workers on 4 vCPUs). If the host's pace drifted, long truths would spread as much as short ones.
#
#   OUT=res ROUNDS=3 bash benchmarks/device_truth_epochs.sh
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-control}
DATA=$WORK/jpegs
CPUS=${CPUS:-0-3}
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
data 8192 > "$OUT/data.log" 2>&1 || exit 1
J="$DATA -a ${ARCH:-resnet18} -b 128 --bf16 --channels-last --pin-memory --persistent-workers -j ${WORKERS:-4}"
for r in $(seq 1 "${ROUNDS:-3}"); do
    for s in 8 "${LONG_S:-40}"; do
        t0=$SECONDS
        taskset -c "$CPUS" $PY "$REPO/benchmarks/reference_train.py" $J --seconds "$s" --whole-epochs \
            --json "$OUT/r$r-s$s.json" > /dev/null 2>> "$OUT/alone.log"
        echo "r$r s$s: rc $? $((SECONDS - t0)) s $(date -u +%T)" >> "$OUT/steps.log"
    done
done
cat "$OUT/steps.log"
