# shellcheck shell=bash
# Shared by the cloudlab scripts (sourced, never run): messages, --dry-run, option parsing helpers,
# interpreter/GPU detection and the batch size x GPUs x workers sweep of LotusTrace_imagenet.sh and
# LotusTrace_imagenet_vtune.sh. See docs/cloudlab.md.

CL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEFAULT_REPO=$(cd "$CL_DIR/../.." && pwd)
PROG=${PROG:-$(basename "$0")}
DRY_RUN=0
shopt -s nullglob

log() { printf '%s: %s\n' "$PROG" "$*" >&2; }
warn() { printf '%s: warning: %s\n' "$PROG" "$*" >&2; }
# die MESSAGE [EXIT_CODE]: 1 = failure, 2 = usage, 3 = a required tool or input is missing.
die() {
  printf '%s: error: %s\n' "$PROG" "$1" >&2
  exit "${2:-1}"
}
usage_error() {
  printf "%s: %s\nTry '%s --help'.\n" "$PROG" "$1" "$PROG" >&2
  exit 2
}

# One argument as the shell would need it: bare when safe, else single-quoted.
quote_arg() {
  local a=$1
  if [[ -n $a && $a =~ ^[A-Za-z0-9_@%+=:,./-]+$ ]]; then
    printf '%s' "$a"
  else
    printf "'%s'" "${a//\'/\'\\\'\'}"
  fi
}

# A command line, quoted so that it can be pasted into a shell.
cmd_line() {
  local out="" a
  for a in "$@"; do
    out+="$(quote_arg "$a") "
  done
  printf '%s' "${out% }"
}

# Print a command ("+ CMD"); run it unless --dry-run.
run() {
  printf '+ %s\n' "$(cmd_line "$@")"
  [[ $DRY_RUN == 1 ]] && return 0
  "$@"
}

# A note in the plan (stdout, "# ...").
note() { printf '# %s\n' "$*"; }

