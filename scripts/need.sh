#!/usr/bin/env bash
# need.sh [-w WHY] NEED... : installs the Debian packages behind the NEEDs that are
# missing, in one apt-get call (the package index is read once), after one line
# that says what will be installed and why. A NEED is
#   COMMAND=PACKAGE        PACKAGE when COMMAND is not on the PATH
#   php:EXPR=PACKAGE       PACKAGE when the PHP expression EXPR is false (a PHP
#                          extension or library, which has no command of its own)
# WHY (for example "for make test: the tests start real redis-servers") is printed
# with the list. Uses sudo when not root; says what to install by hand otherwise.
set -euo pipefail
why=""
if [ "${1:-}" = "-w" ]; then why=$2; shift 2; fi
missing=() checks=()
for need in "$@"; do
  what=${need%=*} pkg=${need##*=}
  case $what in
  php:*)
    expr=${what#php:}
    if command -v php >/dev/null 2>&1 && php -r "exit(($expr) ? 0 : 1);" >/dev/null 2>&1; then continue; fi
    ;;
  *)
    command -v "$what" >/dev/null 2>&1 && continue
    ;;
  esac
  missing+=("$pkg") checks+=("$need")
done
[ ${#missing[@]} -eq 0 ] && exit 0
# One package may stand behind several needs; install each once.
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
echo "installing Debian packages ${pkgs[*]}${why:+ $why} (about a minute per package on a fresh machine)" >&2
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "cannot install ${pkgs[*]}: not root and no sudo. Install them yourself: apt-get install ${pkgs[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
for need in "${checks[@]}"; do
  what=${need%=*} pkg=${need##*=}
  case $what in
  php:*) php -r "exit((${what#php:}) ? 0 : 1);" >/dev/null 2>&1 || { echo "$pkg installed but php still finds ${what#php:} false" >&2; exit 1; } ;;
  *) command -v "$what" >/dev/null 2>&1 || { echo "$pkg installed but $what is still missing" >&2; exit 1; } ;;
  esac
done
