#!/usr/bin/env bash
# LotusMap: run each preprocessing op in isolation under a profiler (`lotus map run`, one call per
# backend) and write the op -> native functions mappings into OUT; optionally import mappings from
# VTune/uProf exports and attribute a VTune uarch sweep to ops (`lotus hw`). See docs/cloudlab.md.
set -euo pipefail
PROG=$(basename "$0")
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

LOTUS_REPO=${LOTUS_REPO:-$DEFAULT_REPO}
OUT_DIR=${OUT_DIR:-lotusmap}
BACKENDS=auto
OPS=""
RUNS=3
MAP_OPTS=()
KEEP_WORK=1
IMPORT_VTUNE=""
IMPORT_UPROF=""
UARCH_DIR=""
TRACE_DIR=""
EXTRA_ARGS=()

usage() {
  cat <<EOF_USAGE
Usage: $PROG [OPTIONS] [-- LOTUS_MAP_RUN_ARGS...]

For each backend: lotus map run --backend B --runs N [--ops ...] --work-dir OUT/work-B --out OUT/mapping.B.json
(each op - Loader, RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize, Collation - is run
alone under py-spy, VTune or uProf; the mapping lists the native functions each one runs).
Optionally:
  --import-vtune DIR  lotus map import --vtune DIR --out OUT/mapping.import-vtune.json
                      (DIR/<Op>/<run>.csv: vtune -report hotspots -format csv of ops run alone)
  --import-uprof DIR  lotus map import --uprof DIR --out OUT/mapping.import-uprof.json
  --uarch-dir DIR     then, per mapping: lotus hw --mapping M --uarch-dir DIR [--trace-dir T]
                      --out-dir OUT/hw-<name> (DIR: OUT/vtune-reports of LotusTrace_imagenet_vtune.sh)
  --trace-dir DIR     traced runs for lotus hw (OUT of that sweep), to split shared functions

Options (defaults in brackets; "lotus:" = lotus map run's own default):
  --out DIR           output directory [\$OUT_DIR; lotusmap]
  --backends LIST     auto, pyspy, vtune, uprof ("pyspy vtune" = both) [$BACKENDS]
                      auto = vtune when it is on PATH, else pyspy
  --runs N            measured runs per op [$RUNS]
  --ops LIST          ops to map, e.g. "Loader RandomResizedCrop" [all]
  --seconds S         seconds each op is looped per run [lotus: 1.0]
  --rate HZ           py-spy samples per second [lotus: 250]
  --image FILE        JPEG for Loader [lotus: a bundled photo]
  --pipeline MOD:OBJ  your transforms instead of the ImageNet training ones
  --batch-size N      samples per batch for Collation [lotus: 128]
  --threads N         torch threads in the workload [lotus: 1]
  --min-support F     keep a function seen in at least this fraction of runs [lotus: 0]
  --timeout S         seconds allowed per workload [lotus: 900]
  --no-keep-work      do not keep the workload/profiler files (OUT/work-<backend>)
  --python PY         interpreter with lotus installed
                      [\$PYTHON; VENV/bin/python; REPO/.venv/bin/python; python3]
  --venv DIR          use this venv: its python, its bin/ first on PATH [\$VENV]
  --repo DIR          lotus repository, for its .venv [\$LOTUS_REPO; $DEFAULT_REPO]
  --lotus CMD         lotus executable [\$LOTUS; PYTHON -m lotus]
  --vtune PATH        vtune executable; its directory goes first on PATH [\$VTUNE; vtune]
  --uprof PATH        AMDuProfCLI executable, likewise [\$UPROF; AMDuProfCLI]
  --dry-run           print every command, run nothing, exit 0
  -h, --help          this help

Examples:
  $PROG --out runs/lotusmap                                    # py-spy, or VTune where installed
  $PROG --backends "pyspy vtune" --runs 5 --out runs/lotusmap
  $PROG --backends vtune --out runs/lotusmap --uarch-dir runs/vtune/vtune-reports --trace-dir runs/vtune
EOF_USAGE
}

while [[ $# -gt 0 ]]; do
  if [[ $1 == --*=* ]]; then
    set -- "${1%%=*}" "${1#*=}" "${@:2}"
  fi
  case $1 in
    -h | --help) usage; exit 0 ;;
    --out) need_value "$@"; OUT_DIR=$2; shift 2 ;;
    --backends | --backend) need_value "$@"; BACKENDS=$(split_list "$2"); shift 2 ;;
    --runs) need_value "$@"; RUNS=$2; shift 2 ;;
    --ops) need_value "$@"; OPS=$(split_list "$2"); shift 2 ;;
    --seconds | --rate | --image | --pipeline | --batch-size | --threads | --min-support | --timeout)
      need_value "$@"; MAP_OPTS+=("$1" "$2"); shift 2 ;;
    --no-keep-work) KEEP_WORK=0; shift ;;
    --import-vtune) need_value "$@"; IMPORT_VTUNE=$2; shift 2 ;;
    --import-uprof) need_value "$@"; IMPORT_UPROF=$2; shift 2 ;;
    --uarch-dir) need_value "$@"; UARCH_DIR=$2; shift 2 ;;
    --trace-dir) need_value "$@"; TRACE_DIR=$2; shift 2 ;;
    --python) need_value "$@"; PYTHON=$2; shift 2 ;;
    --venv) need_value "$@"; VENV=$2; shift 2 ;;
    --repo) need_value "$@"; LOTUS_REPO=$2; shift 2 ;;
    --lotus) need_value "$@"; LOTUS=$2; shift 2 ;;
    --vtune) need_value "$@"; VTUNE=$2; shift 2 ;;
    --uprof) need_value "$@"; UPROF=$2; shift 2 ;;
    --dry-run) DRY_RUN=1; shift ;;
    --) shift; EXTRA_ARGS=("$@"); break ;;
    *) usage_error "unknown option: $1" ;;
  esac
