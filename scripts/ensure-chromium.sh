#!/usr/bin/env bash
# Make sure a Chromium the browser tests can drive is on this machine. Playwright's own browser
# download needs hosts a locked-down network may not reach, so the tests drive the system's
# Chromium (Debian's package `chromium`) instead. TURNLOG_CHROMIUM names another binary.
set -euo pipefail
want="${TURNLOG_CHROMIUM:-}"
if [ -n "$want" ]; then
  [ -x "$want" ] || { echo "TURNLOG_CHROMIUM=$want is not an executable file" >&2; exit 1; }
  exit 0
fi
for candidate in /usr/bin/chromium /usr/bin/chromium-browser; do
  [ -x "$candidate" ] && exit 0
done
if ! command -v apt-get >/dev/null; then
  echo "the browser tests need Chromium: install it, or set TURNLOG_CHROMIUM to its path" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "the browser tests need Chromium: run 'sudo apt-get install chromium', or set TURNLOG_CHROMIUM" >&2
    exit 1
  fi
fi
echo "installing Debian's chromium for the browser tests" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q chromium >/dev/null 2>&1 || {
  $sudo apt-get update -q >/dev/null 2>&1 && $sudo apt-get install -y -q chromium >/dev/null
}
[ -x /usr/bin/chromium ] || { echo "apt-get ran but /usr/bin/chromium is missing" >&2; exit 1; }
