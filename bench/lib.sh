# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# shellcheck disable=SC2034 # build and status are the sourcing script's
# Sourced by every bench script (bench/gpu-*.sh, bench/pocl-unified.sh) from
# the repository root. It brings bench/nvidia-icd.sh (the ICD, the CUDA
# runtime, gpu_counts, ocl_icd_from_deb) and:
#   bench_build DIR [-DOPTION=VALUE...] TARGET...
#       configure DIR as a Release build of the benches (tests and examples
#       off, the options given added) and build TARGET... on every core
#   bench_machine
#       the machine's facts on stdout, for a run's machine.txt: date, commit,
#       kernel, CPUs, memory, compiler, GPUs and the CUDA runtime found
#   bench_outdir VAR
#       make the folder named by $VAR, and set VAR to its absolute path
#   bench_start OUTDIR_DEFAULT
#       a GPU script's start: OUTDIR (default OUTDIR_DEFAULT) and BUILD_DIR
#       (default build/gpu) made, build its absolute path, status=0
#   want PART: whether $PARTS names PART
#   bench_procs NAME COMMAND...
#       COMMAND in PROCS processes in turn, output in $OUTDIR/NAME-P.txt;
#       status=1 when one fails
#   bench_pack_begin NAME, bench_pack_end
#       with OUT set, the logs go to a temporary OUTDIR and end as $OUT's
#       summary.txt, machine.txt and raw.tar.gz; else OUTDIR (default
#       build/NAME) keeps them
#   bench_pool UNIT FILE...
#       every figure of the FILEs' RAW lines (benchstat.h) pooled: median,
#       range and each file's median, UNIT after a rate's ("": none); a
#       target's held runs and met or MISSED; then how many targets met
#   bench_device: DEVICE set to NVIDIA where its OpenCL is there, when unset
#   say TEXT: "=== [N s] TEXT", N the seconds since lib.sh was sourced
#   bench_python_setup [pyopencl]
#       the Python benches' start (gpu-workers.sh, gpu-dataset.sh; $OUT,
#       $BUILD_DIR set): Debian's python (bench/debroot.sh), DEVICE
#       (NVIDIA when its OpenCL is there), $OUT/machine.txt (with the torch
#       python's pyopencl when asked), the library built, CLPIN_LIBRARY and
#       PYTHONPATH exported; exits 1 when a step fails
# shellcheck source=bench/nvidia-icd.sh
source bench/nvidia-icd.sh

bench_t0=$(date +%s)
say() { echo "=== [$(($(date +%s) - bench_t0)) s] $*"; }

bench_build() {
  local dir=$1 opts=() targets=()
  shift
  for a in "$@"; do
    case $a in
      -D*) opts+=("$a") ;;
      *) targets+=("$a") ;;
    esac
  done
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCLPIN_BUILD_TESTS=OFF \
    -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=ON "${opts[@]}" >/dev/null &&
    cmake --build "$dir" --target "${targets[@]}" -j "$(nproc)" >/dev/null
}

bench_machine() {
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  uname -srm
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket|NUMA)' || true
  echo "nproc: $(nproc)"
  grep MemTotal /proc/meminfo || true
  cc --version 2>/dev/null | head -n 1
  nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,clocks.sm,clocks.mem \
    --format=csv 2>/dev/null || true
  echo "CUDA runtime for the baselines: ${CLPIN_BENCH_CUDART:-found by the dynamic loader}"
}

bench_outdir() {
  mkdir -p "${!1}"
  printf -v "$1" '%s' "$(cd "${!1}" && pwd)"
}

bench_start() {
  OUTDIR=${OUTDIR:-$1}
  BUILD_DIR=${BUILD_DIR:-build/gpu}
  bench_outdir OUTDIR
  mkdir -p "$BUILD_DIR"
  build=$(cd "$BUILD_DIR" && pwd)
  status=0
}

want() { [[ " $PARTS " == *" $1 "* ]]; }

bench_procs() {
  local name=$1 p
  shift
  for p in $(seq "$PROCS"); do
    "$@" >"$OUTDIR/$name-$p.txt" 2>&1 || status=1
  done
}

bench_pack_begin() {
  FINAL=${OUT:-}
  if [ -n "$FINAL" ]; then
    OUTDIR=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  else
    OUTDIR=${OUTDIR:-build/$1}
  fi
  bench_outdir OUTDIR
}

