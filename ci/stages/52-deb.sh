#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Debian packages: build libclpin0.MINOR, libclpin-dev and python3-clpin with
# `cpack -G DEB` (cmake/package.cmake), install them on this machine with
# apt-get, check where their files landed, build the README's C example
# against them (pkg-config, and a CMake project with find_package(clpin))
# and run it, run docs/PYTHON.md's quick start against python3-clpin from a
# directory outside the tree (no CLPIN_LIBRARY, no PYTHONPATH), then purge the
# packages and check that nothing of them is left. The trap removes whatever
# this stage installed, also when a check fails.
set -euo pipefail
JOBS=${JOBS:-2}
build=build/deb

fail() { echo "52-deb: $*" >&2; exit 1; }
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

version=$(sed -nE 's/^project\(clpin VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
major=${version%%.*}
minor=${version#*.}
minor=${minor%%.*}
# The SONAME policy (CMakeLists.txt): 0.MINOR before 1.0, MAJOR after; the
# runtime package is named for the SONAME, as Debian's policy asks.
if [ "$major" = 0 ]; then sover=0.$minor; else sover=$major; fi
rt=libclpin$sover
pkgs=(python3-clpin libclpin-dev "$rt")
arch=$(dpkg --print-architecture)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=/usr/lib/$ma

for p in "${pkgs[@]}"; do
  ! installed "$p" || fail "$p is installed already; this stage installs and purges it" \
    "(remove it first: apt-get remove --purge ${pkgs[*]})"
done

# --- build the packages
rm -rf "$build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >"$build.cmake.log"
mv "$build.cmake.log" "$build/cmake.log"
cmake --build "$build" -j "$JOBS"
(cd "$build" && cpack -G DEB) >"$build/cpack.log" 2>&1 ||
  { cat "$build/cpack.log" >&2; fail "cpack -G DEB failed"; }
! grep -i -A4 'warning' "$build/cpack.log" >&2 || fail "cpack -G DEB warned"
declare -A deb=(
  [$rt]="$PWD/$build/${rt}_${version}-1_$arch.deb"
  [libclpin-dev]="$PWD/$build/libclpin-dev_${version}-1_$arch.deb"
  [python3-clpin]="$PWD/$build/python3-clpin_${version}-1_all.deb"
)
# libclpin-mpi0.N where the build found MPI (ci/deps.sh installs Open MPI).
mpipkg=libclpin-mpi$sover
if [ -f "$PWD/$build/${mpipkg}_${version}-1_$arch.deb" ]; then
  ! installed "$mpipkg" || fail "$mpipkg is installed already; this stage installs and purges it"
  deb[$mpipkg]="$PWD/$build/${mpipkg}_${version}-1_$arch.deb"
  pkgs+=("$mpipkg")
elif grep -q 'libclpin-mpi with MPI' "$build/cmake.log" 2>/dev/null; then
  fail "the build found MPI but cpack wrote no ${mpipkg}_${version}-1_$arch.deb"
fi
for p in "${pkgs[@]}"; do
  [ -f "${deb[$p]}" ] || fail "cpack wrote no ${deb[$p]##*/} (it wrote: $(cd "$build" && echo ./*.deb))"
done

# --- control fields
field() { dpkg-deb -f "${deb[$1]}" "$2"; }
depends_on() { # package dependency-regex
  field "$1" Depends | tr ',' '\n' | sed 's/^ *//' | grep -Eqx "$2" ||
    fail "$1 does not depend on /$2/: $(field "$1" Depends)"
}
for p in "${pkgs[@]}"; do
  [ "$(field "$p" Version)" = "$version-1" ] || fail "$p's version is $(field "$p" Version), want $version-1"
  [ -n "$(field "$p" Maintainer)" ] || fail "$p has no Maintainer"
  [ -n "$(field "$p" Description)" ] || fail "$p has no Description"
done
depends_on "$rt" 'libc6( \(>= [0-9.]+\))?'
depends_on "$rt" 'ocl-icd-libopencl1 \| libopencl-1\.2-1'
[ "$(field "$rt" Depends | grep -o 'ocl-icd-libopencl1' | wc -l)" = 1 ] ||
  fail "$rt names the OpenCL loader more than once: $(field "$rt" Depends)"
depends_on libclpin-dev "$rt \\(= $version-1\\)"
depends_on libclpin-dev 'ocl-icd-opencl-dev \| opencl-dev'
depends_on libclpin-dev 'opencl-c-headers \| opencl-headers'
depends_on python3-clpin "$rt \\(= $version-1\\)"
for d in python3 python3-numpy python3-pyopencl python3-cffi; do depends_on python3-clpin "$d"; done
[ "$(field python3-clpin Architecture)" = all ] || fail "python3-clpin is not Architecture: all"
grep -qx "libclpin $sover $rt (>= $version-1)" <<<"$(dpkg-deb -I "${deb[$rt]}" shlibs)" ||
  fail "$rt has no shlibs line for libclpin.so.$sover"
grep -qx 'activate-noawait ldconfig' <<<"$(dpkg-deb -I "${deb[$rt]}" triggers)" ||
  fail "$rt does not trigger ldconfig"

# --- what each package holds; none of it may exist before the install (the
# purge would take away files this stage did not bring)
want_files() {
  echo "/usr/share/doc/$1/copyright"
  case $1 in
    "$rt") echo "$libdir/libclpin.so.$version $libdir/libclpin.so.$sover $libdir/libclpin-layer.so" ;;
    libclpin-dev) echo "/usr/include/clpin.h /usr/include/clpin_mpi_errors.h $libdir/libclpin.a $libdir/libclpin.so" \
      "$libdir/cmake/clpin/clpinConfig.cmake $libdir/cmake/clpin/clpinConfigVersion.cmake" \
      "$libdir/cmake/clpin/clpinTargets.cmake $libdir/pkgconfig/clpin.pc $libdir/pkgconfig/clpin-lib.pc" ;;
    "$mpipkg") echo "$libdir/libclpin-mpi.so.$version $libdir/libclpin-mpi.so.$sover $libdir/libclpin-mpi.so" \
      "/usr/include/clpin_mpi.h $libdir/pkgconfig/clpin-mpi.pc" ;;
    python3-clpin) for f in __init__.py _native.py _installed.py; do
        echo "/usr/lib/python3/dist-packages/clpin/$f"
      done ;;
  esac
}
# Each check reads the whole output before grep looks at it: `a | grep -q`
# under pipefail fails at random when grep exits on its match while `a`
# still writes (tar writes the copyright file in 512-byte blocks: SIGPIPE).
for p in "${pkgs[@]}"; do
  copyright=$(dpkg-deb --fsys-tarfile "${deb[$p]}" | tar -xO "./usr/share/doc/$p/copyright")
  grep -qx 'License: Apache-2.0' <<<"$copyright" ||
    fail "$p's copyright file does not name the Apache-2.0 licence"
