#!/usr/bin/env bash
# Issue 16's overhead figures on the GPU host (one command, results in $OUT):
#   overhead_versions.py (base = the lotus in base_head/src, new = src/) for text and trivial, then
#   overhead_pairs.py RUNS times (text, trivial), once for the base, jpeg once with --accuracy, then the
#   versions with CUDA initialised.
#
#   git archive BASE src | tar -x -C base_head        # the version to compare with
#   OUT=results RUNS=3 benchmarks/device_overhead.sh
# Wheels the host lacks (click, natsort) are installed from .whl/ when present.
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-3}
ROUNDS=${ROUNDS:-2000}
PAIRS=${PAIRS:-4000}
if ls "$REPO"/.whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/click ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$REPO"/.whl/*.whl || exit 1
fi
export PYTHONUNBUFFERED=1
cd "$REPO" || exit 1
{ python3 -VV; python3 -c 'import torch; print("torch", torch.__version__)'; nproc; } > "$OUT/host.txt" 2>&1
if [ -d base_head/src ]; then
    for p in text trivial; do
        PYTHONPATH=base_head/src:/tmp/site python3 benchmarks/overhead_versions.py --new-src src "$p" "$ROUNDS" \
            --json "$OUT/versions_$p.json" >> "$OUT/versions.txt" 2>&1
    done
fi
for i in $(seq 1 "$RUNS"); do
    echo "## run $i" >> "$OUT/pairs.txt"
    PYTHONPATH=src:/tmp/site python3 benchmarks/overhead_pairs.py --pipelines text,trivial --pairs "$PAIRS" \
        --json "$OUT/pairs_run$i.json" >> "$OUT/pairs.txt" 2>&1
done
if [ -d base_head/src ]; then  # the base version under the same benchmark (same estimator)
    echo "## base" >> "$OUT/pairs.txt"
    PYTHONPATH=base_head/src:/tmp/site python3 benchmarks/overhead_pairs.py --pipelines text,trivial \
        --pairs "$PAIRS" --json "$OUT/pairs_base.json" >> "$OUT/pairs.txt" 2>&1
fi
if [ "${JPEG:-1}" = 1 ]; then
    echo "## jpeg" >> "$OUT/pairs.txt"
    PYTHONPATH=src:/tmp/site python3 benchmarks/overhead_pairs.py --pipelines jpeg --pairs 600 \
        --accuracy "${ACCURACY:-2000}" --json "$OUT/pairs_jpeg.json" >> "$OUT/pairs.txt" 2>&1
fi
if [ -d base_head/src ] && [ "${CUDA:-1}" = 1 ]; then  # CUDA initialised: every batch records two CUDA events
    for p in text trivial; do
        PYTHONPATH=base_head/src:/tmp/site python3 -c "import runpy, sys, torch; torch.cuda.init(); \
sys.argv = ['overhead_versions.py', '--new-src', 'src', '$p', '1000']; \
runpy.run_path('benchmarks/overhead_versions.py', run_name='__main__')" >> "$OUT/versions_cuda.txt" 2>&1
    done
fi
