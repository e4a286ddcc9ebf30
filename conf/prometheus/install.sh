#!/usr/bin/env bash
# Makes Debian's `prometheus` and `prometheus-pushgateway` binaries available for the tests that
# start them on loopback (tests/prometheus_servers.py), and prints the one folder that holds both
# (the only line on stdout; progress and errors go to stderr).
#
#   bash conf/prometheus/install.sh            # -> /usr/bin (as root) or <repo>/.tools/prometheus/usr/bin
#
# Idempotent: when both binaries already run, it prints their folder and exits at once.
#
# As root (CI, developers' machines) it installs the packages with apt-get:
#   - no service is started: the packages' postinst calls `invoke-rc.d <pkg> start`, which on a
#     machine with /sbin/init but no running init would start a daemon on :9090/:9091 (and fail
#     the install if that start fails). A policy-rc.d that answers 101 ("do not run") is put in
#     place for the install when there is none that denies, and the previous state is restored.
#   - `apt-get update` only when the install fails without it (stale or missing package lists).
# Not as root (or PROM_INSTALL_MODE=local) it downloads the two .debs with `apt-get download` and
# unpacks them with `dpkg-deb -x` into PROM_TOOLS_DIR (default <repo>/.tools/prometheus); the
# binaries are static Go programs (libc only) and run from there.
#
# Environment: PROM_INSTALL_MODE=auto|apt|local (default auto), PROM_TOOLS_DIR (local mode's folder).
set -euo pipefail

PKGS=(prometheus prometheus-pushgateway)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODE=${PROM_INSTALL_MODE:-auto}
LOCAL=${PROM_TOOLS_DIR:-$REPO/.tools/prometheus}
POLICY=/usr/sbin/policy-rc.d
SAVED_POLICY=$POLICY.prometheus-install-saved

log() { echo "conf/prometheus/install.sh: $*" >&2; }
die() {
	echo "conf/prometheus/install.sh: ERROR: $*" >&2
	exit 1
}

# Both binaries in folder $1 run.
works() {
	[ -x "$1/prometheus" ] && [ -x "$1/prometheus-pushgateway" ] &&
		"$1/prometheus" --version >/dev/null 2>&1 &&
		"$1/prometheus-pushgateway" --version >/dev/null 2>&1
}

done_in() {
	log "prometheus: $("$1/prometheus" --version 2>&1 | head -n1)"
	log "pushgateway: $("$1/prometheus-pushgateway" --version 2>&1 | head -n1)"
	echo "$1"
	exit 0
}

case "$MODE" in
auto) if [ "$(id -u)" = 0 ]; then MODE=apt; else MODE=local; fi ;;
apt | local) ;;
*) die "PROM_INSTALL_MODE must be auto, apt or local (got '$MODE')" ;;
esac

# Fast no-op when already there.
if [ "$MODE" = apt ] && works /usr/bin; then
	echo /usr/bin
	exit 0
fi
if [ "$MODE" = local ] && works "$LOCAL/usr/bin"; then
	echo "$LOCAL/usr/bin"
	exit 0
fi

command -v apt-get >/dev/null || die "apt-get not found: this needs a Debian/Ubuntu machine (packages: ${PKGS[*]})"

# ---- root: apt-get install, with service starts denied ----------------------------------------
# shellcheck disable=SC2317 # run by the EXIT trap
restore_policy() {
	if [ -e "$SAVED_POLICY" ]; then
		mv -f "$SAVED_POLICY" "$POLICY"
	elif [ "${CREATED_POLICY:-}" = 1 ]; then
		rm -f "$POLICY"
	fi
}

deny_service_starts() {
	if [ -x "$POLICY" ]; then
		local rc=0
		"$POLICY" prometheus start >/dev/null 2>&1 || rc=$?
		[ "$rc" = 101 ] && return 0 # already denies (e.g. Docker's default)
		mv -f "$POLICY" "$SAVED_POLICY"
	elif [ -e "$POLICY" ]; then
		mv -f "$POLICY" "$SAVED_POLICY"
	else
		CREATED_POLICY=1
	fi
	trap restore_policy EXIT
	trap 'exit 130' INT TERM
	printf '#!/bin/sh\n# conf/prometheus/install.sh: no service starts during the install\nexit 101\n' >"$POLICY"
	chmod 755 "$POLICY"
}

