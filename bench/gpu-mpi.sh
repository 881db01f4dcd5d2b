#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libclpin-mpi on a host of several GPUs: one MPI rank per GPU,
# every case against its baseline in the same launch on the same GPUs.
#
#   bench/gpu-mpi.sh                 the GPU machine (NVIDIA's OpenCL)
#   bench/gpu-mpi.sh --selftest      any machine (POCL): toy sizes, every case
#                                    once, data checked; ci/stages/47-mpi.sh
#
# Per launch (LAUNCHES, default 2), bench/mpi-bench.c prints the devices
# each rank uses and, with RUNS (default 5) runs per figure:
#   stages     pinned read/write, pageable read/write, MPI host->host
#   send       256 MiB rank 0 -> 1: clpin shm, clpin forced point-to-point
#              (CLPIN_MPI_SHM=0), plain; ratios against the targets
#   exchange   256 MiB each way 0 <-> 1: blocking in order, isend + irecv
#   small      4 KiB and 64 KiB ping-pong, clpin / plain time
#   allreduce  float32 64 MiB and 256 MiB on all NP ranks, clpin / plain
#   bcast      256 MiB from rank 0
#   overlap    allreduce (the first AR_MIB) and a kernel of as long, blocking
#              one after the other against clpin_mpi_iallreduce at once
# then (once) bench/torch_allreduce.py's gloo and NCCL allreduce of CUDA
# tensors on the same NP GPUs, and examples/mpi_loader.c transfer-bound on 1
# rank and on NP ranks. The summary pools every launch's runs per figure:
# median, spread, and each target with the runs it held in:
#   send shm / min(pinned read, pinned write)   >= 0.8     shm / plain  >= 10
#   send p2p / MPI host->host                   >= 0.9     p2p / plain  >= 2
#   small messages clpin / plain time           <= 1.1
#   allreduce (NP ranks)  >= 10 GB/s, >= 10x plain, >= 5x torch gloo (NCCL beside)
#   loader on NP ranks    >= 0.9x one rank's rate x NP
#
# Open MPI: where bench/debroot.sh and its .debs (DEBS, default .debs) or
# an unpacked root (DEBROOT, default build/debroot) are there (the GPU
# machine has no MPI of its own), debroot_setup exports ORTERUN,
# OPAL_PREFIX, PATH and LD_LIBRARY_PATH; otherwise mpirun from PATH.
# Environment: OUT (results folder: summary.txt, machine.txt, raw.tar.gz;
# else OUTDIR, default build/gpu-mpi), BUILD_DIR (default build/gpu-mpi-build),
# NP (ranks, default the GPU count from nvidia-smi -L, else 2), RUNS,
# LAUNCHES, PLATFORM (default NVIDIA; "" with --selftest), MIB (256),
# AR_MIB (64,256), CLPIN_MPI_CHUNK (default 4M; e.g. 8M to compare),
# CLPIN_MPI_THREADS, OMPI_MCA_pml / OMPI_MCA_btl (default ob1 /
# self,vader,tcp: every figure of a launch, baselines too, uses the same),
# CASES (mpi-bench's --cases, default all), ITERS (--iters: round trips
# a sample of small, default 200),
# PARTNER=pocl (rank 0 on the GPU, the other ranks on POCL's CPU device:
# one GPU context, for overlap on a one-GPU machine), SKIP_TORCH=1,
# SKIP_LOADER=1,
# SKIP_BUILD=1, MPI_BENCH_BUILD (an existing build to use, as
# 47-mpi does).
# About 2-4 minutes of GPU time on 4 H200s.
set -euo pipefail
cd "$(dirname "$0")/.."
selftest=0
[ "${1:-}" = --selftest ] && selftest=1
# shellcheck source=bench/lib.sh
source bench/lib.sh
bench_pack_begin gpu-mpi
rm -f "$OUTDIR"/bench-*.log "$OUTDIR"/loader-*.log "$OUTDIR"/torch*.log # an earlier run's
start=$(date +%s)

