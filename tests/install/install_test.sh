#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Installs the build into a scratch prefix and uses it as a user would (issue 13, docs/install.md):
#  1. `cmake --install`: the binary, headers, libraries, CMake package, pkg-config file, man pages, systemd
#     unit and Python package are where they belong;
#  2. a project outside the tree (tests/install/consumer) finds the package with find_package(joule),
#     builds against joule::measure and joule::joule, and measures a window on a simulated GPU;
#  3. the same program builds with `pkg-config --cflags --libs joule`;
#  4. `cpack -G DEB` builds the Debian package: unpacked with dpkg-deb -x, its joule runs; its Depends
#     (dpkg-deb -I) names the Debian package of every shared library the binary links;
#  5. the package's control fields (a Maintainer in 'Name <address>' form, no made-up Homepage) and contents
#     (dpkg-deb -c): the docs, examples and example data under /usr/share/doc/joule, where the docs'
#     commands run as from the source folder; a machine-readable (DEP-5) copyright file; changelog.gz.
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
            lib/systemd/system/joule-daemon.service share/doc/joule/README.md share/doc/joule/docs/daemon.md \
            share/doc/joule/copyright share/doc/joule/changelog.gz share/doc/joule/examples/train_chase.py \
            share/doc/joule/data/perseus/example_s4_m8_profile.csv; do
  [ -e "$p/$path" ] || fail "$path is not installed"
done
# No private header of src/ is reachable from an installed header.
if grep -rhoE '#include "[a-z_]+/[a-z_]+\.hpp"' "$p/include/joule" | grep -v '"joule/' ; then
  fail "an installed header includes a private header"
fi
# The measurement library's headers show no third-party types beyond fmt and tl::expected (JSON is for
# the headers whose subject is JSON: core/json.hpp, core/json_fields.hpp, the daemon's wire protocol, and the
# JSON forms of results: json_forms.hpp, the devices' inventory and hardware-check report, the counters'
# snapshot; the monitor, the sampler and the devices' interfaces never need nlohmann-json).
for header in "$p"/include/joule/core/*.hpp "$p"/include/joule/device/*.hpp "$p"/include/joule/measure/*.hpp; do
  case "$header" in */core/json.hpp|*/core/json_fields.hpp|*/device/daemon_protocol.hpp|*/device/daemon_client.hpp) continue ;; esac
  case "$header" in */json_forms.hpp|*/device/inventory.hpp|*/device/hw_check_report.hpp|*/measure/counter_snapshot.hpp) continue ;; esac
  if grep -nE '#include <(nlohmann|prometheus|httplib|boost|sqlite3|libpq)' "$header"; then
    fail "$header exposes a third-party library"
  fi
done
grep -q "^ExecStart=.*/bin/joule " "$p/lib/systemd/system/joule-daemon.service" || fail "the unit has no ExecStart"
grep -q "^Documentation=.* file://$p/share/doc/joule/docs/daemon.md$" "$p/lib/systemd/system/joule-daemon.service" \
  || fail "the unit's Documentation= does not name the installed docs/daemon.md"
