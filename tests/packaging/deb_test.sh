#!/usr/bin/env bash
# Verifies the Debian package of a release build dir (argument 1): `cpack -G DEB` builds it; its
# contents (dpkg-deb -c) hold the binary, the config as a conffile, the systemd unit, logrotate
# and the man page; its Depends come from the binary's libraries; unpacked into a scratch root
# (dpkg -x) the binary runs --version and checks the packaged config; the unit passes
# `systemd-analyze verify` (where the tool exists) with no warning, and keeps its hardening.
set -euo pipefail
BUILD=$(cd "$1" && pwd)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-deb.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

(cd "$BUILD" && cpack -G DEB -B "$T/out" >"$T/cpack.log" 2>&1) || { cat "$T/cpack.log"; fail "cpack -G DEB"; }
DEB=$(ls "$T"/out/tollgate_*.deb 2>/dev/null | head -1)
[ -f "$DEB" ] || fail "no .deb in $T/out"

dpkg-deb -c "$DEB" >"$T/listing"
awk '{print $NF}' "$T/listing" >"$T/contents"
for f in ./usr/bin/tollgate ./etc/tollgate/tollgate.toml ./lib/systemd/system/tollgate.service \
         ./etc/logrotate.d/tollgate ./usr/share/man/man1/tollgate.1 \
         ./usr/share/doc/tollgate/reference.txt; do
  grep -qx -- "$f" "$T/contents" || fail "$f missing from the package: $(cat "$T/contents")"
done
grep -Eq -- '^-rwxr-xr-x root/root .* \./usr/bin/tollgate$' "$T/listing" || fail "binary mode/owner"

dpkg-deb -e "$DEB" "$T/control"
grep -qx /etc/tollgate/tollgate.toml "$T/control/conffiles" || fail "tollgate.toml is not a conffile"
grep -q '^Depends:.*liburing' "$T/control/control" || fail "Depends lacks liburing: $(cat "$T/control/control")"
[ -x "$T/control/postinst" ] || fail "postinst"
grep -q 'adduser --system' "$T/control/postinst" || fail "postinst makes no system user"

ROOT="$T/root"
dpkg -x "$DEB" "$ROOT"
V=$("$ROOT/usr/bin/tollgate" --version) || fail "--version exited $?"
[[ "$V" == "tollgate "* ]] || fail "--version printed '$V'"
grep -q '^\.TH TOLLGATE 1' "$ROOT/usr/share/man/man1/tollgate.1" || fail "man page header"
grep -q 'config check --config FILE' "$ROOT/usr/share/man/man1/tollgate.1" || fail "man page text"

# The packaged config is valid as shipped (its log directory is the unit's LogsDirectory).
sed "s|/var/log/tollgate/|$T/|" "$ROOT/etc/tollgate/tollgate.toml" >"$T/tollgate.toml"
"$ROOT/usr/bin/tollgate" config check --config "$T/tollgate.toml" >/dev/null ||
  fail "the packaged config does not pass config check"

UNIT="$ROOT/lib/systemd/system/tollgate.service"
for want in '^Type=notify$' '^User=tollgate$' '^StateDirectory=tollgate$' '^ProtectSystem=strict$' \
            '^NoNewPrivileges=yes$' '^LimitNOFILE=[0-9]+$' '^ExecReload=/bin/kill -HUP \$MAINPID$' \
            '^ExecStartPre=/usr/bin/tollgate config check '; do
  grep -Eq -- "$want" "$UNIT" || fail "unit lacks $want"
done
if command -v systemd-analyze >/dev/null; then
  # verify checks that the commands exist: point them into the scratch root.
  mkdir -p "$T/units"
  KILL=/bin/kill
  [ -x "$KILL" ] || KILL=/bin/true
  sed -e "s|/usr/bin/tollgate|$ROOT/usr/bin/tollgate|g" -e "s|/bin/kill|$KILL|" "$UNIT" \
    >"$T/units/tollgate.service"
  OUT=$(systemd-analyze verify --man=no "$T/units/tollgate.service" 2>&1) ||
    fail "systemd-analyze verify: $OUT"
  [ -z "$OUT" ] || fail "systemd-analyze verify warned: $OUT"
else
  echo "systemd-analyze not installed: unit not verified"
fi
echo "ok: $(basename "$DEB")"