# need_value OPTION ARGS...: fail unless OPTION has a value.
need_value() {
  [[ $# -ge 2 ]] || usage_error "option $1 needs a value"
}

# Lists are given as "1 2 4" or "1,2,4".
split_list() { printf '%s' "${1//,/ }"; }

is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
is_posint() { [[ $1 =~ ^[0-9]+$ && $1 -gt 0 ]]; }

# PYTHON: --python, else $PYTHON, else VENV/bin/python (--venv/$VENV), else REPO/.venv/bin/python, else python3.
# With a venv, its bin/ goes first on PATH (torchrun, lotus, py-spy).
resolve_python() {
  if [[ -z ${PYTHON:-} ]]; then
    if [[ -n ${VENV:-} ]]; then
      PYTHON=$VENV/bin/python
    elif [[ -x $LOTUS_REPO/.venv/bin/python ]]; then
      PYTHON=$LOTUS_REPO/.venv/bin/python
    else
      PYTHON=python3
    fi
  fi
  if [[ -n ${VENV:-} ]]; then
    PATH=$VENV/bin:$PATH
    export PATH
  fi
  if [[ $DRY_RUN == 0 ]] && ! command -v "$PYTHON" >/dev/null 2>&1; then
    die "python not found: $PYTHON (use --python or PYTHON=..., or --venv DIR)" 3
  fi
}

# LOTUS_CMD: the lotus CLI (--lotus/$LOTUS, else "PYTHON -m lotus", the interpreter's own lotus).
resolve_lotus() {
  if [[ -n ${LOTUS:-} ]]; then
    LOTUS_CMD=("$LOTUS")
  else
    LOTUS_CMD=("$PYTHON" -m lotus)
  fi
}

# GPUs usable by this user: $CUDA_VISIBLE_DEVICES when set, else nvidia-smi, else torch; 0 on CPU-only.
detect_gpus() {
  local n
  if [[ -n ${AVAILABLE_GPUS:-} ]]; then
    printf '%s' "$AVAILABLE_GPUS"
    return
  fi
  if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
    if [[ -z $CUDA_VISIBLE_DEVICES || $CUDA_VISIBLE_DEVICES == -1 ]]; then
      printf '0'
    else
      local -a ids
      IFS=, read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
      printf '%s' "${#ids[@]}"
    fi
    return
  fi
  if command -v nvidia-smi >/dev/null 2>&1 && n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU '); then
    printf '%s' "$n"
    return
  fi
  n=$("$PYTHON" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null) || n=0
  printf '%s' "${n:-0}"
}

# ---------------------------------------------------------------------------------------------------
# The sweep (LotusTrace_imagenet.sh, LotusTrace_imagenet_vtune.sh). MODE=trace or vtune.

sweep_defaults() {
  LOTUS_REPO=${LOTUS_REPO:-$DEFAULT_REPO}
  DATA_DIR=${DATA_DIR:-}
  OUT_DIR=${OUT_DIR:-}
  TRAIN_SCRIPT=${TRAIN_SCRIPT:-}
  BATCH_SIZES="128 256 512 1024"
  GPU_COUNTS="1 2 4"
  WORKER_COUNTS="gpus"
  ARCH=resnet18
  EPOCHS=1
  STEPS=100
  DEVICE=auto
  IMAGE_SIZE=224
  GENERATE=0
  PROFILE=0
  TELEMETRY=0
  FORCE=0
  ON_EXISTING=stop
  KEEP_GOING=1
  ANALYZE=1
  TIMEOUT=0
  TIME_BIN=${TIME_BIN-/usr/bin/time}
  EXTRA_ARGS=()
}

sweep_options_help() {
  cat <<EOF
Paths (options win over environment variables; defaults in brackets):
  --data DIR          ImageFolder root: class folders, or a train/ folder of them
                      [\$DATA_DIR; with --generate: OUT/data]
  --out DIR           output directory [\$OUT_DIR; $DEFAULT_OUT]
  --python PY         interpreter with lotus installed
                      [\$PYTHON; VENV/bin/python; REPO/.venv/bin/python; python3]
  --venv DIR          use this venv: its python, its bin/ first on PATH [\$VENV]
  --repo DIR          lotus repository [\$LOTUS_REPO; $DEFAULT_REPO]
  --train-script PY   training script [\$TRAIN_SCRIPT; REPO/examples/train_imagenet.py]
  --lotus CMD         lotus executable, for the final summary [\$LOTUS; PYTHON -m lotus]
  --time-bin PATH     GNU time; "none" = bash timing, no max RSS [\$TIME_BIN; /usr/bin/time]

Sweep (lists as "1 2 4" or 1,2,4):
  --batch-sizes LIST  per-process batch sizes [$BATCH_SIZES]
  --gpus LIST         GPU counts; G > 1 runs under torchrun (DDP) [$GPU_COUNTS]
  --workers LIST      DataLoader workers per process; "gpus" = G, as in the study [$WORKER_COUNTS]
  --arch NAME         torchvision model [$ARCH]
  --epochs N          [$EPOCHS]
  --steps N           training steps per epoch, 0 = whole epoch [$STEPS]
  --image-size PX     crop size [$IMAGE_SIZE]
  --device DEV        auto, cuda or cpu [$DEVICE]
  --generate N        first write N generated JPEGs into DATA (once; kept if identical)
  --profile           torch.profiler (Kineto) trace next to the lotus trace
  --telemetry         NVML GPU telemetry in the trace
  -- ARGS...          passed on to the training script (e.g. -- --amp --channels-last)

Behaviour:
  --dry-run           print every command, run nothing, exit 0
  --force             also run configs needing more GPUs than found (G > 1 on CPU: gloo)
  --available-gpus N  do not detect GPUs, assume N [\$AVAILABLE_GPUS]
  --skip-existing     skip configs whose directory holds a finished run (run-r0.json)
  --overwrite         delete an existing config directory before its run
                      (default: stop before running anything if one holds a run)
  --stop-on-error     stop at the first failing config (default: record it, go on)
  --timeout SECONDS   kill a config after this long, 0 = never [$TIMEOUT]
  --no-analyze        do not run 'lotus analyze stats' on OUT at the end
  -h, --help          this help
EOF
}

# parse_args ARGS...: the options of the calling script (its script_option function: sets SHIFT to the
# number of words it used, 0 = not its option), then those of the sweep (sweep_option). --opt=value is
# --opt value.
parse_args() {
  while [[ $# -gt 0 ]]; do
    if [[ $1 == --*=* ]]; then
      set -- "${1%%=*}" "${1#*=}" "${@:2}"
    fi
    SHIFT=0
    script_option "$@"
    [[ $SHIFT -gt 0 ]] || sweep_option "$@"
    shift "$SHIFT"
  done
}

# sweep_option ARGS...: parse one option of the sweep; sets SHIFT to the number of words used.
sweep_option() {
  SHIFT=2
  case $1 in
    --data) need_value "$@"; DATA_DIR=$2 ;;
    --out) need_value "$@"; OUT_DIR=$2 ;;
    --python) need_value "$@"; PYTHON=$2 ;;
    --venv) need_value "$@"; VENV=$2 ;;
    --repo) need_value "$@"; LOTUS_REPO=$2 ;;
    --train-script) need_value "$@"; TRAIN_SCRIPT=$2 ;;
    --lotus) need_value "$@"; LOTUS=$2 ;;
    --time-bin) need_value "$@"; TIME_BIN=$2 ;;
    --batch-sizes) need_value "$@"; BATCH_SIZES=$(split_list "$2") ;;
    --gpus) need_value "$@"; GPU_COUNTS=$(split_list "$2") ;;
    --workers) need_value "$@"; WORKER_COUNTS=$(split_list "$2") ;;
    --arch) need_value "$@"; ARCH=$2 ;;
    --epochs) need_value "$@"; EPOCHS=$2 ;;
    --steps) need_value "$@"; STEPS=$2 ;;
    --image-size) need_value "$@"; IMAGE_SIZE=$2 ;;
    --device) need_value "$@"; DEVICE=$2 ;;
    --generate) need_value "$@"; GENERATE=$2 ;;
    --available-gpus) need_value "$@"; AVAILABLE_GPUS=$2 ;;
    --timeout) need_value "$@"; TIMEOUT=$2 ;;
    --profile) PROFILE=1; SHIFT=1 ;;
    --telemetry) TELEMETRY=1; SHIFT=1 ;;
    --dry-run) DRY_RUN=1; SHIFT=1 ;;
    --force) FORCE=1; SHIFT=1 ;;
    --skip-existing) ON_EXISTING=skip; SHIFT=1 ;;
    --overwrite) ON_EXISTING=overwrite; SHIFT=1 ;;
    --stop-on-error) KEEP_GOING=0; SHIFT=1 ;;
    --no-analyze) ANALYZE=0; SHIFT=1 ;;
    --) shift; EXTRA_ARGS=("$@"); SHIFT=$(($# + 1)) ;;
    *) usage_error "unknown option: $1" ;;
  esac
}

