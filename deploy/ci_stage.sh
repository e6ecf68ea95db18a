#!/usr/bin/env bash
# CI's deployment stage, after `make test`: docker-compose.yml brought up as separate hosts (the
# twin, 2 Ray workers and 2 predictors), an XGBoost fit from a client host, answers from every
# predictor replica, and the console's pages (plain HTTP from the client host) showing the run
# SUCCEEDED; the twin is torn down (by ids) whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
state=deploy/.twin/ci-state.json
rm -f "$state"
trap '.venv/bin/python -m deploy.twin down --state "$state" >/dev/null || true' EXIT
# The deployment's CA and certificates (docker-compose.yml mounts deploy/tls), made once.
[ -f deploy/tls/ca.pem ] || .venv/bin/trainwire tls init deploy/tls
.venv/bin/python -m deploy.twin up --detach --state "$state" --scale=ray-worker=2 --scale=predictor=2
# The S3 credentials the twin's MinIO stand-in was given (not sourced: other values hold '&').
AWS_ACCESS_KEY_ID=$(sed -n 's/^AWS_ACCESS_KEY_ID=//p' .env.example)
AWS_SECRET_ACCESS_KEY=$(sed -n 's/^AWS_SECRET_ACCESS_KEY=//p' .env.example)
# The deployment's bearer tokens: it refuses clients without them.
TRAINWIRE_TOKEN=$(sed -n 's/^TRAINWIRE_COORDINATOR_AUTH_TOKEN=//p' .env.example)
TRAINWIRE_PREDICTOR_TOKEN=$(sed -n 's/^TRAINWIRE_PREDICTOR_AUTH_TOKEN=//p' .env.example)
if ! .venv/bin/python -m deploy.twin exec --state "$state" client -- \
    env GRPC_DNS_RESOLVER=native TRAINWIRE_ADDRESS=coordinator:50051 TRAINWIRE_TLS_CA="$PWD/deploy/tls/ca.pem" \
    AWS_ACCESS_KEY_ID="$AWS_ACCESS_KEY_ID" AWS_SECRET_ACCESS_KEY="$AWS_SECRET_ACCESS_KEY" \
    TRAINWIRE_TOKEN="$TRAINWIRE_TOKEN" TRAINWIRE_PREDICTOR_TOKEN="$TRAINWIRE_PREDICTOR_TOKEN" \
    .venv/bin/python deploy/smoke.py --predictor predictor-1:8001 --predictor predictor-2:8001 \
    --console http://console:8265; then
    # What each host said, Ray's daemons included, before the trap tears them down.
    .venv/bin/python -m deploy.twin logs --state "$state" --ray --tail 60 || true
    exit 1
fi
echo "deployment stage: passed"
