#!/usr/bin/env bash
# benchmarks/whatif_cross.py on the GPU host: traces at several worker counts, the job alone at several, and
# whatif from every trace to every count; the JSONs come back as $OUT/cross.tgz, the traces as $OUT/traced.tgz.
#
#   OUT=res SECS=15 CROSS="short_epochs:4,8:4,8,16 nw0:0,8:2,8" benchmarks/device_cross.sh
#   JOB_e32="8:--synthetic 1 --samples 1024 -a none -b 32" CROSS="e32:3,6:3,6,12" ...   # a job not in corpus.py
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-cross}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
T0=$(date +%s)
data 8192 || exit 1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc
  $PY -c "import torch, sys; print(sys.version.split()[0], torch.__version__)"; } > "$OUT/env.txt" 2>&1
for item in ${CROSS:-}; do
    IFS=: read -r shape traced workers <<< "$item"
    jobvar="JOB_$shape"; job=()
    [ -n "${!jobvar:-}" ] && job=(--job "${!jobvar}")
    left=$(( ${LIMIT_S:-540} - ($(date +%s) - T0) ))
    [ "$left" -le 40 ] && { echo "skip $item: time"; continue; }
    $PY "$REPO/benchmarks/whatif_cross.py" "${job[@]}" --host gpu --data "$DATA" --work "$WORK" --shape "$shape" \
        --traced "$traced" --workers "$workers" --seconds "${SECS:-15}" --deadline-s "$((left - 30))" 2>&1 | tail -12
    (cd "$WORK" && tar -czf "$OUT/cross.tgz" cross-*.json truth whatif-*.log 2>/dev/null
     tar -czf "$OUT/traced.tgz" traced-* 2>/dev/null)
done
echo "== done ($(( $(date +%s) - T0 )) s)"
