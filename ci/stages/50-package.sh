#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packaging: install to a temporary prefix, check what was installed (files,
# SONAME, exported symbols == the functions clpin.h declares, pkg-config
# flags), build the two consumer projects of tests/package/ against that tree
# (CMake package and pkg-config, each shared and static, each choosing its
# own OpenCL target version: 1.2 or 3.0, with -Werror), check what each
# program needs at run time (libclpin.so or not; libOpenCL.so always) and run
# them, then compile, link and run the README's usage example against it,
# and import and use the Python module the install put beside the library
# (and the pip route in a venv).
set -euo pipefail
JOBS=${JOBS:-2}
build=build/package
prefix=$PWD/$build/prefix
rm -rf "$prefix" "$build/consumer-cmake" "$build/consumer-cmake-wrong" "$build/consumer-pc" "$build/readme" "$build/cxx"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="-Werror" \
  -DCMAKE_INSTALL_PREFIX=/nonexistent/configure-time-prefix \
  -DCLPIN_BUILD_TESTS=OFF -DCLPIN_BUILD_EXAMPLES=OFF -DCLPIN_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" -j "$JOBS"
# --prefix differs from the configure-time prefix on purpose: the installed
# tree must not depend on it (clpin.pc is relative to its own location).
cmake --install "$build" --prefix "$prefix" >/dev/null

fail() { echo "50-package: $*" >&2; exit 1; }