sweep_validate() {
  local v
  [[ -n $BATCH_SIZES && -n $GPU_COUNTS && -n $WORKER_COUNTS ]] || usage_error "empty sweep list"
  for v in $BATCH_SIZES $GPU_COUNTS; do
    is_posint "$v" || usage_error "batch sizes and GPU counts are positive integers, not '$v'"
  done
  for v in $WORKER_COUNTS; do
    is_uint "$v" || [[ $v == gpus ]] || usage_error "workers are integers >= 0 or 'gpus', not '$v'"
  done
  for v in "$EPOCHS" "$STEPS" "$IMAGE_SIZE" "$GENERATE" "$TIMEOUT"; do
    is_uint "$v" || usage_error "--epochs, --steps, --image-size, --generate and --timeout take integers, not '$v'"
  done
  [[ -z ${AVAILABLE_GPUS:-} ]] || is_uint "$AVAILABLE_GPUS" || usage_error "--available-gpus takes an integer"
  OUT_DIR=${OUT_DIR:-$DEFAULT_OUT}
  TRAIN_SCRIPT=${TRAIN_SCRIPT:-$LOTUS_REPO/examples/train_imagenet.py}
  if [[ -z $DATA_DIR ]]; then
    [[ $GENERATE -gt 0 ]] || usage_error "no dataset: give --data DIR (or DATA_DIR=...), or --generate N"
    DATA_DIR=$OUT_DIR/data
  fi
  resolve_python
  resolve_lotus
  if [[ $DRY_RUN == 0 ]]; then
    [[ -f $TRAIN_SCRIPT ]] || die "no training script at $TRAIN_SCRIPT (--train-script, --repo)" 3
    [[ $GENERATE -gt 0 || -d $DATA_DIR ]] || die "no dataset directory $DATA_DIR (--data, or --generate N)" 3
  fi
  # GNU time (-f/-o) or bash's time keyword.
  TIMER=bash
  if [[ -n $TIME_BIN && $TIME_BIN != none ]]; then
    if [[ -x $TIME_BIN ]] && { [[ $DRY_RUN == 1 ]] || "$TIME_BIN" -f %e -o /dev/null true 2>/dev/null; }; then
      TIMER=$TIME_BIN
    else
      warn "$TIME_BIN missing or not GNU time: timing with bash (no max RSS)"
    fi
  fi
}

