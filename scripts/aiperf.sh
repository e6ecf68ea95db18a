#!/usr/bin/env bash
# NVIDIA's aiperf against the predictor's streaming chat endpoint, as a user runs it: a tiny
# GPT-2-shaped model committed to a fresh store, `aiperf profile --endpoint-type chat --streaming`
# at concurrency 8 (64 requests, 64 input and 32 output tokens each), then the same against
# vLLM's CPU build on the same files unless --skip-vllm is given.
#
#   scripts/aiperf.sh [--skip-vllm] [--aiperf-concurrency 8] [--aiperf-requests 64]
#
# aiperf runs from its own virtualenv (scripts/peer_venvs.sh aiperf; AIPERF_BIN overrides),
# vLLM from the vllm peer (VLLM_PYTHON overrides); see bench/generate_vs_vllm.py.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
root="${TRAINWIRE_PEER_VENVS:-$HOME/.cache/trainwire/venvs}"
if [ -z "${AIPERF_BIN:-}" ] && [ ! -x "$root/aiperf/bin/aiperf" ]; then
    "$here/scripts/peer_venvs.sh" aiperf
fi
exec "$here/.venv/bin/python" "$here/bench/generate_vs_vllm.py" --aiperf "$@"