# --- what was installed
version=$(sed -nE 's/^project\(clpin VERSION ([0-9.]+).*/\1/p' CMakeLists.txt)
major=${version%%.*}
minor0=${version#*.}
minor0=${minor0%%.*}
if [ "$major" = 0 ]; then sover=0.$minor0; else sover=$major; fi # CMakeLists.txt's SONAME policy
libdir=$prefix/lib
for f in include/clpin.h include/clpin_mpi_errors.h lib/libclpin.a "lib/libclpin.so.$version" "lib/libclpin.so.$sover" \
         lib/libclpin.so lib/cmake/clpin/clpinConfig.cmake lib/cmake/clpin/clpinConfigVersion.cmake \
         lib/cmake/clpin/clpinTargets.cmake lib/pkgconfig/clpin.pc lib/pkgconfig/clpin-lib.pc lib/libclpin-layer.so; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
soname=$(readelf -d "$libdir/libclpin.so" | sed -nE 's/.*SONAME.*\[(.*)\]/\1/p')
[ "$soname" = "libclpin.so.$sover" ] || fail "SONAME is '$soname', want libclpin.so.$sover"
for v in MAJOR MINOR PATCH; do
  h=$(sed -nE "s/^#define CLPIN_VERSION_$v ([0-9]+)([^0-9].*)?$/\1/p" include/clpin.h)
  echo "$h"
done | paste -sd. | grep -qx "$version" || fail "clpin.h's CLPIN_VERSION_* disagree with CMake's $version"
pysover=$(sed -nE 's/^SOVERSION = "([0-9.]+)"$/\1/p' python/clpin/_native.py)
[ "$pysover" = "$sover" ] || fail "python/clpin/_native.py's SOVERSION '$pysover' is not the SONAME's $sover"
pyversion=$(sed -nE 's/^version = "([0-9.]+)"$/\1/p' python/pyproject.toml)
[ "$pyversion" = "$version" ] || fail "python/pyproject.toml's version '$pyversion' is not CMake's $version"

# --- exported symbols: exactly the functions clpin.h declares
bash ci/public-functions.sh include/clpin.h >"$build/symbols.header"
nm -D --defined-only "$libdir/libclpin.so" | awk '{print $NF}' | sort -u >"$build/symbols.exported"
if ! diff -u "$build/symbols.header" "$build/symbols.exported" >"$build/symbols.diff"; then
  echo "50-package: libclpin.so's dynamic symbols differ from clpin.h's functions" >&2
  echo "  (- declared but not exported, + exported but not public):" >&2
  tail -n +3 "$build/symbols.diff" | grep -E '^[-+]' >&2
  exit 1
fi
echo "50-package: libclpin.so exports exactly the $(wc -l <"$build/symbols.header") functions of clpin.h"

# --- CLPIN_API: the export branch while the library is built, import elsewhere
api_on_windows() { cc -E -dM -D_WIN32 "$@" -Iinclude include/clpin.h 2>/dev/null | sed -n 's/^#define CLPIN_API //p'; }
[ "$(api_on_windows -DCLPIN_BUILDING)" = "__declspec(dllexport)" ] || fail "CLPIN_API does not export while building clpin"
[ "$(api_on_windows)" = "__declspec(dllimport)" ] || fail "CLPIN_API does not import for consumers"
[ -z "$(api_on_windows -DCLPIN_STATIC_DEFINE)" ] || fail "CLPIN_API is not empty for the static library"
grep -q -- '-DCLPIN_BUILDING' "$build/CMakeFiles/clpin_objects.dir/flags.make" ||
  fail "the library is not compiled with CLPIN_BUILDING"

needed() { readelf -d "$1" | sed -nE 's/.*NEEDED.*\[(.*)\]/\1/p'; }
check_linkage() { # program shared|static
  if [ "$2" = shared ]; then
    needed "$1" | grep -qx "libclpin.so.$sover" || fail "$1 does not need libclpin.so.$sover"
  else
    ! needed "$1" | grep -q libclpin || fail "$1 links libclpin dynamically"
    # Nor through anything it loads (ldd follows every NEEDED, recursively).
    ! ldd "$1" | grep -q libclpin || fail "$1 loads libclpin.so: $(ldd "$1" | grep libclpin)"
  fi
  # OpenCL stays dynamic either way: there is no libOpenCL.a.
  needed "$1" | grep -qx 'libOpenCL.so.1' || fail "$1 does not need libOpenCL.so.1"
}

# --- consumer 1: find_package(clpin)
cmake -S tests/package/cmake -B "$build/consumer-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCLPIN_REQUIRED_VERSION="${version%.*}" -DCMAKE_BUILD_TYPE=Release >/dev/null
# The version file must also refuse what is not compatible.
minor=${version#*.}; minor=${minor%%.*}
wrong=("$((major + 1)).0")
[ "$major" != 0 ] || wrong+=("0.$((minor + 1))") # before 1.0 a minor bump breaks
for w in "${wrong[@]}"; do
  rm -rf "$build/consumer-cmake-wrong"
  if cmake -S tests/package/cmake -B "$build/consumer-cmake-wrong" -DCMAKE_PREFIX_PATH="$prefix" \
       -DCLPIN_REQUIRED_VERSION="$w" >/dev/null 2>&1; then
    fail "find_package(clpin $w) accepted version $version"
  fi
done
cmake --build "$build/consumer-cmake" -j "$JOBS"
for kind in shared static; do
  check_linkage "$build/consumer-cmake/consumer_$kind" $kind
  "$build/consumer-cmake/consumer_$kind"
done

# --- consumer 2: pkg-config clpin
mkdir -p "$build/consumer-pc"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion clpin)" = "$version" ] || fail "clpin.pc version is not $version"
[ "$(pkg-config --modversion clpin-lib)" = "$version" ] || fail "clpin-lib.pc version is not $version"
# The OpenCL target version is the consumer's: no .pc file may set it.
# CLPIN_STATIC_DEFINE is for the static library only.
for static in "" --static; do
  cflags=$(pkg-config $static --cflags clpin)
  [[ $cflags != *CL_TARGET_OPENCL_VERSION* ]] || fail "clpin.pc forces CL_TARGET_OPENCL_VERSION on consumers"
  [[ -n $static || $cflags != *CLPIN_STATIC_DEFINE* ]] || fail "pkg-config --cflags clpin defines CLPIN_STATIC_DEFINE"
  [[ -z $static || $cflags == *-DCLPIN_STATIC_DEFINE* ]] || fail "pkg-config --static --cflags clpin lacks CLPIN_STATIC_DEFINE"
done
# --libs clpin: -lclpin (the shared library) and nothing of the static link.
libs=$(pkg-config --libs clpin)
[[ " $libs " == *" -lclpin "* && $libs != *-Wl,-B* ]] || fail "pkg-config --libs clpin is not the shared library: $libs"
# --static --libs clpin: -lclpin between -Wl,-Bstatic and -Wl,-Bdynamic, so
# the linker takes libclpin.a; every other -l (-lOpenCL) and the libraries the
# compiler adds after them stay dynamic. pkgconf drops repeated -l flags but
# the last, so this must also hold beside other packages: OpenCL asked for
# too, before or after, and a library of the consumer's that requires clpin.
check_static_libs() { # package...
  local flags mode=dynamic n=0 f
  flags=$(pkg-config --static --libs "$@")
  for f in $flags; do
    case $f in
      -Wl,-Bstatic) mode=static ;;
      -Wl,-Bdynamic) mode=dynamic ;;
      -lclpin) [ $mode = static ] || fail "-lclpin links libclpin.so in: $flags"; n=$((n + 1)) ;;
      -l*) [ $mode = dynamic ] || fail "$f is linked statically in: $flags" ;;
    esac
  done
  if [ $n = 0 ] || [ $mode != dynamic ]; then
    fail "pkg-config --static --libs $* does not link libclpin.a: $flags"
  fi
}
check_static_libs clpin
check_static_libs OpenCL clpin
check_static_libs clpin OpenCL
printf 'Name: user\nDescription: uses clpin\nVersion: 1\nRequires.private: clpin\nLibs: -luser\n' \
  >"$build/consumer-pc/user.pc"
