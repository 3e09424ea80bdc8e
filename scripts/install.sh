#!/usr/bin/env bash
# Installs LM Warden: the optimised binary, a configuration to start from
# (the example, only where none is: an operator's file is never replaced) and
# the systemd unit. `make install` runs it after `make build`.
#
#   PREFIX    where the binary goes, under bin/ (default /usr/local)
#   DESTDIR   a root to install under, for packaging (default: none)
#   LMWARDEN_BINARY  the binary to install (default build/release/src/lmwarden)
#
# The configuration and the unit go to /etc/lmwarden and /etc/systemd/system
# (under DESTDIR), where the unit looks for them. Running it again updates
# the binary and the unit and keeps the configuration.
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

unit=$dest/etc/systemd/system/lmwarden.service
mkdir -p "$(dirname "$unit")"
sed "s|@BINDIR@|$bindir|g" packaging/lmwarden.service > "$unit.tmp"
chmod 0644 "$unit.tmp"
mv "$unit.tmp" "$unit"
echo "installed $unit"

if [[ -z $dest ]]; then
  cat <<NEXT

Next:
  $bindir/lmwarden serve --config /etc/lmwarden/lmwarden.yaml --check
  systemctl daemon-reload && systemctl enable --now lmwarden    # a first install
  systemctl daemon-reload && systemctl restart lmwarden         # an upgrade: drains the running one first
NEXT
fi
