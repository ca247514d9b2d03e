#!/usr/bin/env bash
# GPU validations of issues 9-11 on one GPU host (16 cores, H100), in phases that fit 10-minute commands.
#
#   OUT=results benchmarks/device_validation.sh power model     # one command
#   OUT=results benchmarks/device_validation.sh tune
#   OUT=results benchmarks/device_validation.sh submit stalls
#
# Phases: probes18, probes50 (issue 15: benchmarks/probe_validation.py), power (benchmarks/power_validation.py), model (benchmarks/model_validation.py, ResNet-18 and
# ResNet-50, CPUs 1-16), tune (benchmarks/tune.py, GPU cases), submit (benchmarks/submit_validation.py),
# stalls (lotus stalls on ResNet-18). Every phase logs to $OUT/<phase>.log; the results of all phases are
# packed into $OUT/results.tgz after each phase (so a command stopped at its limit keeps what it measured).
# Wheels the host lacks (click, rich, natsort, nvidia-ml-py, ...) are installed from .whl/ when present.
# Scale knobs: PROBE_PHASES, PROBE_ARGS (more probe_validation.py options), POWER_BUDGET_S, MODEL_STEPS, TUNE_STEPS, TUNE_MAX_WORKERS, SUBMIT_SECONDS.
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-validation}
DATA=$WORK/jpegs
RES=$WORK/results
mkdir -p "$RES" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
TRAIN=("$PY" "$REPO/examples/train_imagenet.py" "$DATA" --epochs 1000 --print-freq 0)

pack() { tar -czf "$OUT/results.tgz" -C "$RES" . 2>/dev/null; }


phase_power() {
    $PY "$REPO/benchmarks/power_validation.py" --out "$RES/power" --workdir "$WORK/power" \
        --budget-s "${POWER_BUDGET_S:-200}" --deadline-s "$(( ${POWER_BUDGET_S:-200} + 80 ))"
}

phase_model() {
    data || return 1
    local steps=${MODEL_STEPS:-30}
    $PY "$REPO/benchmarks/model_validation.py" --workers match --cpus 1,2,4,8,12,16 --fit 16:4,2:1 \
        --steps "$steps" --json "$RES/model_resnet18.json" -- "${TRAIN[@]}" -a resnet18 -b 64 --amp --channels-last
    pack
    $PY "$REPO/benchmarks/model_validation.py" --workers match --cpus 1,2,4,8,12,16 --fit 16:4,2:1 \
        --steps "$steps" --json "$RES/model_resnet50.json" -- "${TRAIN[@]}" -a resnet50 -b 64 --amp --channels-last
}

phase_tune() {
    data || return 1
    for case in gpu-cpu-bound gpu-gpu-bound; do
        $PY "$REPO/benchmarks/tune.py" --case "$case" --data "$DATA" --steps "${TUNE_STEPS:-15}" \
            --max-workers "${TUNE_MAX_WORKERS:-16}" --out "$RES/tune_$case.json" --traces "$WORK/tune-$case" --resume
        pack
    done
}

phase_submit() {
    data || return 1
    $PY "$REPO/benchmarks/submit_validation.py" --out "$RES/submit" --work "$WORK/submit" --data "$DATA" \
        --seconds "${SUBMIT_SECONDS:-70}" --warmup 15 --cuda-device 0 --resume
}

# issue 15: lotus's answers against the job's own clock (benchmarks/probe_validation.py); phases of it in
# PROBE_PHASES (default all), e.g. PROBE_PHASES=throughput,sens
phase_probes18() {
    DATA_IMAGES=${DATA_IMAGES:-8192} data || return 1
    $PY "$REPO/benchmarks/probe_validation.py" --data "$DATA" --out "$RES/probes" --work "$WORK/probes" \
        --arch resnet18 --phases "${PROBE_PHASES:-throughput,sens,tune,whatif,stalls}" ${PROBE_ARGS:-}
}

phase_probes50() {
    DATA_IMAGES=${DATA_IMAGES:-8192} data || return 1
    $PY "$REPO/benchmarks/probe_validation.py" --data "$DATA" --out "$RES/probes" --work "$WORK/probes" \
        --arch resnet50 --phases "${PROBE_PHASES:-throughput,sens}" --throughput-workers 15 ${PROBE_ARGS:-}
}

phase_stalls() {
    data || return 1
    $PY -m lotus stalls --steps 40 --json --data "$DATA" -- "${TRAIN[@]}" -a resnet18 -b 128 -j 8 --amp \
        > "$RES/stalls_resnet18.json"
}

{ nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv; nproc;
  $PY -c 'import torch, torchvision; print(torch.__version__, torchvision.__version__)'; } > "$RES/env.txt" 2>&1
for ph in "$@"; do
    echo "== $ph $(date +%T)"
    t0=$(date +%s)
    "phase_$ph" > "$RES/$ph.log" 2>&1
    rc=$?
    echo "== $ph rc=$rc in $(( $(date +%s) - t0 )) s"
    tail -n 25 "$RES/$ph.log"
    pack
done
cp "$RES"/*.log "$OUT"/ 2>/dev/null
pack