# The configs, one "B G W" per line, in sweep order (workers "gpus" = G; duplicates dropped).
sweep_configs() {
  local b g w seen
  for b in $BATCH_SIZES; do
    for g in $GPU_COUNTS; do
      seen=" "
      for w in $WORKER_COUNTS; do
        [[ $w == gpus ]] && w=$g
        [[ $seen == *" $w "* ]] && continue
        seen+="$w "
        printf '%s %s %s\n' "$b" "$g" "$w"
      done
    done
  done
}

# The training command of one config into TRAIN_CMD (launcher + script + flags).
train_command() {
  local b=$1 g=$2 w=$3 dir=$4
  if [[ $g -gt 1 ]]; then
    TRAIN_CMD=("$PYTHON" -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node "$g")
  else
    TRAIN_CMD=("$PYTHON")
  fi
  # Under VTune -start-paused, collection is resumed at the first DataLoader iteration.
  [[ $MODE == vtune && $START_PAUSED == 1 ]] && TRAIN_CMD+=("$CL_DIR/itt_resume.py")
  TRAIN_CMD+=("$TRAIN_SCRIPT" "$DATA_DIR" -a "$ARCH" -b "$b" -j "$w" --epochs "$EPOCHS" --train-loop "$STEPS"
    --image-size "$IMAGE_SIZE" --device "$DEVICE" --trace-dir "$dir")
  [[ $PROFILE == 1 ]] && TRAIN_CMD+=(--profile)
  [[ $TELEMETRY == 1 ]] && TRAIN_CMD+=(--telemetry)
  TRAIN_CMD+=("${EXTRA_ARGS[@]}")
  return 0
}

csv_header="config,batch_size,gpus,workers,arch,device,epochs,steps,image_size,mode,wall_s,user_s,sys_s,max_rss_kb,exit_status,images_per_s,timer,started"

