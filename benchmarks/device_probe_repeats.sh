#!/usr/bin/env bash
# Probes of one setting repeated, each in its own process, on the GPU host: are a probe's intervals calibrated
# at the probe protocol's caps (issue 24, item 2)? The repeats of every SPEC run round robin (the host's drift
# touches each alike); then benchmarks/calibration.py --score-traces scores each SPEC (coverage of the other
# repeats' mean, width ratio), and the traces come back as $OUT/repeats.tgz for re-analysis.
#
#   OUT=res R=6 SPECS="cpu_decode:16:16 oversub:4:16" benchmarks/device_probe_repeats.sh
#   SPEC = name:CPUS:WORKERS (the corpus's ResNet-18 JPEG job, benchmarks/corpus.py's JPEG arguments)
#   PROBE="--steps 600 --precision 0.03 --max-seconds 8" (the corpus's tune probes; the default)
#   ARCH=resnet152: the gpu_bound shape's model (default resnet18)
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-repeats}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
T0=$(date +%s)
data 8192 || exit 1
ARCH=${ARCH:-resnet18}
for k in $(seq 1 "${R:-6}"); do
    for spec in ${SPECS:?}; do
        IFS=: read -r name cpus workers <<< "$spec"
        [ $(( $(date +%s) - T0 )) -ge "${LIMIT_S:-540}" ] && { echo "skip $name r$k: time"; continue; }
        dir=$WORK/$name/r$k
        rm -rf "$dir"; mkdir -p "$WORK/$name"
        t=$(date +%s)
        $PY -m lotus run ${PROBE:---steps 600 --precision 0.03 --max-seconds 8} --cpus "0-$((cpus - 1))" \
            --no-verdict -o "$dir" -- $PY "$REPO/benchmarks/reference_train.py" "$DATA" -a "$ARCH" -b 128 --bf16 \
            --channels-last --pin-memory --persistent-workers -j "$workers" --seconds 100000 \
            > "$dir.log" 2>&1
        echo "$name r$k: rc=$? $(( $(date +%s) - t )) s $(grep -o '[0-9,.]* samples/s.*' "$dir.log" | head -1)"
    done
done
for spec in $SPECS; do
    name=${spec%%:*}
    $PY "$REPO/benchmarks/calibration.py" --score-traces "$WORK/$name"/r* --json "$OUT/$name.score.json" \
        | grep -E '"(repeats|mean|rel_sd|rel_empirical_hw|rel_mean_hw|width_ratio|coverage)"' | tr -d '\n'; echo " <- $name"
done
# LEAN=1: the workers' trace files stay behind (~5 MB a 16-worker probe of 600 batches; the rates are the main file's)
(cd "$WORK" && tar -czf "$OUT/repeats.tgz" --exclude=jpegs ${LEAN:+--exclude='*-w[0-9]*-p*.lotustrace'} \
    $(for s in $SPECS; do echo "${s%%:*}"; done))
echo "== done ($(( $(date +%s) - T0 )) s)"