apt_install() {
	apt-get install -y -q --no-install-recommends \
		-o DPkg::Lock::Timeout=300 \
		-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"${PKGS[@]}" >"$APT_LOG" 2>&1
}

if [ "$MODE" = apt ]; then
	[ "$(id -u)" = 0 ] || die "PROM_INSTALL_MODE=apt needs root (use PROM_INSTALL_MODE=local to unpack into $LOCAL)"
	export DEBIAN_FRONTEND=noninteractive
	APT_LOG=$(mktemp /tmp/prometheus-install.XXXXXX.log)
	deny_service_starts
	log "apt-get install ${PKGS[*]} (log: $APT_LOG)"
	if ! apt_install; then
		if grep -q 'dpkg was interrupted' "$APT_LOG"; then
			log "dpkg was interrupted earlier: dpkg --configure -a"
			dpkg --configure -a >>"$APT_LOG" 2>&1 || true
		fi
		log "install failed without fresh package lists; apt-get update, then again"
		apt-get update -q -o DPkg::Lock::Timeout=300 >>"$APT_LOG" 2>&1 ||
			{
				tail -n 30 "$APT_LOG" >&2
				die "apt-get update failed (log above, full log: $APT_LOG)"
			}
		apt_install || {
			tail -n 30 "$APT_LOG" >&2
			die "apt-get install ${PKGS[*]} failed (log above, full log: $APT_LOG)"
		}
	fi
	works /usr/bin || {
		tail -n 30 "$APT_LOG" >&2
		die "installed ${PKGS[*]}, but /usr/bin/prometheus or /usr/bin/prometheus-pushgateway does not run"
	}
	rm -f "$APT_LOG"
	done_in /usr/bin
fi

# ---- not root: apt-get download + dpkg-deb -x into $LOCAL -------------------------------------
command -v dpkg-deb >/dev/null || die "dpkg-deb not found (needed to unpack ${PKGS[*]})"
mkdir -p "$(dirname "$LOCAL")"
WORK=$(mktemp -d "$LOCAL.tmp.XXXXXX") # beside $LOCAL: the final mv is a rename
trap 'rm -rf "$WORK"' EXIT
log "apt-get download ${PKGS[*]} -> unpack into $LOCAL"
if ! (cd "$WORK" && apt-get download -q "${PKGS[@]}") >"$WORK/download.log" 2>&1; then
	if [ "$(id -u)" = 0 ]; then
		log "download failed without fresh package lists; apt-get update, then again"
		apt-get update -q -o DPkg::Lock::Timeout=300 >>"$WORK/download.log" 2>&1 || true
		(cd "$WORK" && apt-get download -q "${PKGS[@]}") >>"$WORK/download.log" 2>&1 || {
			tail -n 30 "$WORK/download.log" >&2
			die "apt-get download ${PKGS[*]} failed (log above)"
		}
	else
		tail -n 30 "$WORK/download.log" >&2
		die "apt-get download ${PKGS[*]} failed; the package lists may be stale or missing and only root can refresh them (sudo apt-get update), or run this script as root to install the packages"
	fi
fi
mkdir -p "$WORK/root"
for deb in "$WORK"/*.deb; do
	dpkg-deb -x "$deb" "$WORK/root" || die "dpkg-deb -x $deb failed"
done
works "$WORK/root/usr/bin" || die "unpacked ${PKGS[*]}, but the binaries in $WORK/root/usr/bin do not run"
rm -rf "$LOCAL.old"
[ -e "$LOCAL" ] && mv "$LOCAL" "$LOCAL.old"
mv "$WORK/root" "$LOCAL"
rm -rf "$LOCAL.old"
done_in "$LOCAL/usr/bin"