done

is_posint "$RUNS" || usage_error "--runs takes a positive integer, not '$RUNS'"
resolve_python
resolve_lotus
VTUNE=${VTUNE:-vtune}
UPROF=${UPROF:-AMDuProfCLI}
# lotus finds vtune and AMDuProfCLI on PATH.
for tool in "$VTUNE" "$UPROF"; do
  if [[ $tool == */* ]]; then
    PATH=$(dirname "$tool"):$PATH
  fi
done
export PATH
have() { command -v "$1" >/dev/null 2>&1; }

# The backends, auto resolved, without duplicates.
resolved=""
for b in $BACKENDS; do
  case $b in
    auto) if have "$VTUNE"; then b=vtune; else b=pyspy; fi ;;
    pyspy | vtune | uprof) ;;
    *) usage_error "unknown backend '$b' (auto, pyspy, vtune, uprof)" ;;
  esac
  [[ " $resolved " == *" $b "* ]] || resolved+="${resolved:+ }$b"
done
[[ -n $resolved || -n $IMPORT_VTUNE || -n $IMPORT_UPROF ]] || usage_error "nothing to do: no backend and no import"

[[ $DRY_RUN == 1 ]] && note "dry run: nothing is run or written"
note "backends: ${resolved:-none}; python: $PYTHON; out: $OUT_DIR"
for b in $resolved; do
  tool=""
  [[ $b == vtune ]] && tool=$VTUNE
  [[ $b == uprof ]] && tool=$UPROF
  if [[ -n $tool ]] && ! have "$tool"; then
    if [[ $DRY_RUN == 1 ]]; then
      note "$tool is not on PATH: a real run would stop here"
    else
      die "backend $b needs $tool on PATH (VTune: source /opt/intel/oneapi/vtune/latest/env/vars.sh; uProf: add
/opt/AMDuProf_*/bin to PATH), or use --backends pyspy" 3
    fi
  fi
done
for d in "$IMPORT_VTUNE" "$IMPORT_UPROF" "$UARCH_DIR" "$TRACE_DIR"; do
  [[ -z $d || -e $d || $DRY_RUN == 1 ]] || die "no such file or directory: $d" 3
done

run mkdir -p "$OUT_DIR"
mappings=()
failed=""
for b in $resolved; do
  out=$OUT_DIR/mapping.$b.json
  cmd=("${LOTUS_CMD[@]}" map run --backend "$b" --runs "$RUNS")
  [[ -n $OPS ]] && cmd+=(--ops "$OPS")
  cmd+=("${MAP_OPTS[@]}")
  [[ $KEEP_WORK == 1 ]] && cmd+=(--work-dir "$OUT_DIR/work-$b")
  cmd+=(--out "$out" "${EXTRA_ARGS[@]}")
  if run "${cmd[@]}"; then
    mappings+=("$out")
  else
    failed+=" map-run-$b"
    warn "lotus map run --backend $b failed"
  fi
done
for kind in vtune uprof; do
  src=$IMPORT_VTUNE
  [[ $kind == uprof ]] && src=$IMPORT_UPROF
  [[ -n $src ]] || continue
  out=$OUT_DIR/mapping.import-$kind.json
  if run "${LOTUS_CMD[@]}" map import "--$kind" "$src" --out "$out"; then
    mappings+=("$out")
  else
    failed+=" map-import-$kind"
    warn "lotus map import --$kind $src failed"
  fi
done
if [[ -n $UARCH_DIR ]]; then
  for m in "${mappings[@]}"; do
    name=$(basename "$m" .json)
    name=${name#mapping.}
    cmd=("${LOTUS_CMD[@]}" hw --mapping "$m" --uarch-dir "$UARCH_DIR")
    [[ -n $TRACE_DIR ]] && cmd+=(--trace-dir "$TRACE_DIR")
    cmd+=(--out-dir "$OUT_DIR/hw-$name")
    run "${cmd[@]}" || { failed+=" hw-$name"; warn "lotus hw with $m failed"; }
  done
fi

[[ $DRY_RUN == 1 ]] && exit 0
[[ -z $failed ]] || die "failed:$failed"
log "mappings: ${mappings[*]:-none}"
