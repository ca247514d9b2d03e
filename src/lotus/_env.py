"""Names shared across processes: environment variables lotus reads, marker files (no imports)."""

TRACE_DIR = "LOTUS_TRACE_DIR"  # tracing on, files in this directory
ITT = "LOTUS_ITT"  # "1": ITT tasks for VTune
TELEMETRY = "LOTUS_GPU_TELEMETRY"  # "1": NVML sampling
LAUNCH = "LOTUS_LAUNCH"  # "1": lotus run's start-up hook makes torch's DataLoader lotus's
WORKERS = "LOTUS_WORKERS"  # lotus run --workers N: num_workers of every DataLoader
LOADER_ARGS = "LOTUS_LOADER_ARGS"  # lotus run --set KEY=VALUE: JSON object of DataLoader settings to force
REPLAY = "LOTUS_REPLAY"  # lotus stalls: prepare N batches, then replay them (the loop's ingestion limit)
DATASET_FILES = "LOTUS_DATASET_FILES"  # "1": loaders list their dataset's files (lotus.dataloader.datafiles)
DETAIL = "LOTUS_DETAIL"  # "full": per-sample/per-op records for every batch; "budget" (default): by a CPU budget
DETAIL_BUDGET = "LOTUS_DETAIL_BUDGET_PCT"  # the detail budget, percent of the pipeline's CPU (default 0.5)
STEPS = "LOTUS_STEPS"  # lotus run --steps N: end the job after N consumed batches of one loader
PRECISION = "LOTUS_PRECISION"  # lotus run --precision P: end the job once its steady rate is known to +-P
PROBE_MAX_S = "LOTUS_PROBE_MAX_S"  # lotus run --max-seconds S: end a probe after S seconds of hand-offs
STOP_BELOW = "LOTUS_STOP_BELOW"  # lotus run --below R: end a probe once its rate's interval lies under R samples/s
PROBE_SERIES = "LOTUS_PROBE_SERIES"  # DIR: probes in one process; at each probe's end wait for DIR/next-K.json
# what one probe of a series sets (lotus.launch.series sends them, lotus.dataloader.series applies them)
PROBE_KEYS = (TRACE_DIR, WORKERS, LOADER_ARGS, STEPS, PRECISION, PROBE_MAX_S, STOP_BELOW)
# live metrics sinks (lotus.live.sinks): a sidecar process follows the trace and publishes
TENSORBOARD = "LOTUS_TENSORBOARD"  # DIR: TensorBoard scalars under DIR/lotus/
PROMETHEUS = "LOTUS_PROMETHEUS"  # [HOST:]PORT: a Prometheus endpoint
WANDB = "LOTUS_WANDB"  # "1": Weights & Biases
SINK_PERIOD = "LOTUS_SINK_PERIOD"  # seconds between publishes (default 10)
SIDECAR = "LOTUS_SIDECAR"  # "1": lotus run's sidecar follows this trace directory (loaders start none)

# files
SHM_DIR = "/dev/shm"  # the memory-backed file system shared memory lives in (torch's tensors, lotus's scan parts)
STEPS_MARKER = "lotus-steps-reached"  # lotus-steps-reached-r<rank>-p<pid>.json: a job reached --steps
RUN_FILE = "lotus-run.json"  # written by the launcher in the trace directory
