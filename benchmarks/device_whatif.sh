#!/usr/bin/env bash
# whatif with and without the scheduler's view on the GPU host (issue 24): the corpus's whatif steps (a
# traced run, the job alone at half and twice its workers, in the same call), then
# benchmarks/whatif_sched.py on each traced run against those truths: $OUT/whatif_sched.txt, the JSON in
# $OUT/whatif_sched.tgz (the device returns 8 files at most).
#
#   OUT=res SHAPES="tokenizer short_epochs cpu_decode" benchmarks/device_whatif.sh
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
export WORK=${WORK:-/tmp/lotus-corpus}
STEPS=""
for s in ${SHAPES:?set SHAPES}; do STEPS="$STEPS $s:whatif"; done
OUT=$OUT STEPS="$STEPS" SECS=${SECS:-20} LIMIT_S=${LIMIT_S:-500} bash "$REPO/benchmarks/device_corpus.sh"
export PYTHONPATH=$REPO/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
for s in $SHAPES; do
    [ -d "$WORK/traced/$s" ] || { echo "$s: not traced"; continue; }
    set -- $(python3 -c "import sys; sys.path.insert(0, '$REPO/benchmarks'); import corpus; \
spec = corpus.SHAPES['gpu']['$s']; print(spec[1], max(spec[2] // 2, 1), 2 * spec[2])")
    python3 "$REPO/benchmarks/whatif_sched.py" --run "$s=$WORK/traced/$s" --cpus "$1" --workers "$2,$3" \
        --truth "$WORK/truth" --json "$WORK/$s.whatif_sched.json" 2>&1 | tee -a "$OUT/whatif_sched.txt"
done
(cd "$WORK" && tar -czf "$OUT/whatif_sched.tgz" ./*.whatif_sched.json)