done
for p in "${pkgs[@]}"; do
  # Everything but directories, as dpkg-deb lists it ("./usr/x -> y" for links).
  dpkg-deb -c "${deb[$p]}" | awk '$1 !~ /^d/ {print substr($6, 2)}' >"$build/$p.files"
  for f in $(want_files "$p"); do
    grep -qx "$f" "$build/$p.files" || fail "${deb[$p]##*/} lacks $f"
  done
  while read -r f; do
    if [ -e "$f" ] || [ -L "$f" ]; then fail "$f exists before the install; this stage would remove it"; fi
  done <"$build/$p.files"
done

# --- install, and undo it whatever happens next
tmp=$(mktemp -d)
dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' | awk '$1 == "ii" {print $2}' | sort >"$tmp/before"
cleanup() {
  local rc=$? extra p st
  for p in "${pkgs[@]}"; do
    st=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
    case $st in
      "" | un* | pn*) ;; # not installed, or purged
      *)
        DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq --purge "${pkgs[@]}" >/dev/null 2>&1 ||
          $sudo dpkg --purge "${pkgs[@]}" >/dev/null 2>&1 || true
        break ;;
    esac
  done
  # Dependencies the install pulled in (none where ci/deps.sh ran) go too.
  extra=$(comm -13 "$tmp/before" <(dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' |
    awk '$1 == "ii" {print $2}' | sort) | tr '\n' ' ')
  if [ -n "${extra// /}" ]; then
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq --purge $extra >/dev/null 2>&1 || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
  $(for p in "${pkgs[@]}"; do echo "${deb[$p]}"; done) >"$build/apt-install.log" 2>&1 ||
  { cat "$build/apt-install.log" >&2; fail "apt-get install of ${pkgs[*]} failed"; }
for p in "${pkgs[@]}"; do
  installed "$p" || fail "$p is not installed after apt-get install"
  dpkg -L "$p" >"$build/$p.list"
  for f in $(want_files "$p"); do
    grep -qx "$f" "$build/$p.list" || fail "dpkg -L $p does not list $f"
    [ -e "$f" ] || fail "$f is not on disk after the install"
  done
done
# The ldconfig trigger put libclpin.so.0 in the loader's cache (which names
# /lib/<multiarch> where /lib is /usr/lib's link, as on merged-/usr systems).
ldconfig -p | grep -Eq "libclpin\.so\.$sover .*=> (/usr)?/lib/$ma/libclpin\.so\.$sover\$" ||
  fail "ldconfig's cache lacks $libdir/libclpin.so.$sover"
