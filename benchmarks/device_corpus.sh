#!/usr/bin/env bash
# Issue 24's corpus on the GPU host (benchmarks/corpus.py --host gpu), in phases that resume across calls:
# the results of earlier calls (RESUME, a folder holding results/ and truth/) are copied in first, every
# step is skipped when its JSON is there, and what this call adds comes back as $OUT/corpus.tgz.
#
#   OUT=res RESUME=docs/results/gpu-h200/issue-24/corpus STEPS="gpu_bound:whatif,stalls nw0:tune" \
#       benchmarks/device_corpus.sh
#   RERUN="tokenizer:stalls" (with STEPS holding it too): measure those anew
#   REDO="nw0:tune": run lotus's side again against the truths already there
#   TRUTH_REPEATS=4: the job alone runs 4 times a setting, the mean its truth (one run spreads 6-8% sd there)
#   TRUTHS="gpu_bound:16:16,8:8": only the job alone at those CPUs:workers (before STEPS; a later call uses them only
#   on the same machine, benchmarks/corpus.py machine(): the machine stays warm ~30 s between calls); truths are over
#   whole epochs (benchmarks/reference_train.py --whole-epochs); LOTUS_TRUTH_EPOCHS=0: over the 8-s window
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-corpus}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
T0=$(date +%s)
pack() {  # after every step and every 30 s: a command killed at its limit still brings back what was done
    local t=.pack$BASHPID  # tar's status is not checked: a folder not made yet (results/ of a truths-only call)
    (cd "$WORK" && tar -czf "$OUT/$t-c" $(ls -d results truth stalls/*.log tune*/*.log sens/*.log \
        tune*/*/tune.json 2>/dev/null); mv -f "$OUT/$t-c" "$OUT/corpus.tgz"
     if [ -d traced ]; then tar -czf "$OUT/$t-t" traced; mv -f "$OUT/$t-t" "$OUT/traced.tgz"; fi)
}
( while sleep 30; do pack; done ) &
PACKER=$!
trap 'kill $PACKER 2>/dev/null' EXIT
[ -n "${RESUME:-}" ] && [ -d "$REPO/$RESUME" ] && cp -r "$REPO/$RESUME"/. "$WORK"/
# RERUN="shape:cmd,cmd ...": those results are dropped and the shape's truths set aside (*.before-rerun) first
for step in ${RERUN:-}; do
    for c in $(echo "${step##*:}" | tr , ' '); do rm -f "$WORK/results/${step%%:*}.$c.json"; done
    for f in "$WORK/truth/${step%%:*}"-c*.json; do [ -f "$f" ] && mv "$f" "${f%.json}.before-rerun"; done
done
# REDO="shape:cmd,cmd ...": those results are dropped (lotus runs again), the truths kept
for step in ${REDO:-}; do
    for c in $(echo "${step##*:}" | tr , ' '); do rm -f "$WORK/results/${step%%:*}.$c.json"; done
done
data 8192 || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/env.txt" 2>&1
$PY -c "import torch, torchvision, sys; print(sys.version.split()[0], torch.__version__, torchvision.__version__)" >> "$OUT/env.txt"
nproc >> "$OUT/env.txt"
# TRUTHS="shape:C:W,C:W ...": the job alone at those settings first (a call of its own; a command's call then finds them)
for t in ${TRUTHS:-}; do
    left=$(( ${LIMIT_S:-540} - ($(date +%s) - T0) ))
    $PY "$REPO/benchmarks/corpus.py" --host gpu --data "$DATA" --work "$WORK" --shapes "${t%%:*}" --truths "${t#*:}" \
        --seconds "${SECS:-8}" --deadline-s "$left" --truth-repeats "${TRUTH_REPEATS:-1}" 2>&1 | tail -40
    pack
done
for step in ${STEPS:-}; do
    left=$(( ${LIMIT_S:-540} - ($(date +%s) - T0) ))
    [ "$left" -le 30 ] && { echo "skip $step: time"; continue; }
    $PY "$REPO/benchmarks/corpus.py" --host gpu --data "$DATA" --work "$WORK" --shapes "${step%%:*}" \
        --commands "${step##*:}" --seconds "${SECS:-8}" --tune-minutes "${TUNE_MIN:-2.5}" --deadline-s "$left" \
        --truth-repeats "${TRUTH_REPEATS:-1}" 2>&1 | grep -v "^|" | tail -20
    pack
done
# IO_STEPS="io_bound:whatif,stalls,...": the I/O-bound shape on a disk throttled to IO_MBPS MB/s with IO_MEM MiB
# of memory for the jobs and their page cache (benchmarks/slowdisk.sh; its own cgroup, the other shapes not)
for step in ${IO_STEPS:-}; do
    left=$(( ${LIMIT_S:-540} - ($(date +%s) - T0) ))
    [ "$left" -le 30 ] && { echo "skip $step: time"; continue; }
    "$REPO/benchmarks/slowdisk.sh" /tmp/lotus-files "${IO_MBPS:-100}" "${IO_MEM:-2048}" -- \
        $PY "$REPO/benchmarks/corpus.py" --host gpu --files /tmp/lotus-files --work "$WORK" --shapes "${step%%:*}" \
        --commands "${step##*:}" --seconds "${SECS:-8}" --tune-minutes "${TUNE_MIN:-2.5}" --deadline-s "$left" \
        2>&1 | grep -v "^|" | tail -20
    pack
done
$PY "$REPO/benchmarks/corpus.py" --work "$WORK" --table "$OUT/corpus.md" > /dev/null
echo "== done ($(( $(date +%s) - T0 )) s)"
