#!/usr/bin/env bash
# vkattn as others get it: `cmake --install` into a temporary prefix and the .deb packages
# (cpack -G DEB) unpacked into a scratch root (dpkg-deb -x). From each, a program outside the
# tree (examples/consumer) is built with find_package(vkattn) and must match PyTorch's output;
# from the packages, `vkattn demo` must run and the dependencies must be declared.
#   install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 source=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
golden=$source/tests/golden/self_attention
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# Builds examples/consumer against PREFIX (CMake puts the library's directory in its RPATH) and
# checks it against PyTorch.
consume() {
  local prefix=$1 name=$2
  cmake -S "$source/examples/consumer" -B "$tmp/consumer-$name" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/log" 2>&1 &&
    cmake --build "$tmp/consumer-$name" >>"$tmp/log" 2>&1 || { cat "$tmp/log"; fail "$name: consumer does not build"; return; }
  "$tmp/consumer-$name/consumer" "$golden/weights.safetensors" "$golden/query.npy" "$golden/expected_output.npy" ||
    fail "$name: consumer does not match PyTorch"
}

# The public headers name only the standard library, nlohmann/json and each other.
public_headers_only() {
  local include=$1
  [[ -f $include/vkattn/vkattn.h && -f $include/vkattn/version.h ]] || fail "$include: vkattn.h, version.h missing"
  [[ ! -e $include/engine && -z $(find "$include" -name 'push_constants.h' -o -name 'context.h') ]] ||
    fail "$include: internal headers installed"
  local foreign
  foreign=$(grep -rh '^#include' "$include/vkattn" | grep -v -E '^#include ("vkattn/[a-z_/]+\.h"|<[a-z_]+>|<nlohmann/json\.hpp>)$' || true)
  [[ -z $foreign ]] || fail "public headers include what a consumer may lack: $foreign"
}

echo "== cmake --install into a temporary prefix"
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
public_headers_only "$tmp/prefix/include"
consume "$tmp/prefix" install
pc=$(find "$tmp/prefix" -name vkattn.pc)
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs vkattn)
libdir=$(dirname "$(find "$tmp/prefix" -name 'libvkattn.so')")
# shellcheck disable=SC2086  # the flags are words
g++ "$source/examples/consumer/main.cpp" $flags -Wl,-rpath,"$libdir" -o "$tmp/consumer-pc" &&
  "$tmp/consumer-pc" "$golden/weights.safetensors" "$golden/query.npy" "$golden/expected_output.npy" >/dev/null ||
  fail "pkg-config: the consumer does not build or does not match ($flags)"

echo "== cpack -G DEB, unpacked into a scratch root"
(cd "$tmp" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$tmp/deb" >"$tmp/log" 2>&1) || { cat "$tmp/log"; fail "cpack"; }
for package in libvkattn0.1 vkattn libvkattn-dev; do
  deb=$(ls "$tmp/deb/${package}_"*.deb 2>/dev/null || true)
  if [[ -z $deb ]]; then fail "no $package package"; continue; fi
  echo "$(basename "$deb"): $(du -k "$deb" | cut -f1) KiB; Depends: $(dpkg-deb -f "$deb" Depends)"
  dpkg-deb -x "$deb" "$tmp/root"
done
# Outputs are read whole before they are matched: under pipefail, `cmd | grep -q` fails whenever
# grep's early exit cuts cmd off with SIGPIPE.
depends() { dpkg-deb -f "$tmp/deb/$1_"*.deb Depends 2>/dev/null || true; }
[[ $(depends libvkattn0.1) == *libvulkan1* ]] || fail "libvkattn0.1 does not depend on libvulkan1"
[[ $(depends libvkattn0.1) == *libspdlog* ]] || fail "libvkattn0.1 does not depend on spdlog"
[[ $(depends vkattn) == *"libvkattn0.1 (= "* ]] || fail "vkattn does not depend on its library"
[[ $(depends libvkattn-dev) == *nlohmann-json3-dev* ]] || fail "libvkattn-dev does not depend on nlohmann-json3-dev"
public_headers_only "$tmp/root/usr/include"
consume "$tmp/root/usr" deb
lib=$(dirname "$(find "$tmp/root/usr" -name 'libvkattn.so.*' | head -1)")
LD_LIBRARY_PATH=$lib "$tmp/root/usr/bin/vkattn" demo --seq 3 >"$tmp/demo" 2>&1 || { cat "$tmp/demo"; fail "vkattn demo from the package"; }
grep -q "out_proj" "$tmp/demo" || fail "vkattn demo printed no out_proj step"
# The packaged binary runs its own packaged library, not the build tree's.
[[ $(LD_LIBRARY_PATH=$lib ldd "$tmp/root/usr/bin/vkattn") == *"$lib/libvkattn"* ]] ||
  fail "vkattn does not load the packaged libvkattn"

((failed == 0)) && echo "install: all passed"
exit "$((failed > 0))"
