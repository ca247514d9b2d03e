#!/usr/bin/env bash
# LotusTrace sweep of ImageNet training: batch sizes x GPU counts x DataLoader workers, one lotus trace
# directory per config (OUT/b<B>_gpu<G>_w<W>/) and one end-to-end time row per config (OUT/e2e.csv).
# The study's run_imagenet sweep, around examples/train_imagenet.py. See docs/cloudlab.md.
set -euo pipefail
PROG=$(basename "$0")
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

MODE=trace
DEFAULT_OUT=lotustrace_imagenet
sweep_defaults

usage() {
  cat <<EOF_USAGE
Usage: $PROG [OPTIONS] [-- TRAIN_ARGS...]

Train an ImageNet model (examples/train_imagenet.py, lotus DataLoader) once per config of
batch sizes x GPU counts x workers. For each config:
  OUT/b<B>_gpu<G>_w<W>/   the lotus trace (*.lotustrace per process), run-r<rank>.json, train.log,
                          time.txt (and the Kineto trace with --profile)
  OUT/e2e.csv             one row: config, wall_s, user_s, sys_s, max_rss_kb, exit_status, images_per_s...
                          from /usr/bin/time -f (bash timing when it is missing: no max RSS)
G = 1 runs "PYTHON train_imagenet.py", G > 1 "PYTHON -m torch.distributed.run --nproc-per-node G".
Configs needing more GPUs than found are skipped (CPU-only machine: G = 1 only, on CPU) unless --force.
At the end, 'lotus analyze stats --data-dir OUT' (OUT is a directory of runs, one per config).

$(sweep_options_help)

Examples:
  $PROG --data /data/imagenet --out runs/imagenet --batch-sizes "128 256 512 1024" --gpus "1 2 4"
  $PROG --generate 2000 --out runs/tiny --batch-sizes 64 --gpus 1 --workers "0 2 4" --steps 20 --device cpu
  $PROG --data /data/imagenet --gpus 4 --workers "4 8 12 16" --dry-run
EOF_USAGE
}

script_option() {
  case $1 in
    -h | --help) usage; exit 0 ;;
  esac
}

parse_args "$@"
sweep_validate
sweep_main
