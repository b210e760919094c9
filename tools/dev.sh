#!/usr/bin/env bash
# One entry point for a fresh Linux machine (Python >= 3.10):
#   bash tools/dev.sh train   set up .venv, then train on the embedded sim-only default
#   bash tools/dev.sh test    set up .venv (and .venv-lerobot: tools/lerobot_env.sh), then run the whole test suite
# Setup is idempotent and quick the second time.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv

system_packages() {
  # pyrealsense2 needs libusb at import time; MuJoCo renders offscreen through OSMesa or EGL;
  # pyspacemouse reads the SpaceMouse through easyhid, which loads the system hidapi.
  local missing=()
  ldconfig -p | grep -q 'libusb-1.0.so.0' || missing+=(libusb-1.0-0)
  ldconfig -p | grep -q 'libhidapi-hidraw.so.0' || missing+=(libhidapi-hidraw0)
  ldconfig -p | grep -q 'libOSMesa.so' || missing+=(libosmesa6)
  ldconfig -p | grep -q 'libEGL.so.1' || missing+=(libegl1)
  if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "rlhw setup: installing system packages: ${missing[*]}"
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    else
      echo "rlhw setup: please install the system packages: ${missing[*]}" >&2
    fi
  fi
}

setup() {
  system_packages
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  local stamp="$VENV/.rlhw-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    # CPU torch first, from the local wheel these machines carry (or the CPU index elsewhere),
    # so that resolving the rest never pulls the CUDA build.
    "$VENV/bin/pip" install -q --disable-pip-version-check torch==2.13.0 \
      || "$VENV/bin/pip" install -q --index-url https://download.pytorch.org/whl/cpu torch==2.13.0
    "$VENV/bin/pip" install -q --disable-pip-version-check -e ".[dev]"
    touch "$stamp"
  fi
}

cmd=${1:-train}; shift || true
setup
case "$cmd" in
  setup) ;;
  train) exec "$VENV/bin/rlhw" train "$@" ;;
  test)  # LeRobot's own dataset loader, in an environment of its own, checks the LeRobotDataset exports
         bash tools/lerobot_env.sh || echo "rlhw setup: tools/lerobot_env.sh failed; the LeRobot loader test will skip" >&2
         exec "$VENV/bin/python" -m pytest "$@" ;;
  *)     exec "$VENV/bin/rlhw" "$cmd" "$@" ;;
esac
