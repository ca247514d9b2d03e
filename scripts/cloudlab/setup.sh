#!/usr/bin/env bash
# Environment for the cloudlab scripts: a venv with lotus (editable, from this repository) and the
# pinned torch/torchvision; optionally the steps to install Intel VTune. Writes only inside the venv,
# except --install-vtune (apt, sudo). See docs/cloudlab.md.
set -euo pipefail
PROG=$(basename "$0")
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

LOTUS_REPO=${LOTUS_REPO:-$DEFAULT_REPO}
VENV=${VENV:-}
BASE_PYTHON=${PYTHON:-python3}
EXTRAS="test"
CONSTRAINTS=""
PIP_ARGS=()
PIP_CACHE=""
VTUNE_STEPS=0
INSTALL_VTUNE=0
SKIP_PYTHON=0

usage() {
  cat <<EOF_USAGE
Usage: $PROG [OPTIONS]

  PYTHON -m venv VENV                          (reused when it exists)
  VENV/bin/python -m pip install --upgrade pip
  VENV/bin/python -m pip install -c REPO/constraints.txt -e 'REPO[EXTRAS]'
  then prints the versions of lotus, torch and CUDA seen from the venv.
Nothing outside VENV is written (pip runs with --no-cache-dir unless --pip-cache DIR), except with
--install-vtune.

Options (defaults in brackets):
  --repo DIR          lotus repository [\$LOTUS_REPO; $DEFAULT_REPO]
  --venv DIR          the venv to create or update [\$VENV; REPO/.venv]
  --python PY         interpreter creating the venv, >= 3.10 [\$PYTHON; python3]
  --extras LIST       extras of lotus: test, gpu (NVML telemetry) [$EXTRAS]
  --constraints FILE  pip constraints, "none" for none [REPO/constraints.txt]
  --pip-args "ARGS"   more pip install arguments,
                      e.g. "--index-url https://download.pytorch.org/whl/cu126"
  --pip-cache DIR     let pip cache downloads in DIR [no cache]
  --no-python         skip the venv (e.g. only --vtune)
  --vtune             print the steps installing Intel VTune (oneAPI APT repository); runs nothing
  --install-vtune     run those steps (apt-get, sudo: changes the system's package sources)
  --dry-run           print every command, run nothing, exit 0
  -h, --help          this help

Examples:
  $PROG                                        # REPO/.venv with lotus[test]
  $PROG --venv ~/lotus-venv --extras test,gpu  # on a GPU node
  $PROG --vtune --no-python                    # how to get VTune for LotusTrace_imagenet_vtune.sh
EOF_USAGE
}

while [[ $# -gt 0 ]]; do
  if [[ $1 == --*=* ]]; then
    set -- "${1%%=*}" "${1#*=}" "${@:2}"
  fi
  case $1 in
    -h | --help) usage; exit 0 ;;
    --repo) need_value "$@"; LOTUS_REPO=$2; shift 2 ;;
    --venv) need_value "$@"; VENV=$2; shift 2 ;;
    --python) need_value "$@"; BASE_PYTHON=$2; shift 2 ;;
    --extras) need_value "$@"; EXTRAS=$2; shift 2 ;;
    --constraints) need_value "$@"; CONSTRAINTS=$2; shift 2 ;;
    --pip-args) need_value "$@"; read -r -a PIP_ARGS <<<"$2"; shift 2 ;;
    --pip-cache) need_value "$@"; PIP_CACHE=$2; shift 2 ;;
    --no-python) SKIP_PYTHON=1; shift ;;
    --vtune) VTUNE_STEPS=1; shift ;;
    --install-vtune) VTUNE_STEPS=1; INSTALL_VTUNE=1; shift ;;
    --dry-run) DRY_RUN=1; shift ;;
    *) usage_error "unknown option: $1" ;;
  esac
done

