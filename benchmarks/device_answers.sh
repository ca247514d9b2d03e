#!/usr/bin/env bash
# Issue 24 on the GPU host: the ResNet-18 JPEG job (benchmarks/reference_train.py, plain torch timing its own
# steady state) traced by `lotus run` at CPU x worker points, repeated runs of one point, a cold-cache run.
# The traces come back (tgz per phase) so that the model's checks, the sensitivity search and the interval's
# calibration can be replayed on them anywhere (benchmarks/answers_replay.py).
#
#   OUT=res benchmarks/device_answers.sh grid repeats cold
#   OUT=res GRID="1:0 2:2 16:16" SECONDS_STEADY=15 benchmarks/device_answers.sh grid
#   OUT=res benchmarks/device_answers.sh calib      # benchmarks/calibration.py (CPU jobs pinned to 2 CPUs)
#
# Every run: lotus run --cpus 0-(C-1) -o $WORK/<phase>/cC-wW -- python3 reference_train.py DATA -a resnet18
# -b 128 -j W --bf16 --channels-last --pin-memory --persistent-workers --seconds $SECONDS_STEADY --json own.json
# Wheels the host lacks (click, rich, natsort, ...) are installed from .whl/ when present.
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-answers}
DATA=$WORK/jpegs
SECS=${SECONDS_STEADY:-15}
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
T0=$(date +%s)
LIMIT=${LIMIT_S:-560}  # stop starting runs after this many seconds (a command has 600)


late() { [ $(( $(date +%s) - T0 )) -ge "$LIMIT" ]; }

one() {  # one traced run: phase cpus workers name [extra env]
    local phase=$1 c=$2 w=$3 name=$4
    local dir=$WORK/$phase/$name
    [ -f "$dir/own.json" ] && return 0
    late && { echo "skip $phase/$name: time"; return 0; }
    mkdir -p "$WORK/$phase"
    local t
    t=$(date +%s.%N)
    $PY -m lotus run --cpus "0-$((c - 1))" -o "$dir" --no-verdict -- \
        $PY "$REPO/benchmarks/reference_train.py" "$DATA" -a resnet18 -b 128 -j "$w" --bf16 --channels-last \
        --pin-memory --persistent-workers --seconds "$SECS" --json "$dir.own.json" > "$dir.log" 2>&1
    local rc=$?
    [ -f "$dir.own.json" ] && mv "$dir.own.json" "$dir/own.json"
    echo "$phase/$name rc=$rc $(python3 -c "import time;print(round(time.time()-$t,1))")s $(cat "$dir/own.json" 2>/dev/null | head -c 400)"
}

pack() { tar -czf "$OUT/$1.tgz" -C "$WORK" "$1" 2>/dev/null; }

phase_grid() {
    data 8192 || return 1
    for p in ${GRID:-1:0 1:1 2:2 4:4 8:8 16:16 2:1 4:3 8:7 12:12 16:15}; do
        one grid "${p%%:*}" "${p##*:}" "c${p%%:*}-w${p##*:}"
        pack grid
    done
}

phase_repeats() {
    data 8192 || return 1
    for k in $(seq 1 "${REPEATS:-5}"); do
        one repeats 16 16 "c16-w16-r$k"
        pack repeats
    done
}

phase_cold() {
    data 8192 || return 1
    $PY - "$DATA" <<'EOF'
import sys
from pathlib import Path
from lotus.profile import pagecache
files = [str(p) for p in Path(sys.argv[1]).rglob("*.jpg")]
pagecache.evict(files)
print(f"evicted {len(files)} files")
EOF
    one cold 16 15 c16-w15-cold
    pack cold
}

JOB=("$PY" "$REPO/benchmarks/reference_train.py")
JOB_ARGS=(-a resnet18 -b 128 --bf16 --channels-last --pin-memory --persistent-workers)

phase_truth() {  # the job alone (no lotus) at each CPU count with as many workers: the reference of sens
    data 8192 || return 1
    mkdir -p "$WORK/truth"
    for p in ${TRUTH:-1:1 2:2 4:4 8:8 12:12 16:16}; do
        local c=${p%%:*} w=${p##*:} f=$WORK/truth/c${p%%:*}-w${p##*:}.json
        [ -f "$f" ] && continue
        late && { echo "skip truth c$c-w$w: time"; continue; }
        taskset -c "0-$((c - 1))" "${JOB[@]}" "$DATA" "${JOB_ARGS[@]}" -j "$w" --seconds "$SECS" --json "$f" \
            > "$f.log" 2>&1
        echo "truth c$c-w$w $(head -c 300 "$f" 2>/dev/null)"
    done
    pack truth
}

phase_sens() {  # lotus sensitivity with this session's checks, default probes, on the grid of issue 24
    data 8192 || return 1
    $PY -m lotus sensitivity --cpus-grid "${SENS_GRID:-1,2,4,8,12,16}" --max-seconds "${SENS_MAX_S:-20}" \
        --out "$WORK/sens" --json -- "${JOB[@]}" "$DATA" "${JOB_ARGS[@]}" -j 4 --seconds 100000 \
        > "$OUT/sens.json" 2> "$OUT/sens.log"
    echo "sens rc=$? $(tail -c 300 "$OUT/sens.log")"
}

phase_tune() {  # lotus tune --only num_workers from -j 2, with every probe checked
    data 8192 || return 1
    $PY -m lotus tune --only num_workers --max-seconds "${TUNE_MAX_S:-20}" --budget-minutes "${TUNE_MIN:-5}" \
        --out "$WORK/tune" --json -- "${JOB[@]}" "$DATA" "${JOB_ARGS[@]}" -j 2 --seconds 100000 \
        > "$OUT/tune.json" 2> "$OUT/tune.log"
    echo "tune rc=$? $(tail -c 300 "$OUT/tune.log")"
}

phase_calib() {
    $PY "$REPO/benchmarks/calibration.py" --work "$WORK/calib" --repeats "${CAL_REPEATS:-6}" \
        --seconds "${CAL_SECONDS:-6}" --cpus 0-1 --json "$OUT/calibration_h100_2cpus.json" \
        > "$OUT/calibration.log" 2>&1
    tail -12 "$OUT/calibration.log"
    pack calib
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$OUT/env.txt" 2>&1
$PY -c "import torch, torchvision, sys; print(sys.version.split()[0], torch.__version__, torchvision.__version__)" >> "$OUT/env.txt"
for phase in "$@"; do
    echo "== $phase ($(( $(date +%s) - T0 )) s)"
    "phase_$phase"
done
echo "== done ($(( $(date +%s) - T0 )) s)"
