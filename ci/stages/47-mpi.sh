#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# libclpin-mpi (include/clpin_mpi.h) under mpirun on POCL, 2 and 3 ranks
# (--oversubscribe: CI has 2 cores):
#   1. the MPI build (CLPIN_MPI=ON, warnings as errors): the C tests
#      (tests/mpi/test_mpi.c, on 4 ranks too, and on 3 ranks of which two
#      cannot open a peer's memory: tests/mpi/noprocfd.c) and examples/mpi_loader.c
#      through CTest (label mpi; CLPIN_MPI_TESTS=ON registers them); then
#      the installed package: exported symbols, clpin::mpi and clpin-mpi.pc
#      consumers (tests/package/mpi);
#   2. python/tests/test_mpi.py and examples/python/mpi_loader.py under
#      mpirun (CLPIN_REQUIRE_MPI=1: the tests fail rather than skip);
#   3. bench/gpu-mpi.sh's own check on POCL (tiny sizes, every case once);
#   4. the C tests again built with AddressSanitizer + UBSan (Open MPI's own
#      allocations are never freed, so leak checking is off here), on 2 and
#      3 ranks and (messages to oneself) on 1;
#   5. the C tests (2, 3 and 4 ranks) and examples/mpi_loader.c built
#      against MPICH (mpicc.mpich) and run under its launcher
#      (mpiexec.mpich) through CTest, which must load MPICH's libmpich.so.12
#      and not Open MPI's libmpi.so.40.
# Parts 1 to 4 use Open MPI, the default MPI (mpirun, mpicc: Debian's
# alternatives), which python3-mpi4py is built against.
# Every mpirun runs under `timeout` (CTest's tests under their TIMEOUT): a
# collective that hangs fails the stage.
set -euo pipefail
JOBS=${JOBS:-2}
build=build/mpi-ci
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# A container has no high-speed network: keep Open MPI to shared memory and
# loopback TCP, and quiet about it.
export OMPI_MCA_btl=self,vader,tcp OMPI_MCA_btl_base_warn_component_unused=0
mpirun=(timeout 300 mpirun --oversubscribe)
fail() { echo "47-mpi: $*" >&2; exit 1; }
command -v mpirun >/dev/null || fail "no mpirun: ci/deps.sh installs openmpi-bin"
# Installing MPICH must not have made it the default (its alternatives rank
# below Open MPI's, unless someone chose them by hand).
mpirun --version 2>&1 | grep -q 'Open MPI' ||
  fail "mpirun is not Open MPI's (update-alternatives --display mpirun): parts 1-4 and mpi4py need it"

# 1. C tests and the C example
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" -DCLPIN_MPI=ON \
  -DCLPIN_MPI_TESTS=ON -DCLPIN_BUILD_LAYER=OFF -DCLPIN_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j "$JOBS" --target clpin clpin_static clpin_mpi test_mpi mpi_loader mpi-bench
status=0
ctest --test-dir "$build" -L '^mpi$' --output-on-failure --timeout 300 || status=$?
bash ci/ctest-summary.sh 47-mpi "$build/Testing/Temporary/LastTest.log"
grep -h 'test_mpi on' "$build/Testing/Temporary/LastTest.log" || fail "test_mpi printed no summary"
((status == 0)) || fail "the MPI CTest tests failed"