VENV=${VENV:-$LOTUS_REPO/.venv}
EXTRAS=${EXTRAS// /}
[[ $EXTRAS =~ ^[A-Za-z0-9_,-]*$ ]] || usage_error "--extras takes a comma-separated list, not '$EXTRAS'"
if [[ -z $CONSTRAINTS ]]; then
  CONSTRAINTS=$LOTUS_REPO/constraints.txt
  [[ -f $CONSTRAINTS ]] || CONSTRAINTS=none
fi
[[ $DRY_RUN == 1 ]] && note "dry run: nothing is run or written"

setup_python() {
  [[ -f $LOTUS_REPO/pyproject.toml || $DRY_RUN == 1 ]] || die "not a lotus repository (no pyproject.toml): $LOTUS_REPO" 3
  [[ $CONSTRAINTS == none || -f $CONSTRAINTS || $DRY_RUN == 1 ]] || die "no constraints file $CONSTRAINTS" 3
  if [[ $DRY_RUN == 0 ]]; then
    command -v "$BASE_PYTHON" >/dev/null 2>&1 || die "python not found: $BASE_PYTHON (--python)" 3
    "$BASE_PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
      die "$BASE_PYTHON is older than Python 3.10 (--python python3.11)" 3
  fi
  note "venv: $VENV; lotus: $LOTUS_REPO"
  if [[ -x $VENV/bin/python ]]; then
    note "$VENV exists: reused"
  else
    run "$BASE_PYTHON" -m venv "$VENV"
  fi
  local py=$VENV/bin/python
  local -a pip=("$py" -m pip)
  local -a cache=(--no-cache-dir)
  [[ -n $PIP_CACHE ]] && cache=(--cache-dir "$PIP_CACHE")
  run "${pip[@]}" install "${cache[@]}" --disable-pip-version-check --upgrade pip
  local -a cmd=("${pip[@]}" install "${cache[@]}" --disable-pip-version-check)
  [[ $CONSTRAINTS != none ]] && cmd+=(-c "$CONSTRAINTS")
  local target=$LOTUS_REPO
  [[ -n $EXTRAS ]] && target+="[$EXTRAS]"
  cmd+=(-e "$target" "${PIP_ARGS[@]}")
  run "${cmd[@]}"
  run "$VENV/bin/lotus" --version
  run "$py" -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "CUDA available:", torch.cuda.is_available(), "GPUs:", torch.cuda.device_count())'
  [[ $DRY_RUN == 1 ]] || log "ready: . $VENV/bin/activate, or pass --venv $VENV to the cloudlab scripts"
}

# Intel's documented APT installation of VTune (oneAPI repository), then the checks.
vtune_steps() {
  local sudo=sudo
  [[ $EUID == 0 ]] && sudo=""
  local key=/usr/share/keyrings/oneapi-archive-keyring.gpg
  local -a steps=(
    "wget -O- https://apt.repos.intel.com/intel-gpg-keys/GPG-PUB-KEY-INTEL-SW-PRODUCTS.PUB | gpg --dearmor | ${sudo:+$sudo }tee $key >/dev/null"
    "echo 'deb [signed-by=$key] https://apt.repos.intel.com/oneapi all main' | ${sudo:+$sudo }tee /etc/apt/sources.list.d/oneAPI.list"
    "${sudo:+$sudo }apt-get update"
    "${sudo:+$sudo }apt-get install -y intel-oneapi-vtune"
  )
  note "Intel VTune Profiler (oneAPI APT repository); see docs/cloudlab.md"
  local s
  for s in "${steps[@]}"; do
    if [[ $INSTALL_VTUNE == 1 ]]; then
      run bash -o pipefail -c "$s"
    else
      printf '%s\n' "$s"
    fi
  done
  cat <<EOF_NEXT
# then, in each shell that runs VTune:
source /opt/intel/oneapi/vtune/latest/env/vars.sh
vtune-self-checker.sh        # which analyses work on this machine (takes a few minutes)
# hardware event sampling without the sampling driver (perf-based; uarch-exploration needs it):
${sudo:+$sudo }sysctl -w kernel.perf_event_paranoid=0 kernel.kptr_restrict=0
EOF_NEXT
}

if [[ $INSTALL_VTUNE == 1 && $DRY_RUN == 0 ]]; then
  command -v apt-get >/dev/null 2>&1 || die "--install-vtune needs apt-get (Debian/Ubuntu); see docs/cloudlab.md for other systems" 3
fi
# (Called in if bodies, not in && / || lists, so that set -e stays on inside them.)
if [[ $SKIP_PYTHON == 0 ]]; then
  setup_python
fi
if [[ $VTUNE_STEPS == 1 ]]; then
  vtune_steps
fi
