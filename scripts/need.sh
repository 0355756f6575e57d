#!/usr/bin/env bash
# need.sh COMMAND PACKAGE: installs Debian's PACKAGE when COMMAND is missing, so that
# `make test` and `make run` work on a fresh machine. Uses sudo when not root.
set -euo pipefail
cmd=$1 pkg=$2
command -v "$cmd" >/dev/null 2>&1 && exit 0
echo "$cmd not found: installing Debian package $pkg" >&2
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "cannot install $pkg: not root and no sudo. Install it yourself: apt-get install $pkg" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
command -v "$cmd" >/dev/null 2>&1 || { echo "$pkg installed but $cmd is still missing" >&2; exit 1; }
