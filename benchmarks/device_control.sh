#!/usr/bin/env bash
# Issue 24: does the control probe (one setting of the search measured again at its end, lotus.analysis.runspread)
# see the pace move between runs, and do the intervals it widens hold the job alone's rate at other moments? The
# oversub shape's 4-CPU setting on the GPU host, where the job alone read 734-920 samples/s within four minutes
# (ResNet-18 on generated JPEGs, batch 128, bf16, channels_last, pin_memory, persistent workers; its own 16 workers
# on 4 vCPUs). Each round: the job alone (by its own clock, whole epochs, taskset 0-3) at 4 and 16 workers; `lotus
# tune --only num_workers` of the job with 16 workers (the corpus's command: 8-s probe cap, then its control); the
# job alone at 4, 16 and the chosen count again. Everything under $OUT (more than 8 files: in
# one archive, results.tgz, device_lib.sh pack_out: the device tool brings back at most 8 files a call).
#
#   OUT=res ROUNDS=2 bash benchmarks/device_control.sh        # START=2 to go on from round 2 in another call
#   ALONE=0: tune only (no runs of the job alone)
#   MODE=truth-epochs ROUNDS=3 LONG_S=40: how noisy is a truth? The job alone at WORKERS (4) alternating a short
#     truth (--seconds 8: one 64-batch epoch counted, as the corpus's) with a long one (--seconds LONG_S: ~5
#     epochs), ROUNDS times, no tune: if runs differed only by their epochs, long truths would spread less
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
{ nvidia-smi --query-gpu=name --format=csv,noheader; nproc; $PY -c "import torch; print(torch.__version__)"; } \
    > "$OUT/env.txt" 2>&1
J="$DATA -a ${ARCH:-resnet18} -b 128 --bf16 --channels-last --pin-memory --persistent-workers"
alone() {  # round, when, workers: the job alone's rate over whole epochs (ALONE=0: none, tune only)
    [ "${ALONE:-1}" = 0 ] && return 0
    local t0=$SECONDS
    taskset -c "$CPUS" $PY "$REPO/benchmarks/reference_train.py" $J --seconds 8 --whole-epochs -j "$3" \
        --json "$OUT/r$1-$2-w$3.json" > /dev/null 2>> "$OUT/alone.log"
    echo "r$1 $2 w$3: rc $? $((SECONDS - t0)) s $(date -u +%T)" >> "$OUT/steps.log"
}
if [ "${MODE:-tune}" = truth-epochs ]; then
    for r in $(seq 1 "${ROUNDS:-3}"); do
        for s in 8 "${LONG_S:-40}"; do
            t0=$SECONDS
            taskset -c "$CPUS" $PY "$REPO/benchmarks/reference_train.py" $J -j "${WORKERS:-4}" --seconds "$s" \
                --whole-epochs --json "$OUT/r$r-s$s.json" > /dev/null 2>> "$OUT/alone.log"
            echo "r$r s$s: rc $? $((SECONDS - t0)) s $(date -u +%T)" >> "$OUT/steps.log"
        done
    done
    cat "$OUT/steps.log"
    pack_out
    exit 0
fi
for r in $(seq "${START:-1}" "${ROUNDS:-1}"); do
    alone "$r" before 4
    alone "$r" before 16
    t0=$SECONDS
    $PY -m lotus tune --only num_workers --cpus "$CPUS" --max-seconds 8 --budget-minutes "${TUNE_MIN:-4}" \
        --max-workers 32 --out "$WORK/tune-r$r" --json -- $PY "$REPO/benchmarks/reference_train.py" $J \
        -j 16 --seconds 100000 > "$OUT/tune-r$r.json" 2> "$OUT/tune-r$r.log"
    echo "r$r tune: rc $? $((SECONDS - t0)) s $(date -u +%T)" >> "$OUT/steps.log"
    chosen=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['best']['num_workers'])" "$OUT/tune-r$r.json" \
             2>/dev/null || echo 4)
    alone "$r" after 4
    alone "$r" after 16
    case "$chosen" in 4|16) ;; *) alone "$r" after "$chosen" ;; esac
done
cat "$OUT/steps.log"
pack_out