echo "52-deb: installed $(for p in "${pkgs[@]}"; do printf '%s ' "${deb[$p]##*/}"; done)"

# --- the README's C example against the installed packages: pkg-config
# from the system's path (no PKG_CONFIG_PATH), then a CMake project
mkdir -p "$tmp/pc" "$tmp/cmake"
awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' README.md >"$tmp/app.c"
[ -s "$tmp/app.c" ] || fail "README.md has no \`\`\`c block"
[ "$(env -u PKG_CONFIG_PATH pkg-config --modversion clpin)" = "$version" ] ||
  fail "pkg-config clpin is not version $version"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Wpedantic -Werror $(env -u PKG_CONFIG_PATH pkg-config --cflags clpin) \
  -o "$tmp/pc/app" "$tmp/app.c" $(env -u PKG_CONFIG_PATH pkg-config --libs clpin)
cat >"$tmp/cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.16)
project(clpin_deb_consumer LANGUAGES C)
find_package(clpin ${version%.*} REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE clpin::clpin)
CMAKE
cp "$tmp/app.c" "$tmp/cmake/"
cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
grep -qx "clpin_DIR:PATH=$libdir/cmake/clpin" "$tmp/cmake/build/CMakeCache.txt" ||
  fail "find_package(clpin) did not find the package's $libdir/cmake/clpin: $(grep '^clpin_DIR' "$tmp/cmake/build/CMakeCache.txt")"
cmake --build "$tmp/cmake/build" >/dev/null
for app in "$tmp/pc/app" "$tmp/cmake/build/app"; do
  ldd "$app" | grep -Eq "libclpin\.so\.$sover => (/usr)?/lib/$ma/libclpin\.so\.$sover " ||
    fail "$app does not load $libdir/libclpin.so.$sover: $(ldd "$app" | grep clpin)"
  (cd "$tmp" && env -u LD_LIBRARY_PATH "$app") || fail "$app failed"
done
echo "52-deb: the README example built with pkg-config and with find_package(clpin) and ran"

# --- libclpin-mpi's consumer against its package (pkg-config clpin-mpi),
# run under mpirun on 2 ranks
if [ -n "${deb[$mpipkg]:-}" ]; then
  # shellcheck disable=SC2046
  cc -std=c11 -Wall -Werror $(env -u PKG_CONFIG_PATH pkg-config --cflags clpin-mpi) \
    -o "$tmp/consumer_mpi" tests/package/mpi/consumer_mpi.c $(env -u PKG_CONFIG_PATH pkg-config --libs clpin-mpi)
  ldd "$tmp/consumer_mpi" | grep -Eq "libclpin-mpi\.so\.$sover => (/usr)?/lib/$ma/" ||
    fail "consumer_mpi does not load the package's libclpin-mpi.so.$sover"
  (cd "$tmp" && env -u LD_LIBRARY_PATH timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
    ./consumer_mpi) >"$build/mpi.log" 2>&1 || { cat "$build/mpi.log" >&2; fail "consumer_mpi failed under mpirun"; }
  grep -q "libclpin-mpi ok" "$build/mpi.log" || { cat "$build/mpi.log" >&2; fail "consumer_mpi: $(cat "$build/mpi.log")"; }
  echo "52-deb: mpi: $(grep consumer_mpi "$build/mpi.log")"
fi

# --- docs/PYTHON.md's quick start against python3-clpin, from outside the
# tree, with nothing pointing at the repository
awk '/^```python$/ {on = 1; next} on && /^```$/ {exit} on' docs/PYTHON.md >"$tmp/quickstart.py"
[ -s "$tmp/quickstart.py" ] || fail "docs/PYTHON.md has no \`\`\`python block"
cat >>"$tmp/quickstart.py" <<'PY'
print("module", clpin.__file__, "library", clpin.library_path, "version", clpin.version())
PY
(cd "$tmp" && env -u CLPIN_LIBRARY -u PYTHONPATH -u LD_LIBRARY_PATH /usr/bin/python3 quickstart.py) \
  >"$build/python.log" 2>&1 || { cat "$build/python.log" >&2; fail "docs/PYTHON.md's quick start failed"; }
grep -qx "module /usr/lib/python3/dist-packages/clpin/__init__.py library $libdir/libclpin.so.$sover version $version" \
  "$build/python.log" || { cat "$build/python.log" >&2; fail "python3 did not use the packages' module and library"; }
echo "52-deb: python: $(tail -1 "$build/python.log")"

# --- purge: no package, no file, no cache entry left
DEBIAN_FRONTEND=noninteractive $sudo apt-get remove -y -qq --purge "${pkgs[@]}" >"$build/apt-remove.log" 2>&1 ||
  { cat "$build/apt-remove.log" >&2; fail "apt-get remove --purge failed"; }
for p in "${pkgs[@]}"; do
  ! dpkg -s "$p" >/dev/null 2>&1 || fail "dpkg -s $p still knows it after the purge"
  while read -r f; do
    [ -d "$f" ] && [ ! -L "$f" ] && continue # shared directories (/usr/lib, ...) stay
    if [ -e "$f" ] || [ -L "$f" ]; then fail "$f is left after purging $p"; fi
  done <"$build/$p.list"
done
for d in /usr/lib/python3/dist-packages/clpin "$libdir/cmake/clpin"; do
  [ ! -e "$d" ] || fail "$d is left after the purge: $(find "$d" | head -5)"
done
! grep -q "libclpin.so.$sover " <<<"$(ldconfig -p)" || fail "ldconfig's cache still lists libclpin.so.$sover"
echo "52-deb: summary: ${#pkgs[@]} packages ($version-1: ${pkgs[*]}) built, installed, used" \
  "(C with pkg-config and CMake, Python${deb[$mpipkg]:+, MPI under mpirun}) and purged without a trace"
