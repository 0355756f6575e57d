#!/usr/bin/env bash
# need-php.sh CHECK PACKAGE: installs Debian's PACKAGE when the PHP expression
# CHECK is false. For what scripts/need.sh cannot test, having no command of its
# own: a PHP extension (extension_loaded("curl")) or a PHP library (one of its
# files). Needs php (scripts/need.sh php php-cli first). Uses sudo when not root.
set -euo pipefail
check=$1 pkg=$2
ok() { php -r "exit(($check) ? 0 : 1);" >/dev/null 2>&1; }
ok && exit 0
echo "php: $check is false: installing Debian package $pkg" >&2
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
ok || { echo "$pkg installed but php still finds $check false" >&2; exit 1; }