bench_pack_end() {
  if [ -n "$FINAL" ]; then
    mkdir -p "$FINAL"
    cp "$OUTDIR/summary.txt" "$OUTDIR/machine.txt" "$FINAL"/
    tar -czf "$FINAL/raw.tar.gz" -C "$OUTDIR" .
    rm -rf "$OUTDIR"
    echo "results in $FINAL (summary.txt, machine.txt, raw.tar.gz)"
  else
    echo "results in $OUTDIR"
  fi
}

bench_pool() {
  local unit=$1
  shift
  awk -F'\t' -v unit="$unit" '
    function med(a, n,   i, j, t) { # sorts a[1..n] in place
      for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $1 == "RAW" {
      name = $2
      if (!(name in goal)) { order[++nn] = name; goal[name] = $3 }
      m = split($4, v, ",")
      for (i = 1; i <= m; i++) vals[name, ++cnt[name]] = v[i]
      # the median of this process (file)
      for (i = 1; i <= m; i++) w[i] = v[i]
      procmed[name] = procmed[name] (procmed[name] == "" ? "" : " ") sprintf(goal[name] > 0 ? "%.3f" : "%.1f", med(w, m))
    }
    END {
      met = 0; total = 0
      for (k = 1; k <= nn; k++) {
        name = order[k]; n = cnt[name]; held = 0
        for (i = 1; i <= n; i++) { a[i] = vals[name, i]; if (goal[name] > 0 && a[i] >= goal[name]) held++ }
        md = med(a, n)
        if (goal[name] > 0) {
          total++; ok = md >= goal[name]; met += ok
          printf "TARGET %-52s median %.3f [%.3f .. %.3f] >= %s held %d/%d runs  process medians %s  %s\n",
            name, md, a[1], a[n], goal[name], held, n, procmed[name], ok ? "met" : "MISSED"
        } else {
          printf "       %-52s median %7.2f%s [%.2f .. %.2f]  process medians %s\n",
            name, md, unit == "" ? "" : " " unit, a[1], a[n], procmed[name]
        }
      }
      printf "targets met (pooled median >= goal): %d of %d\n", met, total
    }' "$@"
}

bench_device() {
  if [ -z "${DEVICE:-}" ] && { ldconfig -p | grep -q libnvidia-opencl || clinfo -l 2>/dev/null | grep -q NVIDIA; }; then
    DEVICE=NVIDIA
  fi
  DEVICE=${DEVICE:-}
}

bench_python_setup() {
  # shellcheck source=bench/debroot.sh
  source bench/debroot.sh
  if ! debroot_setup; then
    say "no Debian Python (bench/debroot.sh: bash bench/debroot.sh download, then carry ${DEBS:-.debs})"
    exit 1
  fi
  bench_device
  export DEVICE

  say "machine"
  {
    bench_machine
    echo "Debian python: $("$PY311" -c 'import sys, numpy, pyopencl; print(sys.version.split()[0], "numpy", numpy.__version__, "pyopencl", pyopencl.VERSION_TEXT)' 2>&1)"
    echo "Debian PIL: $("$PY311" -c 'import PIL; print(PIL.__version__)' 2>&1 | tail -n 1)"
    echo "torch python: $("$HOST_PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "CUDA", torch.version.cuda)' 2>&1 | tail -n 1)"
    echo "torch PIL: $("$HOST_PY" -c 'import PIL; print(PIL.__version__)' 2>&1 | tail -n 1)"
    [ "${1:-}" = pyopencl ] &&
      echo "torch pyopencl: $("$HOST_PY" -c 'import pyopencl; print(pyopencl.VERSION_TEXT)' 2>&1 | tail -n 1)"
    echo "OpenCL device wanted: ${DEVICE:-the first platform}"
  } | tee "$OUT/machine.txt"

  say "build (Release)"
  if ! bench_build "$BUILD_DIR" -DCLPIN_BUILD_LAYER=OFF clpin >"$OUT/build.log" 2>&1; then
    tail -n 30 "$OUT/build.log"
    say "build failed (build.log)"
    exit 1
  fi
  CLPIN_LIBRARY=$(readlink -f "$BUILD_DIR/libclpin.so")
  export CLPIN_LIBRARY
  export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
}
