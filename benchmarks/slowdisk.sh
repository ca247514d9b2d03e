#!/usr/bin/env bash
# A machine with a slow disk and a small page cache, for the I/O-bound shape of issue 24's corpus: runs
# CMD in a cgroup whose reads from the disk under DIR are throttled to MBPS MB/s (0: not) and whose memory (the
# processes' own + the page cache they fill) is limited to MEM_MIB MiB, so a dataset larger than what is
# left of it is read from disk. Every child (lotus's probes, the job alone) is in the same cgroup: lotus
# measures the machine the job has. Needs root; cgroup v1 (blkio + memory controllers) or v2 (io + memory,
# the processes of this cgroup moved into a child "lotus-rest" so that its children may have controllers).
#
#   benchmarks/slowdisk.sh DIR MBPS MEM_MIB -- python benchmarks/corpus.py --host local --shapes io_bound ...
set -euo pipefail
[ $# -ge 5 ] && [ "$4" = "--" ] || { echo "usage: slowdisk.sh DIR MBPS MEM_MIB -- CMD..." >&2; exit 2; }
dir=$1 mbps=$2 mem=$3; shift 4
mkdir -p "$dir"
src=$(findmnt -no SOURCE --target "$dir")
disk=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1)
dev=/dev/${disk:-$(basename "$src")}
majmin=$(lsblk -dno MAJ:MIN "$dev" | tr -d ' ')
name=lotus-slowdisk-$$
if [ -w /sys/fs/cgroup/blkio ] && [ -w /sys/fs/cgroup/memory ]; then  # cgroup v1
    blk=/sys/fs/cgroup/blkio memcg=/sys/fs/cgroup/memory
    home=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup)
    mkdir "$blk/$name" "$memcg/$name"
    # on exit: back to where this shell was, then the cgroups go (rmdir fails while a process is in one)
    trap 'echo $$ > "$blk/cgroup.procs"; echo $$ > "$memcg$home/cgroup.procs"; rmdir "$blk/$name" "$memcg/$name" 2>/dev/null || true' EXIT
    [ "$mbps" -gt 0 ] && echo "$majmin $((mbps * 1000000))" > "$blk/$name/blkio.throttle.read_bps_device"
    echo $((mem * 1048576)) > "$memcg/$name/memory.limit_in_bytes"
    echo $$ > "$blk/$name/cgroup.procs"
    echo $$ > "$memcg/$name/cgroup.procs"
elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then  # cgroup v2
    cg=/sys/fs/cgroup$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup)
    cg=${cg%/lotus-rest}
    mkdir -p "$cg/lotus-rest"
    for p in $(cat "$cg/cgroup.procs"); do echo "$p" > "$cg/lotus-rest/cgroup.procs" 2>/dev/null || true; done
    if [ "$mbps" -gt 0 ]; then echo "+io +memory"; else echo "+memory"; fi > "$cg/cgroup.subtree_control"
    mkdir "$cg/$name"
    trap 'echo $$ > "$cg/lotus-rest/cgroup.procs"; rmdir "$cg/$name" 2>/dev/null || true' EXIT
    [ "$mbps" -gt 0 ] && echo "$majmin rbps=$((mbps * 1000000))" > "$cg/$name/io.max"
    echo $((mem * 1048576)) > "$cg/$name/memory.max"
    echo $$ > "$cg/$name/cgroup.procs"
else
    echo "slowdisk.sh: needs root and cgroup v1 (blkio, memory) or v2 at /sys/fs/cgroup" >&2; exit 2
fi
echo "slowdisk: $dev ($majmin) reads at $mbps MB/s, memory $mem MiB (cgroup $name)" >&2
"$@" &
wait $! || { rc=$?; exit $rc; }
