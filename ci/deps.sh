#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install whatever clpin's build and tests need that this Debian 12 machine
# lacks. Usage: ci/deps.sh [--demo] [extra-package...]
#   --demo  only what ci/demo.sh needs: the compiler, CMake, OpenCL's headers
#           and loader, POCL (a device on any machine) and python3 for the
#           report, not the whole CI toolchain (no clang, valgrind, MPI...).
# Two MPIs: Open MPI is the one CI uses (python3-mpi4py is built against it;
# its alternatives for mpicc/mpirun outrank MPICH's, 50 to 40, so installing
# MPICH leaves them alone); MPICH only for ci/stages/47-mpi.sh's build
# through mpicc.mpich and mpiexec.mpich. mesa-opencl-icd: rusticl, the third
# implementation (ci/stages/32-rusticl.sh).
set -euo pipefail
# ci/demo.sh's packages: the first of the full list too.
demo=(cmake make gcc pkg-config opencl-c-headers ocl-icd-opencl-dev pocl-opencl-icd python3)
if [ "${1:-}" = --demo ]; then
  shift
  pkgs=("${demo[@]}" "$@")
else
  pkgs=("${demo[@]}" check
      oclgrind clang clang-format libclang-rt-14-dev valgrind doxygen libclblast-dev g++
      python3-numpy python3-pyopencl python3-pytest python3-cffi python3-setuptools python3-venv clpeak clblast-tests dpkg-dev file
      openmpi-bin libopenmpi-dev python3-mpi4py python3-pil mpich libmpich-dev mesa-opencl-icd "$@")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "ci/deps.sh: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
