#!/usr/bin/env bash
# Packaging: install to a temporary prefix, check what was installed (files,
# SONAME, exported symbols == the functions clpin.h declares, pkg-config
# flags), build the two consumer projects of tests/package/ against that tree
# (CMake package and pkg-config, each shared and static, each choosing its
# own OpenCL target version: 1.2 or 3.0, with -Werror) and run them, then
# compile, link and run the README's usage example against it.
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
libdir=$prefix/lib
for f in include/clpin.h lib/libclpin.a "lib/libclpin.so.$version" "lib/libclpin.so.$major" \
         lib/libclpin.so lib/cmake/clpin/clpinConfig.cmake lib/cmake/clpin/clpinConfigVersion.cmake \
         lib/cmake/clpin/clpinTargets.cmake lib/pkgconfig/clpin.pc lib/pkgconfig/clpin-static.pc lib/libclpin-layer.so; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
soname=$(readelf -d "$libdir/libclpin.so" | sed -nE 's/.*SONAME.*\[(.*)\]/\1/p')
[ "$soname" = "libclpin.so.$major" ] || fail "SONAME is '$soname', want libclpin.so.$major"
for v in MAJOR MINOR PATCH; do
  h=$(sed -nE "s/^#define CLPIN_VERSION_$v ([0-9]+)([^0-9].*)?$/\1/p" include/clpin.h)
  echo "$h"
done | paste -sd. | grep -qx "$version" || fail "clpin.h's CLPIN_VERSION_* disagree with CMake's $version"

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
    needed "$1" | grep -qx "libclpin.so.$major" || fail "$1 does not need libclpin.so.$major"
  else
    ! needed "$1" | grep -q libclpin || fail "$1 links libclpin dynamically"
  fi
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
[ "$(pkg-config --modversion clpin-static)" = "$version" ] || fail "clpin-static.pc version is not $version"
# The OpenCL target version is the consumer's: no .pc file may set it.
for pc in clpin clpin-static; do
  ! pkg-config --static --cflags "$pc" | grep -q CL_TARGET_OPENCL_VERSION ||
    fail "$pc.pc forces CL_TARGET_OPENCL_VERSION on consumers"
done
# --static --libs clpin-static names the archive itself, never -lclpin.
static_libs=$(pkg-config --static --libs clpin-static)
[[ " $static_libs " == *"/libclpin.a "* && " $static_libs " != *" -lclpin "* ]] ||
  fail "pkg-config --static --libs clpin-static does not give libclpin.a: $static_libs"
make -s -C tests/package/pkgconfig OUT="$PWD/$build/consumer-pc"
for kind in shared static; do
  check_linkage "$build/consumer-pc/consumer_$kind" $kind
  LD_LIBRARY_PATH="$libdir" "$build/consumer-pc/consumer_$kind"
done

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
echo "50-package: summary: $(wc -l <"$build/symbols.header") exported functions checked, 4 consumers" \
  "(CMake and pkg-config, shared and static, OpenCL 1.2 and 3.0 targets), a C++ program and the README example built and ran"