PKG_CONFIG_PATH="$PKG_CONFIG_PATH:$PWD/$build/consumer-pc" check_static_libs user
PKG_CONFIG_PATH="$PKG_CONFIG_PATH:$PWD/$build/consumer-pc" check_static_libs clpin user OpenCL
make -s -C tests/package/pkgconfig OUT="$PWD/$build/consumer-pc"
check_linkage "$build/consumer-pc/consumer_shared" shared
LD_LIBRARY_PATH="$libdir" "$build/consumer-pc/consumer_shared"
# The static program must run with no way to find libclpin.so.
check_linkage "$build/consumer-pc/consumer_static" static
env -u LD_LIBRARY_PATH "$build/consumer-pc/consumer_static"
static_libs=$(pkg-config --static --libs clpin)
static_libs=${static_libs% }
echo "50-package: pkg-config --libs clpin needs libclpin.so.$sover;" \
  "pkg-config --static --libs clpin links libclpin.a (${static_libs//$prefix/<prefix>})"

# --- C++ programs can use the header (extern "C") and link the library
mkdir -p "$build/cxx"
cat >"$build/cxx/main.cpp" <<'CXX'
#include <clpin.h>
#include <cstring>
int main() {
  return clpin_version() == CLPIN_VERSION_NUMBER &&
                 std::strstr(clpin_strerror(CLPIN_ERR_OVERFLOW), "CLPIN_ERR_OVERFLOW")
             ? 0
             : 1;
}
CXX
# shellcheck disable=SC2046
c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags clpin) \
  -o "$build/cxx/main" "$build/cxx/main.cpp" $(pkg-config --libs clpin)
LD_LIBRARY_PATH="$libdir" "$build/cxx/main" || fail "the C++ program failed"
echo "50-package: a C++11 program compiles against clpin.h and links"

# --- the README's first C block compiles as written and runs
mkdir -p "$build/readme"
awk '/^```c$/ {on = 1; next} on && /^```$/ {exit} on' README.md >"$build/readme/readme.c"
[ -s "$build/readme/readme.c" ] || fail "README.md has no \`\`\`c block"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Wextra -Wpedantic -Werror $(pkg-config --cflags clpin) \
  -o "$build/readme/readme" "$build/readme/readme.c" $(pkg-config --libs clpin)
LD_LIBRARY_PATH="$libdir" "$build/readme/readme"
echo "50-package: README example compiled as written and ran"

