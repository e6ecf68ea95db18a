#!/usr/bin/env bash
# Peer virtualenvs: tools trainwire is checked against but must not share a
# dependency set with (they pin their own torch/transformers/etc.).
#
#   scripts/peer_venvs.sh            # creates every peer venv
#   scripts/peer_venvs.sh lm-eval    # only the lm-eval one
#   scripts/peer_venvs.sh kserve     # KServe's Python clients and schemathesis
#
# Each venv lives under ${TRAINWIRE_PEER_VENVS:-~/.cache/trainwire/venvs}/<name>;
# tests find it through an environment variable (LM_EVAL_PYTHON for lm-eval,
# KSERVE_PYTHON for kserve)
# and are skipped when it is unset.
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
    # KServe's REST and gRPC clients (tests/predictor/test_kserve_client.py) and schemathesis over
    # the Open Inference Protocol's OpenAPI document (tests/predictor/test_oip_schema.py): both pin
    # their own protobuf, grpcio and pydantic, and agree with each other.
    "$venv/bin/pip" install --quiet -c "$(dirname "$0")/peers/kserve.txt" kserve schemathesis
    "$venv/bin/pip" list 2>/dev/null | grep -E '^(kserve|schemathesis) '
    echo "export KSERVE_PYTHON=$venv/bin/python"
}

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    targets=(lm-eval kserve)
fi
for target in "${targets[@]}"; do
    case "$target" in
        lm-eval) lm_eval ;;
        kserve) kserve ;;
        *) echo "unknown peer venv: $target" >&2; exit 2 ;;
    esac
done