# The installed package: clpin::mpi through find_package(clpin), and
# pkg-config clpin-mpi, each built and run under mpirun.
prefix=$PWD/$build/prefix
rm -rf "$prefix" "$build/consumer-mpi"
cmake --install "$build" --prefix "$prefix" >/dev/null
version=$(sed -nE 's/^project\(clpin VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
major=${version%%.*} minor=${version#*.}
minor=${minor%%.*}
if [ "$major" = 0 ]; then sover=0.$minor; else sover=$major; fi # CMakeLists.txt's SONAME policy
for f in "lib/libclpin-mpi.so.$sover" include/clpin_mpi.h lib/pkgconfig/clpin-mpi.pc lib/cmake/clpin/clpinMpiTargets.cmake; do
  [ -e "$prefix/$f" ] || fail "the install lacks $f"
done
# libclpin-mpi exports exactly the functions clpin_mpi.h declares.
diff <(bash ci/public-functions.sh include/clpin_mpi.h) \
  <(nm -D --defined-only "$prefix/lib/libclpin-mpi.so.$sover" | awk '{print $NF}' | sort -u) ||
  fail "libclpin-mpi.so's dynamic symbols differ from clpin_mpi.h's functions (- declared, + exported)"
cmake -S tests/package/mpi -B "$build/consumer-mpi" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$build/consumer-mpi" >/dev/null
mkdir -p "$build/consumer-mpi-pc"
# shellcheck disable=SC2046
cc -std=c11 -Werror -Wall tests/package/mpi/consumer_mpi.c -o "$build/consumer-mpi-pc/consumer_mpi" \
  $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs clpin-mpi)
for exe in "$build/consumer-mpi/consumer_mpi" "$build/consumer-mpi-pc/consumer_mpi"; do
  LD_LIBRARY_PATH=$prefix/lib "${mpirun[@]}" -np 2 -x LD_LIBRARY_PATH "$exe" | grep -q 'libclpin-mpi ok' ||
    fail "$exe (installed package) failed"
done
echo "47-mpi: installed package: clpin::mpi (find_package) and pkg-config clpin-mpi consumers built and ran"

# 2. Python, under mpirun on every rank
py=${PYTHON:-/usr/bin/python3}
export CLPIN_LIBRARY=$PWD/$build/libclpin.so PYTHONPATH=$PWD/python PYTHONDONTWRITEBYTECODE=1
export CLPIN_REQUIRE_MPI=1
for np in 2 3; do
  out=$("${mpirun[@]}" -np $np -x CLPIN_LIBRARY -x PYTHONPATH -x CLPIN_REQUIRE_MPI -x PYTHONDONTWRITEBYTECODE \
    "$py" -m pytest -p no:cacheprovider -q -rs --color=no python/tests/test_mpi.py 2>&1) || { echo "$out"; fail "pytest on $np ranks"; }
  echo "$out" | grep -E "[0-9]+ passed" | sort -u | sed "s/^/47-mpi: python on $np ranks (each rank): /"
  ! echo "$out" | grep -qE '[0-9]+ (skipped|failed)' || { echo "$out"; fail "python on $np ranks skipped or failed tests"; }
  for nb in 12 13; do
    out=$("${mpirun[@]}" -np $np -x CLPIN_LIBRARY -x PYTHONPATH "$py" examples/python/mpi_loader.py \
      --samples $nb --batch-size 2 --kib 128 --epochs 2 2>&1) || { echo "$out"; fail "mpi_loader.py on $np ranks, $nb samples"; }
    echo "$out" | grep -q 'all checks OK' || { echo "$out"; fail "mpi_loader.py on $np ranks, $nb samples"; }
  done
done
echo "47-mpi: examples/python/mpi_loader.py on 2 and 3 ranks, 12 and 13 samples (shards padded): all checks OK"

# 3. the GPU bench script, on POCL at toy sizes (its own check mode)
MPI_BENCH_BUILD=$build NP=2 timeout 300 bash bench/gpu-mpi.sh --selftest >"$build/gpu-mpi-selftest.log" 2>&1 ||
  { cat "$build/gpu-mpi-selftest.log"; fail "bench/gpu-mpi.sh --selftest"; }
tail -n 3 "$build/gpu-mpi-selftest.log"

# 4. ASan + UBSan build of the C tests
asan=build/mpi-asan
cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=Debug -DCLPIN_SANITIZE=address,undefined -DCLPIN_MPI=ON \
  -DCLPIN_MPI_TESTS=ON -DCLPIN_BUILD_LAYER=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS="-Werror" >/dev/null
cmake --build "$asan" -j "$JOBS" --target test_mpi
export ASAN_OPTIONS="detect_leaks=0:${ASAN_OPTIONS:-}" UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
for np in 2 3; do
  "${mpirun[@]}" -np $np -x ASAN_OPTIONS -x UBSAN_OPTIONS "$asan/tests/test_mpi" ||
    fail "test_mpi under ASan on $np ranks"
done
# Messages to oneself on a single rank (CTest's mpi_self_np1, under ASan).
"${mpirun[@]}" -np 1 -x ASAN_OPTIONS -x UBSAN_OPTIONS "$asan/tests/test_mpi" --self ||
  fail "test_mpi --self under ASan on 1 rank"

# 5. MPICH: the C tests and the C example built against it, run by its
# launcher. FindMPI takes mpiexec from PATH (Open MPI's), whatever compiler
# it was given: MPIEXEC_EXECUTABLE names MPICH's.
command -v mpiexec.mpich >/dev/null || fail "no mpiexec.mpich: ci/deps.sh installs mpich"
mpich=build/mpi-mpich
# One host: hydra forks the ranks itself and never tries ssh.
export HYDRA_LAUNCHER=fork
cmake -S . -B "$mpich" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="-Werror" -DCLPIN_MPI=ON \
  -DCLPIN_MPI_TESTS=ON -DCLPIN_BUILD_LAYER=OFF -DCLPIN_BUILD_BENCH=OFF \
  -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich >/dev/null
cmake --build "$mpich" -j "$JOBS" --target clpin_mpi test_mpi mpi_loader
for exe in "$mpich/libclpin-mpi.so" "$mpich/tests/test_mpi" "$mpich/examples/mpi_loader"; do
  libs=$(ldd "$exe")
  grep -q 'libmpich\.so\.12 ' <<<"$libs" || fail "$exe does not load MPICH's libmpich.so.12"
  ! grep -q 'libmpi\.so\.40 ' <<<"$libs" || fail "$exe loads Open MPI's libmpi.so.40"
done
status=0
ctest --test-dir "$mpich" -L '^mpi$' --output-on-failure --timeout 300 || status=$?
bash ci/ctest-summary.sh 47-mpi-mpich "$mpich/Testing/Temporary/LastTest.log"
grep -h 'test_mpi on' "$mpich/Testing/Temporary/LastTest.log" | sed 's/^/47-mpi: MPICH: /' ||
  fail "test_mpi under MPICH printed no summary"
((status == 0)) || fail "the MPI CTest tests failed under MPICH"
echo "47-mpi: passed (C tests and the loader example on 2 and 3 ranks, Python tests, bench self-test, ASan;"\
  "the C tests and the loader example under MPICH too)"
