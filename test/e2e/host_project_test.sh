#!/usr/bin/env bash
# A host project using kiln, both ways a user's project can (README, "Using
# kiln from another project"), without compiling kiln a second time:
#  1. installed: `meson install` of this build into WORK_DIR/stage, then
#     examples/host_project/main.cc (kiln/kiln.h, trains the seed model)
#     compiled and linked with `pkg-config --cflags --libs kiln` alone, and run;
#  2. as a meson subproject: examples/host_project configured with
#     subprojects/kiln -> this source tree (meson must accept kiln as a
#     subproject and give the host its dependency), and the host's own object
#     compiled against that dependency's flags (linking it would build all of
#     kiln again, at the host's options: step 1 already links the same code).
# usage: host_project_test.sh KILN_SOURCE_ROOT KILN_BUILD_DIR WORK_DIR
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
work=$3
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

# --- 1. installed, found by pkg-config ---
stage=$work/stage
meson install -C "$build" --no-rebuild --quiet --destdir "$stage" >/dev/null
prefix=$(meson introspect "$build" --buildoptions |
         python3 -c 'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"))')
pc=$(find "$stage$prefix" -name kiln.pc -print -quit)
[[ -n $pc ]] || { echo "host_project_test: meson install wrote no kiln.pc under $stage$prefix" >&2; exit 1; }
# The staged copy is kiln installed at $stage$prefix: its .pc file says so
# (as a package relocated to that prefix would).
sed -i "s#^prefix=.*#prefix=$stage$prefix#" "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
pkg=(pkg-config kiln)
cflags=$("${pkg[@]}" --cflags)
libs=$("${pkg[@]}" --libs)
echo "pkg-config --cflags --libs kiln: $cflags $libs"
# shellcheck disable=SC2086
${CXX:-c++} -O1 $cflags "$src/examples/host_project/main.cc" -o "$work/host_app_installed" $libs
libdir=$("${pkg[@]}" --variable=libdir)
LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$work/host_app_installed"

# --- 2. as a meson subproject ---
host=$work/host_project
mkdir -p "$host/subprojects"
cp "$src/examples/host_project/meson.build" "$src/examples/host_project/main.cc" "$host/"
ln -s "$src" "$host/subprojects/kiln"
cd "$host"
# --force-fallback-for: the subproject path even where kiln is installed.
meson setup --force-fallback-for=kiln -Dkiln:cuda=disabled -Dkiln:tests=false build >setup.log ||
  { cat setup.log >&2; exit 1; }
grep -q "Subproject kiln finished" setup.log ||
  { cat setup.log >&2; echo "host_project_test: kiln was not used as a subproject" >&2; exit 1; }
obj=$(ninja -C build -t targets all | grep -o '^host_app\.p/[^:]*main\.cc\.o' | head -n 1)
[[ -n $obj ]] || { echo "host_project_test: no object of main.cc in the host's build" >&2; exit 1; }
ninja -C build "$obj" >/dev/null
echo "host_project_test: the installed kiln builds and runs the host; as a subproject it configures and compiles the host"
