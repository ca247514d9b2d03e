#!/usr/bin/env bash
# Issue 24 item 4 on the GPU host: `lotus submit` workers=auto (probes, the model's disjoint sets, the
# side-by-side trials against sharing) against all-cores and equal sets, one mix per call
# (benchmarks/submit_validation.py), plus the dataset's cold read rate (is any job here I/O-bound?).
#
#   OUT=res MIX=starve benchmarks/device_submit.sh
set -u
: "${OUT:?set OUT to the results folder}"
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/lotus-submit}
DATA=$WORK/jpegs
mkdir -p "$WORK" "$OUT"
# shellcheck source=benchmarks/device_lib.sh
. "$REPO/benchmarks/device_lib.sh"
T0=$(date +%s)
data 8192 || exit 1
nproc > "$OUT/env.txt"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$OUT/env.txt" 2>&1
# the dataset read cold (evicted with posix_fadvise) and warm: MB/s against what a job at N samples/s reads
$PY - "$DATA" > "$OUT/disk.txt" 2>&1 <<'PYEOF'
import sys, time
from pathlib import Path
from lotus.profile.pagecache import evict
files = sorted(p for p in Path(sys.argv[1]).rglob("*.jpg"))
size = sum(p.stat().st_size for p in files)
for label in ("cold", "warm"):
    if label == "cold":
        a = evict(files)
        print(f"evicted {a}")
    t = time.perf_counter()
    for p in files:
        p.read_bytes()
    dt = time.perf_counter() - t
    print(f"{label}: {len(files)} files, {size / 1e6:.0f} MB in {dt:.2f} s: {size / 1e6 / dt:,.0f} MB/s, "
          f"{len(files) / dt:,.0f} files/s (mean file {size / len(files) / 1e3:.0f} kB)")
PYEOF
cat "$OUT/disk.txt"
$PY "$REPO/benchmarks/submit_validation.py" --out "$OUT/submit-${MIX:=starve}" --work "$WORK/$MIX" --data "$DATA" \
    --generate 8192 --mix "$MIX" --seconds "${SECS:-45}" --warmup "${WARMUP:-12}" --trial-seconds "${TRIAL:-30}" \
    --probe-steps 300 --probe-max-seconds "${PROBE_MAX:-20}" --cuda-device 0 ${POLICIES:+--policies "$POLICIES"} \
    2>&1 | grep -v "^lotus submit: start" | tail -40
(cd "$WORK/$MIX" && tar -czf "$OUT/submit-$MIX/runs.tgz" --exclude='*.lotustrace' --exclude='*.lotuspart' \
    submit-*/submit.json submit-*/apps.csv 2>/dev/null)
echo "== done ($(( $(date +%s) - T0 )) s)"
