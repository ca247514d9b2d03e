# shellcheck shell=bash
# Shared by the GPU-host scripts (device_validation.sh, device_answers.sh): source it after setting REPO and
# DATA. Installs the wheels the host lacks from .whl/ (once), puts lotus on PYTHONPATH, and defines
# `data` (the generated JPEG dataset in $DATA, ${DATA_IMAGES:-$1} images, made once).
if ls "$REPO"/.whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/click ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        "$REPO"/.whl/*.whl || exit 1
fi
export PYTHONPATH=$REPO/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=python3

data() {
    [ -f "$DATA/.done" ] && return 0
    $PY - "$DATA" "${DATA_IMAGES:-${1:-6000}}" <<'PYEOF' || return 1
import sys, time
from pathlib import Path
from lotus.demo.dataset import DatasetSpec, generate_image_folder
t = time.time()
n = int(sys.argv[2])
generate_image_folder(Path(sys.argv[1]), DatasetSpec(images=n), workers=16)
Path(sys.argv[1], ".done").write_text(f"{n}\n")
print(f"generated {n} JPEGs in {time.time() - t:.0f} s")
PYEOF
}

pack_out() {  # the device tool brings back at most 8 files a call, 2 folders down: more become $OUT/results.tgz
    [ "$(find "$OUT" -type f | wc -l)" -le 8 ] && [ -z "$(find "$OUT" -mindepth 3 -type f)" ] && return 0
    tar -czf "/tmp/pack$$.tgz" -C "$OUT" . && find "$OUT" -mindepth 1 -delete && mv "/tmp/pack$$.tgz" "$OUT/results.tgz"
}
