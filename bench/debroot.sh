# SPDX-License-Identifier: Apache-2.0
# Debian's Python 3.11 (pyopencl, numpy, cffi, PIL, mpi4py) and Open MPI 4.1
# on a machine that has neither (the GPU machine), from .deb files unpacked
# with dpkg-deb -x: nothing is installed, nothing outside the root is touched.
#
#   bash bench/debroot.sh download   # here, on Debian 12: the .debs into $DEBS
#   source bench/debroot.sh; debroot_setup   # there: unpack once, export:
#     PY311     Debian's python3.11 (a wrapper: PYTHONPATH on the root's dist-packages)
#     HOST_PY   the machine's own python3 (torch's), without the root's libraries
#     ORTERUN   Open MPI's launcher (its `mpirun` may be another program there)
#     MPICC     Open MPI's C compiler wrapper
#     DEBROOT   the unpacked root; OPAL_PREFIX, PATH and LD_LIBRARY_PATH on it
#
# DEBS: the folder of .deb files (default .debs; carry it to the machine).
# DEBROOT: where to unpack (default build/debroot).
DEBROOT_PKGS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib python3.11 libffi8
  libexpat1 libssl3 liblzma5 libbz2-1.0 libsqlite3-0 libncursesw6 libtinfo6 libreadline8 libuuid1
  libnsl2 libtirpc3 libcrypt1 python3-numpy libblas3 liblapack3 libgfortran5 libquadmath0
  python3-pyopencl python3-pytools python3-platformdirs python3-typing-extensions python3-mako
  python3-markupsafe python3-appdirs python3-decorator python3-cffi python3-cffi-backend
  python3-pycparser python3-ply python3-pil libjpeg62-turbo libtiff6 libwebp7 libwebpdemux2
  libwebpmux3 libopenjp2-7 liblcms2-2 libimagequant0 libraqm0 libfreetype6 libpng16-16 libxcb1
  libxau6 libxdmcp6 libbsd0 libmd0 libdeflate0 libjbig0 liblerc4 libzstd1 libfribidi0
  libharfbuzz0b libbrotli1 libglib2.0-0 libgraphite2-3 libpcre2-8-0 openmpi-bin libopenmpi3
  libopenmpi-dev openmpi-common libpmix2 libhwloc15 libevent-2.1-7 libevent-core-2.1-7
  libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 libibverbs1 librdmacm1
  libnl-3-200 libnl-route-3-200 libnuma1 libmunge2 libxnvctrl0 libltdl7 libpciaccess0
  python3-mpi4py libgomp1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libkeyutils1
  libcom-err2 libdb5.3 libgdbm6)

debroot_setup() {
  local debs=${DEBS:-.debs} root=${DEBROOT:-build/debroot}
  if [ ! -x "$root/usr/bin/python3.11" ]; then
    ls "$debs"/*.deb >/dev/null 2>&1 || { echo "debroot: no .deb files in $debs" >&2; return 1; }
    mkdir -p "$root"
    local d
    for d in "$debs"/*.deb; do dpkg-deb -x "$d" "$root" || return 1; done
  fi
  DEBROOT=$(cd "$root" && pwd)
  local lib=$DEBROOT/usr/lib/x86_64-linux-gnu host_py
  host_py=$(command -v python3 || true)
  mkdir -p "$DEBROOT/bin"
  # PYTHONPATH only for Debian's python: the machine's own (torch's) breaks
  # on Debian's typing_extensions. HOST_PY runs the machine's python3 with
  # neither the root's PYTHONPATH nor its libraries.
  printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' \
    "$DEBROOT/usr/lib/python3/dist-packages" "$DEBROOT/usr/bin/python3.11" >"$DEBROOT/bin/py311"
  printf '#!/bin/sh\nunset LD_LIBRARY_PATH OPAL_PREFIX\nexec %s "$@"\n' "${host_py:-python3}" \
    >"$DEBROOT/bin/hostpy"
  chmod +x "$DEBROOT/bin/py311" "$DEBROOT/bin/hostpy"
  export DEBROOT PY311=$DEBROOT/bin/py311 HOST_PY=$DEBROOT/bin/hostpy ORTERUN=$DEBROOT/usr/bin/orterun
  export MPICC=$DEBROOT/usr/bin/mpicc.openmpi OPAL_PREFIX=$DEBROOT/usr
  export LD_LIBRARY_PATH=$lib:$lib/openmpi/lib:$lib/blas:$lib/lapack${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PATH=$DEBROOT/usr/bin:$PATH
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # The machine's own PMIx plugins (another build) must not be loaded.
  export PMIX_MCA_pcompress_base_silence_warning=1 PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
}

if [ "${BASH_SOURCE[0]}" = "$0" ] && [ "${1:-}" = download ]; then
  set -euo pipefail
  mkdir -p "${DEBS:-.debs}" && cd "${DEBS:-.debs}"
  apt-get download "${DEBROOT_PKGS[@]}"
fi
