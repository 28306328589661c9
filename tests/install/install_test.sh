#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a scratch prefix and uses it as a user would (issue 13, docs/install.md):
#  1. `cmake --install`: the binary, headers, libraries, CMake package, pkg-config file, man pages, systemd
#     unit and Python package are where they belong;
#  2. a project outside the tree (tests/install/consumer) finds the package with find_package(joule),
#     builds against joule::measure and joule::joule, and measures a window on a simulated GPU;
#  3. the same program builds with `pkg-config --cflags --libs joule`;
#  4. `cpack -G DEB` builds the Debian package: unpacked with dpkg-deb -x, its joule runs; its Depends
#     (dpkg-deb -I) names the Debian package of every shared library the binary links.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
source=$(cd "$2" && pwd)
scratch=$(mktemp -d "${TMPDIR:-/tmp}/joule-install-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

step "cmake --install into $scratch/prefix"
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch/install.log" || { cat "$scratch/install.log"; fail "cmake --install"; }
p="$scratch/prefix"
for path in bin/joule include/joule/core/error.hpp include/joule/measure/energy_monitor.hpp \
            include/joule/metrics/registry.hpp lib/libjoule_core.a lib/libjoule_measure.a \
            lib/cmake/joule/jouleConfig.cmake lib/cmake/joule/joule-targets.cmake lib/pkgconfig/joule.pc \
            share/man/man1/joule.1 share/man/man1/joule-measure.1 share/man/man1/joule-daemon.1 \
            lib/systemd/system/joule-daemon.service share/doc/joule/architecture.md; do
  [ -e "$p/$path" ] || fail "$path is not installed"
done
# No private header of src/ is reachable from an installed header.
if grep -rhoE '#include "[a-z_]+/[a-z_]+\.hpp"' "$p/include/joule" | grep -v '"joule/' ; then
  fail "an installed header includes a private header"
fi
# The measurement library's headers show no third-party types beyond fmt and tl::expected (JSON is for
# the headers whose subject is JSON: core/json.hpp, core/json_fields.hpp and the daemon's wire protocol).
for header in "$p"/include/joule/core/*.hpp "$p"/include/joule/device/*.hpp "$p"/include/joule/measure/*.hpp; do
  case "$header" in */core/json.hpp|*/core/json_fields.hpp|*/device/daemon_protocol.hpp|*/device/daemon_client.hpp) continue ;; esac
  if grep -nE '#include <(nlohmann|prometheus|httplib|boost|sqlite3|libpq)' "$header"; then
    fail "$header exposes a third-party library"
  fi
done
grep -q "^ExecStart=.*/bin/joule " "$p/lib/systemd/system/joule-daemon.service" || fail "the unit has no ExecStart"
"$p/bin/joule" --version | grep -q "^joule " || fail "installed joule --version"
JOULE_SIM=v100 "$p/bin/joule" devices >/dev/null || fail "installed joule devices"

step "find_package(joule) from a project outside the tree"
cmake -S "$source/tests/install/consumer" -B "$scratch/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$p" >"$scratch/consumer.log" 2>&1 || { cat "$scratch/consumer.log"; fail "configuring the consumer"; }
cmake --build "$scratch/consumer" -j2 >>"$scratch/consumer.log" 2>&1 || { cat "$scratch/consumer.log"; fail "building the consumer"; }
for program in measure_window everything; do
  out=$("$scratch/consumer/$program")
  echo "$program: $out"
  # 10 s at 220.25 W.
  [[ "$out" =~ ^10\.000\ s\ 2202\.5[0-9]*\ J$ ]] || fail "$program printed '$out'"
done

step "pkg-config --cflags --libs joule"
flags=$(PKG_CONFIG_PATH="$p/lib/pkgconfig" pkg-config --cflags --libs joule) || fail "pkg-config joule"
# shellcheck disable=SC2086
g++ -O1 "$source/tests/install/consumer/main.cpp" -o "$scratch/pc_consumer" $flags || fail "g++ with pkg-config's flags"
out=$("$scratch/pc_consumer")
[[ "$out" =~ ^10\.000\ s\ 2202\.5[0-9]*\ J$ ]] || fail "the pkg-config build printed '$out'"

step "cpack -G DEB"
(cd "$build" && cpack -G DEB -B "$scratch/deb" >"$scratch/cpack.log" 2>&1) || { cat "$scratch/cpack.log"; fail "cpack"; }
deb=$(ls "$scratch"/deb/joule_*.deb)
dpkg-deb -I "$deb" >"$scratch/info.txt"
cat "$scratch/info.txt"
depends=$(sed -n 's/^ Depends: //p' "$scratch/info.txt")
[ -n "$depends" ] || fail "the package has no Depends"
dpkg-deb -x "$deb" "$scratch/root"
root="$scratch/root"
[ -x "$root/usr/bin/joule" ] || fail "the package has no /usr/bin/joule"
"$root/usr/bin/joule" --version | grep -q "^joule " || fail "unpacked joule --version"
"$root/usr/bin/joule" --sim v100 devices | grep -qi "v100" || fail "unpacked joule --sim v100 devices"
grep -q "^ExecStart=/usr/bin/joule " "$root"/usr/lib/systemd/system/joule-daemon.service || fail "the packaged unit does not run /usr/bin/joule"
ls "$root"/usr/lib/python3/dist-packages/joule/__init__.py >/dev/null 2>&1 || [ ! -d "$build/python" ] \
  || fail "the package's Python module is not in /usr/lib/python3/dist-packages"
# Every shared library the binary needs belongs to a Debian package named in Depends.
for library in $(readelf -d "$root/usr/bin/joule" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
  # (awk without exit: leaving early would end ldconfig with SIGPIPE, a failure under pipefail.)
  path=$(ldconfig -p | awk -v lib="$library" '$1 == lib && !found {print $NF; found = 1}')
  [ -n "$path" ] || fail "$library (NEEDED by joule) is not known to ldconfig"
  # awk reads all of dpkg's output (head would close the pipe early: SIGPIPE under pipefail).
  package=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | awk -F: 'NR == 1 {print $1}') || true
  [ -n "$package" ] || package=$(dpkg -S "$path" 2>/dev/null | awk -F: 'NR == 1 {print $1}') || true
  [ -n "$package" ] || fail "no Debian package owns $path"
  # The package itself, or a name it provides (spdlog's shlibs name libspdlog1.10-fmt9, which libspdlog1.10
  # provides).
  named=""
  for name in "$package" $(dpkg-query -W -f='${Provides}' "$package" | sed 's/([^)]*)//g; s/,/ /g'); do
    if [[ ", $depends," == *", $name "* || ", $depends," == *", $name,"* ]]; then
      named=$name
    fi
  done
  [ -n "$named" ] || fail "Depends does not name $package (for $library) or what it provides: $depends"
  echo "$library: $package, named in Depends as $named"
done
echo "PASS"