# Images per second of a finished run: the sum over ranks of run-r<rank>.json (empty when none).
images_per_s() {
  local files=("$1"/run-r*.json)
  [[ ${#files[@]} -gt 0 ]] || return 0
  sed -n 's/^ *"images_per_s": *\([0-9.eE+-]*\).*/\1/p' "${files[@]}" | awk '{s += $1} END {if (NR) printf "%.2f", s}'
}

# run_timed CONFIG_DIR CMD...: run CMD with stdout+stderr into CONFIG_DIR/train.log, timed; sets
# T_WALL T_USER T_SYS T_RSS T_STATUS.
run_timed() {
  local dir=$1
  shift
  local logf=$dir/train.log tfile=$dir/time.txt
  local -a cmd=("$@")
  [[ $TIMEOUT -gt 0 ]] && cmd=(timeout -k 30 "$TIMEOUT" "${cmd[@]}")
  T_STATUS=0 T_WALL="" T_USER="" T_SYS="" T_RSS=""
  if [[ $TIMER != bash ]]; then
    printf '+ %s > %s 2>&1\n' "$(cmd_line "$TIMER" -f '%e %U %S %M %x' -o "$tfile" "${cmd[@]}")" "$(quote_arg "$logf")"
    [[ $DRY_RUN == 1 ]] && return 0
    "$TIMER" -f '%e %U %S %M %x' -o "$tfile" "${cmd[@]}" >"$logf" 2>&1 || T_STATUS=$?
    # GNU time puts "Command exited with non-zero status N" first; the numbers are on the last line.
    local line x
    line=$(tail -n 1 "$tfile" 2>/dev/null) || line=""
    read -r T_WALL T_USER T_SYS T_RSS x <<<"$line" || true
    if is_uint "${x:-}" && [[ $T_STATUS -lt 128 ]]; then
      T_STATUS=$x
    fi
  else
    printf '+ time %s > %s 2>&1\n' "$(cmd_line "${cmd[@]}")" "$(quote_arg "$logf")"
    [[ $DRY_RUN == 1 ]] && return 0
    local TIMEFORMAT='%3R %3U %3S'
    { time "${cmd[@]}" >"$logf" 2>&1; } 2>"$tfile" || T_STATUS=$?
    read -r T_WALL T_USER T_SYS <<<"$(tail -n 1 "$tfile")" || true
  fi
  return 0
}

# A directory that already holds a run (trace files or results).
holds_run() {
  local d=$1
  [[ -d $d ]] || return 1
  local f=("$d"/*.lotustrace "$d"/run-r*.json)
  [[ ${#f[@]} -gt 0 ]]
}

sweep_main() {
  local configs b g w config dir rdir avail="" n_run=0 n_failed=0 n_skipped=0 failed_list=""
  configs=$(sweep_configs)
  local total
  total=$(wc -l <<<"$configs")
  local mode_name=trace
  [[ $MODE == vtune ]] && mode_name="vtune-$ANALYSIS"

  [[ $DRY_RUN == 1 ]] && note "dry run: nothing is run or written"
  note "$total config(s): batch sizes [$BATCH_SIZES] x GPUs [$GPU_COUNTS] x workers [$WORKER_COUNTS] -> $OUT_DIR"
  note "python: $PYTHON; timer: $TIMER"

  # GPUs are only detected when some config needs more than one (G = 1 runs on CPU if there is none).
  local max_g=0
  for g in $GPU_COUNTS; do [[ $g -gt $max_g ]] && max_g=$g; done
  if [[ $max_g -gt 1 && $FORCE == 0 ]]; then
    if [[ $DRY_RUN == 1 && -z ${AVAILABLE_GPUS:-} ]]; then
      note "GPUs not detected in a dry run: every config is listed (a real run skips those needing more GPUs than found)"
    else
      avail=$(detect_gpus)
      note "GPUs available: $avail"
    fi
  fi

  # Stop before running anything if a config directory already holds a run.
  if [[ $ON_EXISTING == stop ]]; then
    local existing=""
    while read -r b g w; do
      config=b${b}_gpu${g}_w${w}
      holds_run "$OUT_DIR/$config" && existing+=" $config"
      [[ $MODE == vtune && -e $VTUNE_DIR/$config ]] && existing+=" vtune/$config"
    done <<<"$configs"
    if [[ -n $existing ]]; then
      if [[ $DRY_RUN == 1 ]]; then
        note "already in $OUT_DIR:$existing (a real run stops: use --skip-existing, --overwrite or another --out)"
      else
        die "already in $OUT_DIR:$existing; use --skip-existing, --overwrite or another --out"
      fi
    fi
  fi

  run mkdir -p "$OUT_DIR"
  [[ $MODE == vtune ]] && run mkdir -p "$VTUNE_DIR"
  [[ $MODE == vtune && $REPORTS == 1 ]] && run mkdir -p "$REPORT_DIR"
  if [[ $GENERATE -gt 0 ]]; then
    run "$PYTHON" -c "$GENERATE_PY" "$DATA_DIR" "$GENERATE" || die "could not generate the dataset in $DATA_DIR"
  fi
  if [[ $DRY_RUN == 0 && ! -f $OUT_DIR/e2e.csv ]]; then
    printf '%s\n' "$csv_header" >"$OUT_DIR/e2e.csv"
  fi

  while read -r b g w; do
    config=b${b}_gpu${g}_w${w}
    dir=$OUT_DIR/$config
    printf '\n'
    note "config $config"
    if [[ -n $avail && $g -gt 1 && $g -gt $avail ]]; then
      note "skipped: needs $g GPUs, $avail available (--force to run anyway)"
      warn "$config skipped: needs $g GPUs, $avail available (--force runs it anyway)"
      n_skipped=$((n_skipped + 1))
      continue
    fi
    if [[ $ON_EXISTING == skip ]] && [[ -f $dir/run-r0.json ]]; then
      note "skipped: $dir/run-r0.json exists (--skip-existing)"
      n_skipped=$((n_skipped + 1))
      continue
    fi
    rdir=""
    [[ $MODE == vtune ]] && rdir=$VTUNE_DIR/$config
    if [[ $ON_EXISTING == overwrite ]]; then
      [[ -e $dir ]] && run rm -rf -- "${dir:?}"
      [[ -n $rdir && -e $rdir ]] && run rm -rf -- "${rdir:?}"
    fi
    run mkdir -p "$dir"
    train_command "$b" "$g" "$w" "$dir"
    local -a cmd
    if [[ $MODE == vtune ]]; then
      cmd=(env LOTUS_ITT=1 "$VTUNE" -collect "$ANALYSIS")
      [[ $START_PAUSED == 1 ]] && cmd+=(-start-paused)
      cmd+=(-result-dir "$rdir" "${VTUNE_ARGS[@]}" -- "${TRAIN_CMD[@]}")
    else
      cmd=("${TRAIN_CMD[@]}")
    fi
    local started
    started=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    run_timed "$dir" "${cmd[@]}"
    if [[ $MODE == vtune && $REPORTS == 1 && $T_STATUS == 0 ]]; then
      vtune_reports "$config" "$rdir"
    fi
    if [[ $DRY_RUN == 1 ]]; then
      note "then one row for $config appended to $OUT_DIR/e2e.csv"
      continue
    fi

    n_run=$((n_run + 1))
    local ips
    ips=$(images_per_s "$dir")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$config" "$b" "$g" "$w" "$ARCH" "$DEVICE" \
      "$EPOCHS" "$STEPS" "$IMAGE_SIZE" "$mode_name" "$T_WALL" "$T_USER" "$T_SYS" "$T_RSS" "$T_STATUS" "$ips" \
      "$(basename "$TIMER")" "$started" >>"$OUT_DIR/e2e.csv"
    if [[ $T_STATUS == 0 ]]; then
      log "$config: done in ${T_WALL:-?} s (max RSS ${T_RSS:-?} KB, ${ips:-?} images/s)"
    else
      n_failed=$((n_failed + 1))
      failed_list+="${failed_list:+ }$config"
      warn "$config failed (exit $T_STATUS after ${T_WALL:-?} s); last lines of $dir/train.log:"
      tail -n 20 "$dir/train.log" >&2 || true
      [[ $KEEP_GOING == 1 ]] || die "stopping (--stop-on-error)"
    fi
  done <<<"$configs"

  printf '\n'
  if [[ $DRY_RUN == 1 ]]; then
    [[ $ANALYZE == 1 ]] && run "${LOTUS_CMD[@]}" analyze stats --data-dir "$OUT_DIR" --output "$OUT_DIR/stats.csv"
    return 0
  fi
  log "$n_run config(s) run, $n_failed failed${failed_list:+ ($failed_list)}, $n_skipped skipped; times in $OUT_DIR/e2e.csv"
  if [[ $ANALYZE == 1 && $((n_run - n_failed)) -gt 0 ]]; then
    run "${LOTUS_CMD[@]}" analyze stats --data-dir "$OUT_DIR" --output "$OUT_DIR/stats.csv" ||
      warn "'lotus analyze stats' failed; the traces are in $OUT_DIR"
  fi
  [[ $((n_run - n_failed)) -gt 0 ]] && log "next: lotus analyze verdict -d $OUT_DIR; lotus plot -d $OUT_DIR -o $OUT_DIR/figures; lotus report -d $OUT_DIR -o $OUT_DIR/report.html"
  if [[ $n_failed -gt 0 ]]; then
    return 1
  fi
  return 0
}

# Generates the dataset once, like `train_imagenet.py --generate N` (same spec: seed 0), before any timing.
GENERATE_PY='import sys; from lotus.demo.dataset import DatasetSpec, generate_image_folder; print(generate_image_folder(sys.argv[1], DatasetSpec(images=int(sys.argv[2]))))'
