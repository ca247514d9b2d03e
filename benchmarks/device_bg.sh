#!/usr/bin/env bash
# Run benchmarks/device_validation.sh PHASES in the background on the GPU host and wait for it at most
# WAIT_S seconds; call again (same arguments) to keep waiting: a run already going is not started twice.
# What is finished is copied to $OUT each time (results.tgz, logs, runs.tgz of the throughput traces).
#   OUT=res WAIT_S=540 PROBE_PHASES=throughput,sens benchmarks/device_bg.sh probes18
set -u
: "${OUT:?set OUT}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-validation}
BG=$WORK/bg
mkdir -p "$BG" "$OUT"
key=$(echo "$*" | tr ' ' '_')
if [ ! -f "$BG/$key.started" ]; then
    touch "$BG/$key.started"
    OUT=$BG/out setsid nohup bash -c "'$REPO/benchmarks/device_validation.sh' $*; touch '$BG/$key.done'" \
        > "$BG/$key.log" 2>&1 < /dev/null &
fi
end=$(( $(date +%s) + ${WAIT_S:-540} ))
while [ ! -f "$BG/$key.done" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
[ -f "$BG/$key.done" ] && echo "DONE $key" || echo "STILL RUNNING $key"
tail -n 30 "$BG/$key.log"
tar -czf "$OUT/results.tgz" -C "$WORK/results" . 2>/dev/null
(cd "$WORK/probes" 2>/dev/null && tar -czf "$OUT/runs.tgz" run-* ref-*.json 2>/dev/null)
ls -la "$OUT"
