#!/usr/bin/env bash
# Issue 24: why did `lotus sensitivity`'s probes of the gpu_bound job (ResNet-152 on generated JPEGs, batch 128,
# bf16, channels_last, pin_memory, persistent workers) read 10-15% under the job alone at the same CPUs and
# workers? benchmarks/traced_vs_alone.py with its three variants, alternating run by run: the job alone and
# `lotus run` of it (both by the job's own clock, over its 8-s window and over whole epochs: --whole-epochs),
# and the job as sensitivity probes it (`lotus run --steps 600 --precision 0.03 --max-seconds 90 --workers N`,
# lotus's rate). Every trace comes back (tva.tgz), so a probe's window can be compared with a traced run's.
#
#   OUT=res bash benchmarks/device_probe_gap.sh            # SETTINGS="0-15:16:3 0-7:6:2" (cpus:workers:rounds)
#   OUT=res ARCH=resnet18 SETTINGS="0-3:4:3" bash benchmarks/device_probe_gap.sh   # the oversub shape's 4-CPU cell
#   PROBE_S=8 VARIANTS=alone,probe: probes capped at 8 s (benchmarks/corpus.py's --seconds), the job alone beside them
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-gap}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
data 8192 > "$OUT/data.log" 2>&1 || exit 1
{ nvidia-smi --query-gpu=name --format=csv,noheader; nproc; $PY -c "import torch; print(torch.__version__)"; } \
    > "$OUT/env.txt" 2>&1
# every 30 s and after each setting: a call killed at its limit still brings back the rounds done
pack() { (cd "$WORK" && tar czf "$OUT/.tva$BASHPID" tva 2>/dev/null; mv -f "$OUT/.tva$BASHPID" "$OUT/tva.tgz"); }
( while sleep 30; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1
J="$DATA -a ${ARCH:-resnet152} -b 128 --bf16 --channels-last --pin-memory --persistent-workers --seconds 8"
for s in ${SETTINGS:-0-15:16:3 0-7:6:2}; do
    cpus=${s%%:*}; rest=${s#*:}; w=${rest%%:*}; rounds=${rest#*:}
    name=c${cpus//[^0-9]/_}-w$w
    $PY "$REPO/benchmarks/traced_vs_alone.py" --cpus "$cpus" --rounds "$rounds" --variants "${VARIANTS:-alone,traced,probe}" \
        --probe "--steps 600 --precision 0.03 --max-seconds ${PROBE_S:-90} --workers $w" --out "$WORK/tva/$name" \
        -- $J --whole-epochs -j "$w" > "$OUT/$name.log" 2>&1
    echo "$name: rc $?"
    pack
done
