#!/usr/bin/env bash
# A second virtual environment, .venv-lerobot, holding LeRobot's own dataset code (the `lerobot-dataset`
# package, import `ledataset`), so that the suite can check rlhw's LeRobotDataset exports with LeRobot's loader.
#
# Why a second environment: `ledataset` imports torchvision, and the torchvision wheels on PyPI are CUDA
# builds whose compiled ops do not load beside the CPU torch that rlhw pins ("operator torchvision::nms
# does not exist"). Here torch and torchvision come as the matching pair from PyPI (the CUDA build: a few GB,
# it runs on the CPU), and torchcodec decodes the videos (torchvision 0.28 no longer decodes video), with
# the system's FFmpeg libraries. rlhw itself is not installed here: the test runs one script in it.
#
#   bash tools/lerobot_env.sh          # idempotent; the suite's LeRobot test skips (saying so) without it
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-lerobot
STAMP="$VENV/.lerobot-installed"
[ -f "$STAMP" ] && exit 0

if ! ldconfig -p | grep -q 'libavcodec.so'; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "lerobot env: installing the FFmpeg libraries torchcodec decodes with"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev libavdevice-dev libavfilter-dev >/dev/null
  else
    echo "lerobot env: please install the FFmpeg libraries (libavcodec, libavformat, libavutil, libswscale...)" >&2
  fi
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# --isolated: this machine's pip configuration prefers its local CPU torch, which is what breaks torchvision.
CERT=(); [ -f /etc/ssl/certs/ca-certificates.crt ] && CERT=(--cert /etc/ssl/certs/ca-certificates.crt)
"$VENV/bin/pip" install -q --isolated --disable-pip-version-check "${CERT[@]}" \
  torch==2.13.0 torchvision==0.28.0 torchcodec==0.17.0 "lerobot-dataset==0.4.4"
"$VENV/bin/python" -c "import ledataset.datasets.lerobot_dataset as m, torchcodec.decoders; print('ledataset', m.CODEBASE_VERSION)"
touch "$STAMP"
