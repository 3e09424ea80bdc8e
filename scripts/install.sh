#!/usr/bin/env bash
# Installs LM Warden: the optimised binary, a configuration to start from
# (the example, only where none is: an operator's file is never replaced) and
# the systemd units (the service, and its optional listening socket). `make install` runs it after `make build`.
#
#   PREFIX    where the binary goes, under bin/ (default /usr/local)
#   DESTDIR   a root to install under, for packaging (default: none)
#   LMWARDEN_BINARY  the binary to install (default build/release/src/lmwarden)
#
# The configuration and the units go to /etc/lmwarden and /etc/systemd/system
# (under DESTDIR), where the service looks for them. Running it again updates
# the binary and the units and keeps the configuration.
set -euo pipefail

# Paths given relative are the caller's, read before moving to the repository.
absolute() { [[ -z $1 || $1 == /* ]] && printf '%s' "$1" || printf '%s/%s' "$PWD" "$1"; }
prefix=${PREFIX:-/usr/local}
prefix=${prefix%/}
dest=$(absolute "${DESTDIR:-}")
dest=${dest%/}
binary=$(absolute "${LMWARDEN_BINARY:-}")
cd "$(dirname "$0")/.."
binary=${binary:-$PWD/build/release/src/lmwarden}

if [[ -n $prefix && $prefix != /* ]]; then
  echo "install: PREFIX must be an absolute path, got '$prefix'" >&2
  exit 2
fi
if [[ ! -x $binary ]]; then
  echo "install: no binary at $binary: run make build first (or set LMWARDEN_BINARY)" >&2
  exit 1
fi

bindir=$prefix/bin
install -D -m 0755 "$binary" "$dest$bindir/lmwarden"
echo "installed $dest$bindir/lmwarden"

config=$dest/etc/lmwarden/lmwarden.yaml
if [[ -e $config ]]; then
  echo "kept $config (an existing configuration is never replaced)"
else
  install -D -m 0644 docs/lmwarden.example.yaml "$config"
  echo "installed $config (the example: edit its backends)"
fi

units=$dest/etc/systemd/system
mkdir -p "$units"
for unit in lmwarden.service lmwarden.socket; do
  sed "s|@BINDIR@|$bindir|g" "packaging/$unit" > "$units/$unit.tmp"
  chmod 0644 "$units/$unit.tmp"
  mv "$units/$unit.tmp" "$units/$unit"
  echo "installed $units/$unit"
done

if [[ -z $dest ]]; then
  cat <<NEXT

Next:
  $bindir/lmwarden serve --config /etc/lmwarden/lmwarden.yaml --check
  systemctl daemon-reload && systemctl enable --now lmwarden    # a first install
  systemctl daemon-reload && systemctl restart lmwarden         # an upgrade: drains the running one first
Optionally, systemd holding the listening socket, so that a restart refuses no
connection (its address, ListenStream=, is 127.0.0.1:8080: change it with
systemctl edit lmwarden.socket first):
  systemctl daemon-reload && systemctl enable --now lmwarden.socket && systemctl restart lmwarden
NEXT
fi