# The .debs' Open MPI where it is there to use (its .deb files, or a root
# already unpacked); else the machine's own mpirun (CI, a workstation).
if [ -f bench/debroot.sh ] && { ls "${DEBS:-.debs}"/*.deb >/dev/null 2>&1 ||
  [ -x "${DEBROOT:-build/debroot}/usr/bin/orterun" ]; }; then
  # shellcheck source=/dev/null
  source bench/debroot.sh
  debroot_setup
fi
MPIRUN=${ORTERUN:-$(command -v mpirun || true)}
[ -n "$MPIRUN" ] || { echo "gpu-mpi: no mpirun (and no ORTERUN from bench/debroot.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One host: shared memory and loopback; ob1 rather than a UCX the .debs may
# bring without its network. --bind-to none: a rank's copy and reduction
# threads need more than the one core Open MPI would bind it to.
export OMPI_MCA_pml=${OMPI_MCA_pml:-ob1} OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader,tcp}
export OMPI_MCA_btl_base_warn_component_unused=0

if [ "$selftest" = 1 ]; then
  PLATFORM=${PLATFORM-}
  NP=${NP:-2} RUNS=${RUNS:-1} LAUNCHES=${LAUNCHES:-1} MIB=${MIB:-2} AR_MIB=${AR_MIB:-1,2}
  SKIP_TORCH=1
  export CLPIN_MPI_CHUNK=${CLPIN_MPI_CHUNK:-256K}
  extra=(--iters 5)
else
  PLATFORM=${PLATFORM-NVIDIA}
  # NVIDIA's ICD alone: the loader also lists POCL, first.
  if ldconfig -p 2>/dev/null | grep -q libnvidia-opencl.so.1; then
    # Not a default: the GPU machine presets libpocl.so.2:libnvidia-opencl.so.1,
    # under which ranks started by orterun saw POCL alone.
    export OCL_ICD_FILENAMES=libnvidia-opencl.so.1
  fi
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  NP=${NP:-$([ "${ngpu:-0}" -ge 2 ] && echo "$ngpu" || echo 2)}
  RUNS=${RUNS:-5} LAUNCHES=${LAUNCHES:-2} MIB=${MIB:-256} AR_MIB=${AR_MIB:-64,256}
  extra=(--iters "${ITERS:-200}")
fi
mpiflags=(--bind-to none)
[ "$selftest" = 1 ] && mpiflags+=(--oversubscribe)
for v in OCL_ICD_FILENAMES OCL_ICD_VENDORS LD_LIBRARY_PATH OPAL_PREFIX PATH CLPIN_MPI_CHUNK \
  CLPIN_MPI_THREADS OMPI_MCA_pml OMPI_MCA_btl; do
  [ -n "${!v:-}" ] && mpiflags+=(-x "$v")
done

{
  bench_machine
  nvidia-smi topo -m 2>/dev/null || true
  echo "mpirun: $MPIRUN ($("$MPIRUN" --version 2>&1 | head -n 1))"
  echo "NP=$NP RUNS=$RUNS LAUNCHES=$LAUNCHES MIB=$MIB AR_MIB=$AR_MIB PLATFORM=$PLATFORM" \
    "CLPIN_MPI_CHUNK=${CLPIN_MPI_CHUNK:-default} OCL_ICD_FILENAMES=${OCL_ICD_FILENAMES:-}"
} >"$OUTDIR/machine.txt" 2>&1

# --- build: CMake's FindMPI pointed at the MPI in use (the .debs' root
# has no working mpicc wrapper there, so the header and library are named)
BUILD_DIR=${MPI_BENCH_BUILD:-${BUILD_DIR:-build/gpu-mpi-build}}
if [ -z "${MPI_BENCH_BUILD:-}" ] && [ "${SKIP_BUILD:-0}" != 1 ]; then
  cmakeflags=(-DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_LAYER=OFF
    -DCLPIN_BUILD_EXAMPLES=ON -DCLPIN_EXAMPLE_CLBLAST=OFF -DCLPIN_BUILD_BENCH=ON -DCLPIN_MPI=ON)
  if [ -n "${OPAL_PREFIX:-}" ]; then
    # Debian's layout: lib/<triplet>/openmpi/include/mpi.h (not the Fortran
    # module folder's mpi.h), lib/<triplet>/libmpi.so.40.
    inc=$(ls "$OPAL_PREFIX"/lib/*/openmpi/include/mpi.h 2>/dev/null | head -n 1)
    [ -n "$inc" ] || inc=$(find "$OPAL_PREFIX" -name mpi.h -path '*openmpi/include/mpi.h' 2>/dev/null | head -n 1)
    lib=$(ls "$OPAL_PREFIX"/lib/*/libmpi.so.[0-9]* "$OPAL_PREFIX"/lib/*/openmpi/lib/libmpi.so 2>/dev/null | head -n 1)
    [ -n "$inc" ] && [ -n "$lib" ] || { echo "gpu-mpi: no mpi.h or libmpi.so under $OPAL_PREFIX" >&2; exit 1; }
    cmakeflags+=(-DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_ADDITIONAL_INCLUDE_DIRS="$(dirname "$inc")"
      -DMPI_C_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$lib" -DMPIEXEC_EXECUTABLE="$MPIRUN")
  fi
  cmake -S . -B "$BUILD_DIR" "${cmakeflags[@]}" >"$OUTDIR/cmake.log" 2>&1 ||
    { cat "$OUTDIR/cmake.log"; exit 1; }
  cmake --build "$BUILD_DIR" --target mpi-bench mpi_loader -j "$(nproc)" >"$OUTDIR/build.log" 2>&1 ||
    { tail -n 30 "$OUTDIR/build.log"; exit 1; }
fi
bench=$BUILD_DIR/bench/mpi-bench
loader=$BUILD_DIR/examples/mpi_loader
platform=()
[ -n "$PLATFORM" ] && platform=(--platform "$PLATFORM")

# --- mpi-bench, LAUNCHES times
args=(--mib "$MIB" --ar-mib "$AR_MIB" --runs "$RUNS" "${extra[@]}"
  --cases "${CASES:-stages,send,exchange,small,allreduce,bcast,overlap}")
if [ "${PARTNER:-}" = pocl ]; then
  # Rank 0 alone on the GPU; the others on POCL's CPU device, computing
  # nothing in overlap: one GPU context, with no other process's context to
  # switch to (MPMD: each part with its own OpenCL loader list).
  run=(-np 1 env ${OCL_ICD_FILENAMES:+OCL_ICD_FILENAMES=$OCL_ICD_FILENAMES} "$bench" "${platform[@]}" "${args[@]}"
    --kernel-ranks 1 : -np $((NP - 1)) env OCL_ICD_FILENAMES=libpocl.so.2 "$bench"
    --platform Portable "${args[@]}" --kernel-ranks 1)
else
  run=(-np "$NP" "$bench" "${platform[@]}" "${args[@]}")
fi
for l in $(seq 1 "$LAUNCHES"); do
  echo "=== launch $l of $LAUNCHES: mpi-bench on $NP ranks ($(($(date +%s) - start)) s)"
  timeout 600 "$MPIRUN" "${mpiflags[@]}" "${run[@]}" 2>&1 | tee "$OUTDIR/bench-$l.log"
  grep -q 'data checked, exact' "$OUTDIR/bench-$l.log" || { echo "gpu-mpi: launch $l failed" >&2; exit 1; }
done

# --- PyTorch's allreduce on the same GPUs (no MPI: it spawns its processes)
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  echo "=== torch.distributed allreduce, gloo and NCCL, $NP GPUs ($(($(date +%s) - start)) s)"
  # HOST_PY (bench/debroot.sh): the machine's python3 (torch's) without the
  # root's libraries on LD_LIBRARY_PATH.
  timeout 300 "${HOST_PY:-python3}" bench/torch_allreduce.py --np "$NP" --mib "$AR_MIB" --runs "$RUNS" 2>&1 |
    tee "$OUTDIR/torch.log" || echo "gpu-mpi: torch_allreduce failed (see torch.log)"
fi

# --- the loader, transfer-bound: 1 rank, then NP ranks
lkib=$((MIB * 256)) # batches of MIB/4 MiB
[ "$selftest" = 1 ] && lkib=256
nb=$((NP * 8))
for np in $([ "${SKIP_LOADER:-0}" = 1 ] || echo 1 "$NP"); do
  echo "=== mpi_loader on $np rank(s), $nb batches of $lkib KiB ($(($(date +%s) - start)) s)"
  flags=(-np "$np" "${mpiflags[@]}")
  CLPIN_MPI_PLATFORM=$PLATFORM timeout 300 "$MPIRUN" "${flags[@]}" -x CLPIN_MPI_PLATFORM "$loader" \
    --batches "$nb" --kib "$lkib" --grad-kib 4 --touch-kib 4 --epochs $((selftest ? 1 : 3)) 2>&1 |
    tee "$OUTDIR/loader-$np.log"
  grep -q 'all checks OK' "$OUTDIR/loader-$np.log" || { echo "gpu-mpi: mpi_loader on $np failed" >&2; exit 1; }
done

# --- the loader's hardware bound: CUDA pinned copies on 1 and NP GPUs at once
if [ "$selftest" != 1 ] && [ "${SKIP_TORCH:-0}" != 1 ] && [ "${SKIP_LOADER:-0}" != 1 ]; then
  echo "=== CUDA pinned H2D on 1 and $NP GPUs at once ($(($(date +%s) - start)) s)"
  timeout 200 "${HOST_PY:-python3}" bench/torch_baseline.py --at-once "1,$NP" --mib $((lkib / 1024)) 2>&1 |
    tee "$OUTDIR/torch-h2d.log" || echo "gpu-mpi: torch_baseline --at-once failed (see torch-h2d.log)"
fi

# --- summary: every launch's RAW lines pooled by figure
{
  cat "$OUTDIR/machine.txt"
  echo "--- devices (launch 1)"
  grep -E '^  rank [0-9]+: device' "$OUTDIR/bench-1.log"
  echo "--- every figure and target pooled over $LAUNCHES launch(es) x $RUNS runs, each launch's median"
  bench_pool "" "$OUTDIR"/bench-*.log
  echo "--- small messages (clpin / plain time, target <= 1.1), per launch"
  grep -h -e 'TARGET clpin / plain time' "$OUTDIR"/bench-*.log || true
  grep -q "^RAW	clpin allreduce" "$OUTDIR"/bench-*.log &&
    echo "--- allreduce against torch.distributed (same GPUs, same sizes)"
  for mib in $(grep -q "^RAW	clpin allreduce" "$OUTDIR"/bench-*.log && echo "${AR_MIB//,/ }"); do
    c=$(grep -h "^RAW	clpin allreduce $mib MiB" "$OUTDIR"/bench-*.log | cut -f4 | paste -sd, -)
    g=$(grep -h "^RAW	torch gloo allreduce $mib MiB" "$OUTDIR/torch.log" 2>/dev/null | cut -f4 || true)
    n=$(grep -h "^RAW	torch nccl allreduce $mib MiB" "$OUTDIR/torch.log" 2>/dev/null | cut -f4 || true)
    med() { tr , '\n' | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
    cm=$(echo "$c" | med); gm=$(echo "$g" | med); nm=$(echo "$n" | med)
    printf "  %s MiB, %s ranks: clpin %s GB/s (>= 10: %s); torch gloo %s GB/s" "$mib" "$NP" "${cm:-?}" \
      "$(awk -v c="${cm:-0}" 'BEGIN {print ((c >= 10) ? "met" : "MISSED")}')" "${gm:-not run}"
    if [ -n "$gm" ]; then
      printf ", clpin / gloo %.2fx (>= 5: %s)" "$(awk -v c="$cm" -v g="$gm" 'BEGIN {print c / g}')" \
        "$(awk -v c="$cm" -v g="$gm" 'BEGIN {print ((c / g >= 5) ? "met" : "MISSED")}')"
    fi
    echo "; NCCL (NVLink ceiling) ${nm:-not run} GB/s"
  done
  [ -f "$OUTDIR/loader-1.log" ] && echo "--- the loader, transfer-bound (target: NP ranks >= 0.9x one rank x NP)"
  [ -f "$OUTDIR/loader-1.log" ] && one=$(sed -nE 's/.*all ranks ([0-9.]+) GB\/s.*/\1/p' "$OUTDIR/loader-1.log")
  [ -f "$OUTDIR/loader-$NP.log" ] && all=$(sed -nE 's/.*all ranks ([0-9.]+) GB\/s.*/\1/p' "$OUTDIR/loader-$NP.log")
  [ -f "$OUTDIR/loader-1.log" ] && awk -v o="$one" -v a="$all" -v n="$NP" 'BEGIN {
    r = (o > 0) ? a / (o * n) : 0
    printf "  1 rank %.2f GB/s, %d ranks %.2f GB/s: %.2fx of %d x one rank  %s\n", o, n, a, r, n, (r >= 0.9) ? "met" : "MISSED" }'
  if [ -s "$OUTDIR/torch-h2d.log" ]; then
    # The same work's bound on this host: CUDA pinned copies on NP GPUs at once.
    grep 'cuda pinned h2d' "$OUTDIR/torch-h2d.log"
    cuda=$(sed -nE "s/.*h2d, $NP GPU\(s\) at once.* ([0-9.]+) GB\/s .*/\1/p" "$OUTDIR/torch-h2d.log")
    awk -v a="$all" -v c="$cuda" -v n="$NP" 'BEGIN { if (c > 0)
      printf "  %d ranks / CUDA pinned on %d GPUs at once: %.2fx (the host'"'"'s bound, same launch)\n", n, n, a / c }'
  fi
  echo "elapsed: $(($(date +%s) - start)) s"
} >"$OUTDIR/summary.txt"
cat "$OUTDIR/summary.txt"
bench_pack_end
