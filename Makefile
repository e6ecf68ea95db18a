# One entry point for set-up, the main job and the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PACKAGES := core client coordinator worker predictor

.PHONY: setup demo test lint protos redis-server iproute2 twin-up twin-down deploy-check

$(STAMP): requirements.txt constraints.txt $(addsuffix /pyproject.toml,$(PACKAGES))
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -c constraints.txt -r requirements.txt
	$(PY) -m pip install -q --no-deps $(addprefix -e ,$(PACKAGES))
	touch $(STAMP)

# Horovod has no wheel that builds against torch 2.x: one from its sdist, patched (cached in .cache/wheels/).
HOROVOD_STAMP := $(VENV)/.horovod-installed
$(HOROVOD_STAMP): $(STAMP) scripts/build_horovod.sh
	PY=$(PY) scripts/build_horovod.sh
	touch $@

setup: $(STAMP) $(HOROVOD_STAMP)

# The main job: train on the embedded defaults (local Ray, SQLite, a local store), then serve predictions.
demo: setup
	$(PY) examples/quickstart.py

# The Redis metadata-store tests need a real redis-server.
redis-server:
	@command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }

# The twin (tests/test_twin.py, make twin-up) makes network namespaces with iproute2.
iproute2:
	@command -v ip >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null; }

test: setup redis-server iproute2
	$(PY) -m pytest -q

# ruff, and the import contract (.importlinter): services -> SDK -> core, never sideways or back.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

protos: setup
	$(PY) scripts/gen_protos.py

# docker-compose.yml as separate hosts on this machine (root): one network namespace per
# service replica. Left running; `make twin-down` ends it. TWIN_SCALE="ray-worker=2 predictor=2".
TWIN_STATE ?= deploy/.twin/state.json
TWIN_SCALE ?=
twin-up: setup redis-server iproute2
	$(PY) -m deploy.twin up --detach --host-access --state $(TWIN_STATE) $(addprefix --scale=,$(TWIN_SCALE))

twin-down:
	$(PY) -m deploy.twin down --state $(TWIN_STATE)

# CI's deployment stage (after `make test`): the compose topology as separate hosts, a fit from a
# client host and answers from every predictor replica.
deploy-check: setup redis-server iproute2
	deploy/ci_stage.sh