# --- Python: the CMake install put the module beside the library, and the
# module loads that library with no CLPIN_LIBRARY, no LD_LIBRARY_PATH and no
# ldconfig; then the pip route of docs/PYTHON.md (a venv that sees Debian's
# numpy and pyopencl). Both import the module and move data with it.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
pydir=$(sed -n 's/^CLPIN_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
[ -n "$pydir" ] || fail "CMake chose no directory for the Python module (CLPIN_PYTHON_INSTALL_DIR)"
for f in __init__.py _native.py _installed.py; do
  [ -e "$prefix/$pydir/clpin/$f" ] || fail "not installed: $pydir/clpin/$f"
done
# The directory is one the interpreter searches for this prefix: the same
# path under /usr/local must be on sys.path (Debian: dist-packages).
if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sysconfig,sys; sys.exit("deb_system" not in sysconfig.get_scheme_names())'; then
  /usr/bin/python3 -c "import sys; sys.exit('/usr/local/$pydir' not in sys.path)" ||
    fail "/usr/local/$pydir is not on /usr/bin/python3's sys.path"
fi
use_clpin='
import sys, numpy as np, pyopencl as cl, clpin
want = sys.argv[1]
assert clpin.library_path == want or clpin.library_path.endswith(want), (clpin.library_path, want)
ctx = cl.Context(cl.get_platforms()[0].get_devices()[:1]); q = cl.CommandQueue(ctx)
a = np.arange(1 << 20, dtype=np.float32)
x = clpin.from_host(q, a)
b = clpin.to_host(x)
assert (a == b).all()
p = clpin.empty_pinned(q, (1024,), np.uint8); p[:] = 7
assert clpin.stats(q)["blocks_in_use"] >= 1
del p, x; clpin.release_context(ctx)
print("module", clpin.__file__, "library", clpin.library_path, "version", clpin.version())
'
(cd "$build" && env -u CLPIN_LIBRARY -u LD_LIBRARY_PATH PYTHONPATH="$prefix/$pydir" PYTHONDONTWRITEBYTECODE=1 \
  "$py" -c "$use_clpin" "$prefix/lib/libclpin.so.$sover") >"$build/python-cmake.log" 2>&1 ||
  { cat "$build/python-cmake.log" >&2; fail "the CMake-installed module failed"; }
grep -q "module $prefix/$pydir/clpin/__init__.py library $prefix/lib/" "$build/python-cmake.log" ||
  { cat "$build/python-cmake.log" >&2; fail "the module did not load the library installed with it"; }
echo "50-package: python: $(tail -1 "$build/python-cmake.log" | sed "s|$prefix|<prefix>|g")"
rm -rf "$build/venv"
"$py" -m venv --system-site-packages "$build/venv"
"$build/venv/bin/pip" install -q --no-build-isolation --no-index ./python >"$build/pip.log" 2>&1 ||
  { cat "$build/pip.log" >&2; fail "pip install --no-build-isolation ./python failed in a venv"; }
rm -rf python/build python/*.egg-info
(cd "$build" && env -u LD_LIBRARY_PATH CLPIN_LIBRARY="$prefix/lib/libclpin.so.$sover" PYTHONDONTWRITEBYTECODE=1 \
  venv/bin/python -c "$use_clpin" "$prefix/lib/libclpin.so.$sover") >"$build/python-pip.log" 2>&1 ||
  { cat "$build/python-pip.log" >&2; fail "the pip-installed module failed"; }
grep -q "module $PWD/$build/venv/lib/python3[.0-9]*/site-packages/clpin/__init__.py" "$build/python-pip.log" ||
  { cat "$build/python-pip.log" >&2; fail "the venv did not import its pip-installed module"; }
echo "50-package: python: pip in a venv with system site packages: $(tail -1 "$build/python-pip.log" | sed -e "s|$prefix|<prefix>|g" -e "s|$PWD/||g")"

echo "50-package: summary: $(wc -l <"$build/symbols.header") exported functions checked, 4 consumers" \
  "(CMake and pkg-config, shared and static, OpenCL 1.2 and 3.0 targets), a C++ program, the README example" \
  "and the Python module (CMake install and pip in a venv) built and ran"
