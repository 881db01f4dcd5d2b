#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Files to device buffers on a GPU (docs/FILES.md), in PROCS processes
# (default 2), results in $OUTDIR:
#
#   bench   bench/file-bench: the storage's own read (a pread loop of DEPTH
#           threads, hot, cold where the page cache can be dropped, and
#           O_DIRECT), the plain path (read into malloc, then
#           clEnqueueWriteBuffer) and clpin_file_to_buffer, and the writes
#           back with fsync, SIZES (default 64M,1G,4G), RUNS (default 5)
#           runs per process (file-bench-*.txt; file-targets.txt: every
#           ratio line of every process)
#   python  bench/python_files.py: np.load + to_device against
#           clpin.load_npy, per-tensor reads against clpin.load_safetensors,
#           PY_SIZE (default 1G), TENSORS (default 300) tensors, under
#           PYTHON (a python3 with pyopencl; default: Debian's from
#           bench/debroot.sh when its .deb files are here, else python3)
#           (python-files-*.txt)
#   torch   the same tensors through torch.save and torch.load to CUDA, for
#           reference, under TORCH_PYTHON (default: the machine's python3)
#           (torch-files-*.txt)
#
# PARTS (default "bench python torch") picks parts; PLATFORM (default NVIDIA)
# names the platform; FILE_DIR (default /var/tmp: a disk, not tmpfs) holds
# the files, which need SIZES' largest free twice over. Dropping the page
# cache needs no root (posix_fadvise); a dirty or mapped page stays.
#
#   bench/gpu-files.sh        (or: PROCS=2 RUNS=5 SIZES=64M,1G bench/gpu-files.sh)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PROCS=${PROCS:-2}
RUNS=${RUNS:-5}
SIZES=${SIZES:-64M,1G,4G}
DEPTH=${DEPTH:-4}
PY_SIZE=${PY_SIZE:-1G}
TENSORS=${TENSORS:-300}
PARTS=${PARTS:-bench python torch}
PLATFORM=${PLATFORM:-NVIDIA}
FILE_DIR=${FILE_DIR:-/var/tmp}
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_start build/gpu-files

bench_machine >"$OUTDIR/machine.txt"
df -T "$FILE_DIR" >>"$OUTDIR/machine.txt" 2>&1 || true
bench_build "$BUILD_DIR" clpin file-bench || exit 1

if want bench; then
  bench_procs file-bench "$build/bench/file-bench" --platform "$PLATFORM" --runs "$RUNS" \
    --sizes "$SIZES" --depth "$DEPTH" --file "$FILE_DIR/clpin-file-bench-$$.bin"
  {
    echo "file-bench: $PROCS processes x $RUNS runs, sizes $SIZES, in $FILE_DIR"
    for p in $(seq "$PROCS"); do
      echo "process $p:"
      grep -E '^[0-9.]+ [KMG]iB file|^file-bench:| / ' "$OUTDIR/file-bench-$p.txt" | sed 's/^/  /'
    done
  } | tee "$OUTDIR/file-targets.txt"
fi

if want python || want torch; then
  HOST_PY=python3
  if [ -z "${PYTHON:-}" ] && [ -d "${DEBS:-.debs}" ]; then
    # shellcheck source=bench/debroot.sh
    source bench/debroot.sh && debroot_setup >/dev/null && PYTHON=$PY311
  fi
fi
if want python; then
  CLPIN_LIBRARY=$(readlink -f "$build/libclpin.so") PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} \
    bench_procs python-files "${PYTHON:-python3}" bench/python_files.py --platform "$PLATFORM" \
    --runs "$RUNS" --dir "$FILE_DIR" --size "$PY_SIZE" --tensors "$TENSORS"
  cat "$OUTDIR"/python-files-*.txt
fi
if want torch; then
  bench_procs torch-files "${TORCH_PYTHON:-$HOST_PY}" bench/python_files.py --impl torch \
    --runs "$RUNS" --dir "$FILE_DIR" --size "$PY_SIZE" --tensors "$TENSORS"
  cat "$OUTDIR"/torch-files-*.txt
fi

exit $status