"$p/bin/joule" --version | grep -q "^joule " || fail "installed joule --version"
JOULE_SIM=v100 "$p/bin/joule" devices >/dev/null || fail "installed joule devices"
# HTTP goes through joule's transport module (lib/joule/libjoule_http_transport.so), loaded on the first
# request: a refused connection (not "could not be loaded") says the installed joule found it.
sends_http() {
  local out
  out=$(JOULE_UK_CARBON_URL=http://127.0.0.1:9 "$1" carbon intensity --zone GB --carbon-provider uk 2>&1) || true
  [[ "$out" == *"connection refused"* ]] || fail "$1 cannot send HTTP: $out"
}
sends_http "$p/bin/joule"
[ -e "$p/lib/joule/libjoule_http_transport.so" ] || fail "lib/joule/libjoule_http_transport.so is not installed"
for python_bin in "$p"/lib/python3*/site-packages/joule/_bin/joule; do
  if [ -x "$python_bin" ]; then sends_http "$python_bin"; fi
done
for site in "$p"/lib/python3*/site-packages; do
  [ -e "$site/joule/__init__.py" ] || continue
  out=$(PYTHONPATH="$site" JOULE_UK_CARBON_URL=http://127.0.0.1:9 /usr/bin/python3 -c '
import joule
try:
    joule.carbon_signal(zone="GB", provider="uk").latest()
except Exception as error:
    print(error)' 2>&1) || true
  [[ "$out" == *"connection refused"* ]] || fail "the installed Python package cannot send HTTP: $out"
done

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
# libpq is dlopened (postgresql:// stores only): suggested, as no library the binary links names it.
grep -q "^ Suggests: .*libpq5" "$scratch/info.txt" || fail "the package does not suggest libpq5 (postgresql:// stores)"
dpkg-deb -x "$deb" "$scratch/root"
root="$scratch/root"
[ -x "$root/usr/bin/joule" ] || fail "the package has no /usr/bin/joule"
"$root/usr/bin/joule" --version | grep -q "^joule " || fail "unpacked joule --version"
"$root/usr/bin/joule" --sim v100 devices | grep -qi "v100" || fail "unpacked joule --sim v100 devices"
sends_http "$root/usr/bin/joule"
grep -q "^ExecStart=/usr/bin/joule " "$root"/usr/lib/systemd/system/joule-daemon.service || fail "the packaged unit does not run /usr/bin/joule"
ls "$root"/usr/lib/python3/dist-packages/joule/__init__.py >/dev/null 2>&1 || [ ! -d "$build/python" ] \
  || fail "the package's Python module is not in /usr/lib/python3/dist-packages"
# Every shared library the binary or its HTTP module needs belongs to a Debian package named in Depends.
for library in $(readelf -d "$root/usr/bin/joule" "$root"/usr/lib/joule/libjoule_http_transport.so \
                 | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u); do
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

step "the package's fields and contents"
maintainer=$(sed -n 's/^ Maintainer: //p' "$scratch/info.txt")
configured=$(sed -n 's/^JOULE_PACKAGE_MAINTAINER:STRING=//p' "$build/CMakeCache.txt")
[ "$maintainer" = "$configured" ] || fail "Maintainer '$maintainer' is not JOULE_PACKAGE_MAINTAINER '$configured'"
[[ "$maintainer" =~ ^[^\<\>]+\ \<[^\<\>\ ]+@[^\<\>\ ]+\>$ ]] || fail "Maintainer '$maintainer' is not 'Name <address>'"
homepage=$(sed -n 's/^JOULE_PACKAGE_HOMEPAGE:STRING=//p' "$build/CMakeCache.txt")
if [ -z "$homepage" ]; then
  ! grep -q "^ Homepage:" "$scratch/info.txt" || fail "a Homepage field without JOULE_PACKAGE_HOMEPAGE"
else
  grep -qx " Homepage: $homepage" "$scratch/info.txt" || fail "the Homepage field is not JOULE_PACKAGE_HOMEPAGE"
fi
! grep -qi "example\.invalid\|@localhost>" "$scratch/info.txt" || fail "a made-up address in the control fields"
dpkg-deb -c "$deb" | awk '{print $NF}' | sed 's|^\./|/|' >"$scratch/contents.txt"
doc=/usr/share/doc/joule
for path in $doc/copyright $doc/changelog.gz $doc/README.md $doc/examples/train_power_limit.py \
            $doc/data/carbon/README.md $doc/data/zeus-traces/README.md; do
  grep -qx "$path" "$scratch/contents.txt" || fail "the package has no $path"
done
# Every doc and every example of the source, and every data file the docs' commands read.
for file in "$source"/docs/*.md "$source"/examples/*.py; do
  grep -qx "$doc/${file#"$source"/}" "$scratch/contents.txt" || fail "the package has no $doc/${file#"$source"/}"
done
for data in $(cat "$source"/README.md "$source"/docs/*.md | grep -o 'data/[A-Za-z0-9_./-]*\.\(csv\|json\)' | sort -u); do
  [ -e "$source/$data" ] || continue  # an example name in prose, not a shipped file
  grep -qx "$doc/$data" "$scratch/contents.txt" || fail "the docs read $data, which the package lacks"
done
copyright="$root$doc/copyright"
head -1 "$copyright" | grep -qx "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/" \
  || fail "the copyright file is not machine-readable (DEP-5)"
grep -qx "License: Apache-2.0" "$copyright" || fail "the copyright file does not give joule's licence"
for origin in "data/zeus-traces/summary_train.csv" "data/numpy/numpy_ziggurat_tables.json" \
              "data/carbon/country_intensity.csv"; do
  grep -q "$origin" "$copyright" || fail "the copyright file does not attribute $origin"
done
# Every License named in a Files paragraph has its own paragraph (its text, or where Debian keeps it).
for license in $(sed -n 's/^License: //p' "$copyright" | tr ' ' '\n' | grep -v '^and$' | sort -u); do
  awk -v want="License: $license" 'found && /^ / {ok = 1} {found = ($0 == want)} END {exit !ok}' "$copyright" \
    || fail "the copyright file names $license without a paragraph giving its text"
done
zcat "$root$doc/changelog.gz" | head -1 | grep -q "^joule ($(sed -n 's/^ Version: //p' "$scratch/info.txt")) " \
  || fail "changelog.gz does not start with this version"
# The docs' commands run from the installed docs as from the source folder.
(cd "$root$doc" && "$root/usr/bin/joule" plan --profile data/perseus/example_s4_m8_profile.csv --stages 4 \
  --microbatches 8 --format csv >/dev/null) || fail "joule plan on the packaged example profile"
echo "PASS"
