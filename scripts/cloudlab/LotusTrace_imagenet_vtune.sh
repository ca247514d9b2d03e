#!/usr/bin/env bash
# The LotusTrace ImageNet sweep under Intel VTune: each config's training runs inside
# `vtune -collect ANALYSIS -start-paused` (collection resumed by ITT at the first DataLoader iteration),
# traced by lotus with ITT tasks per op (LOTUS_ITT=1); the per-function reports are then exported for
# `lotus hw`. The study's VTune variant of its sweep. See docs/cloudlab.md.
set -euo pipefail
PROG=$(basename "$0")
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MODE=vtune
DEFAULT_OUT=lotustrace_imagenet_vtune
sweep_defaults
VTUNE=${VTUNE:-vtune}
ANALYSIS=uarch-exploration
START_PAUSED=1
REPORTS=1
VTUNE_ARGS=()

usage() {
  cat <<EOF_USAGE
Usage: $PROG [OPTIONS] [-- TRAIN_ARGS...]

The sweep of LotusTrace_imagenet.sh (batch sizes x GPU counts x workers), each config run as
  env LOTUS_ITT=1 vtune -collect ANALYSIS -start-paused -result-dir OUT/vtune/<config> -- \\
      PYTHON [-m torch.distributed.run --nproc-per-node G] itt_resume.py train_imagenet.py ...
itt_resume.py resumes the paused collection at the first DataLoader iteration (after start-up).
Per config (<config> = b<B>_gpu<G>_w<W>):
  OUT/<config>/                      the lotus trace, with ITT tasks per op (also visible in VTune)
  OUT/vtune/<config>/                the VTune result (open with vtune-gui)
  OUT/vtune-reports/<config>.csv     vtune -report hotspots -group-by function -format csv
  OUT/vtune-reports/<config>_summary.txt   vtune -report summary
  OUT/e2e.csv                        one row per config (times include VTune's own overhead)
Then:  lotus hw --mapping MAPPING.json --uarch-dir OUT/vtune-reports --trace-dir OUT --out-dir OUT/hw
(mapping from LotusMap.sh). Needs vtune on PATH (source /opt/intel/oneapi/vtune/latest/env/vars.sh,
see setup.sh --vtune) unless --dry-run.

VTune:
  --vtune PATH        the vtune executable [\$VTUNE; vtune]
  --analysis NAME     uarch-exploration (top-down, CPI: for lotus hw), hotspots... [$ANALYSIS]
  --vtune-args "ARGS" more collect options, e.g. "-knob sampling-interval=5 -data-limit=0"
  --no-start-paused   collect from the start (no ITT resume launcher)
  --no-report         do not export the CSV/summary reports

$(sweep_options_help)

Examples:
  $PROG --data /data/imagenet --out runs/vtune --batch-sizes 1024 --gpus 4 --workers "8 12 16" --steps 200
  $PROG --data /data/imagenet --analysis hotspots --batch-sizes 256 --gpus 1 --workers 8 --dry-run
EOF_USAGE
}

script_option() {
  case $1 in
    -h | --help) usage; exit 0 ;;
    --vtune) need_value "$@"; VTUNE=$2; SHIFT=2 ;;
    --analysis) need_value "$@"; ANALYSIS=$2; SHIFT=2 ;;
    --vtune-args) need_value "$@"; read -r -a VTUNE_ARGS <<<"$2"; SHIFT=2 ;;
    --no-start-paused) START_PAUSED=0; SHIFT=1 ;;
    --no-report) REPORTS=0; SHIFT=1 ;;
  esac
}

# Export the function grid and the summary of one result, for lotus hw / lotus map import.
vtune_reports() {
  local config=$1 rdir=$2
  if [[ $DRY_RUN == 0 && ! -d $rdir ]]; then
    warn "no VTune result in $rdir: no report for $config"
    return 0
  fi
  run "$VTUNE" -report hotspots -group-by function -format csv -csv-delimiter comma -result-dir "$rdir" \
    -report-output "$REPORT_DIR/$config.csv" || warn "$config: the hotspots report failed"
  run "$VTUNE" -report summary -format text -result-dir "$rdir" \
    -report-output "$REPORT_DIR/${config}_summary.txt" || warn "$config: the summary report failed"
}

parse_args "$@"
sweep_validate
[[ $ANALYSIS =~ ^[a-z0-9-]+$ ]] || usage_error "--analysis takes a VTune analysis name (hotspots, uarch-exploration...)"
VTUNE_DIR=$OUT_DIR/vtune
REPORT_DIR=$OUT_DIR/vtune-reports
if ! command -v "$VTUNE" >/dev/null 2>&1; then
  if [[ $DRY_RUN == 1 ]]; then
    note "$VTUNE is not on PATH: a real run would stop here"
  else
    die "Intel VTune not found ('$VTUNE' is not on PATH). Install it (scripts/cloudlab/setup.sh --vtune prints how),
then 'source /opt/intel/oneapi/vtune/latest/env/vars.sh', or pass --vtune /path/to/vtune. Without VTune, use
LotusTrace_imagenet.sh (lotus traces only) and LotusMap.sh --backends pyspy." 3
  fi
fi
sweep_main
