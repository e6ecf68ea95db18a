# One entry point for set-up, the main job and the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PACKAGES := core client coordinator worker predictor console

.PHONY: setup demo test unit lint docs protos redis-server iproute2 chromium twin-up twin-down deploy-check ray-examples ray-surface

$(STAMP): requirements.txt constraints.txt $(addsuffix /pyproject.toml,$(PACKAGES))
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -c constraints.txt -r requirements.txt
	$(PY) -m pip install -q --no-deps $(addprefix -e ,$(PACKAGES))
	touch $(STAMP)

# Horovod has no wheel that builds against torch 2.x: one from its sdist, patched (cached in ~/.cache/trainwire/wheels/).
HOROVOD_STAMP := $(VENV)/.horovod-installed
$(HOROVOD_STAMP): $(STAMP) scripts/build_horovod.sh
	PY=$(PY) scripts/build_horovod.sh
	touch $@

# The console's browser libraries (htmx, uPlot) from the npm registry, pinned by package-lock.json,
# copied into its package: served from there, so the console works offline.
CONSOLE_VENDOR := console/trainwire_console/static/vendor
CONSOLE_STAMP := $(CONSOLE_VENDOR)/.built
$(CONSOLE_STAMP): console/frontend/package.json console/frontend/package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq npm >/dev/null; }
	cd console/frontend && npm ci --no-audit --no-fund --silent
	mkdir -p $(CONSOLE_VENDOR)
	cp console/frontend/node_modules/htmx.org/dist/htmx.min.js \
	   console/frontend/node_modules/uplot/dist/uPlot.iife.min.js \
	   console/frontend/node_modules/uplot/dist/uPlot.min.css $(CONSOLE_VENDOR)/
	touch $@

setup: $(STAMP) $(HOROVOD_STAMP) $(CONSOLE_STAMP)

# The main job: train on the embedded defaults (local Ray, SQLite, a local store), then serve predictions.
demo: setup
	$(PY) examples/quickstart.py

# The Redis metadata-store tests need a real redis-server.
redis-server:
	@command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server >/dev/null; }

# The twin (tests/e2e/test_twin.py, make twin-up) makes network namespaces with iproute2.
iproute2:
	@command -v ip >/dev/null || { apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null; }

# The console's browser tests (tests/console) drive Debian's chromium through Playwright.
chromium:
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

# Peers that pin their own dependencies get virtualenvs of their own (scripts/peer_venvs.sh):
# lm-eval scores the predictor's OpenAI routes in tests/predictor/test_openai_logprobs.py.
LM_EVAL_PY := $(HOME)/.cache/trainwire/venvs/lm-eval/bin/python
LM_EVAL_STAMP := $(HOME)/.cache/trainwire/venvs/lm-eval/.installed
$(LM_EVAL_STAMP): scripts/peer_venvs.sh scripts/peers/lm-eval.txt
	scripts/peer_venvs.sh lm-eval
	touch $@

# KServe's Python clients and schemathesis (tests/integration/test_kserve_client.py, tests/predictor/test_rest_oip_schema.py).
KSERVE_PY := $(HOME)/.cache/trainwire/venvs/kserve/bin/python
KSERVE_STAMP := $(HOME)/.cache/trainwire/venvs/kserve/.installed
$(KSERVE_STAMP): scripts/peer_venvs.sh scripts/peers/kserve.txt
	scripts/peer_venvs.sh kserve
	touch $@

test: setup redis-server iproute2 chromium $(LM_EVAL_STAMP) $(KSERVE_STAMP)
	LM_EVAL_PYTHON=$(LM_EVAL_PY) KSERVE_PYTHON=$(KSERVE_PY) $(PY) -m pytest -q

# The pure unit tests only (no Ray, Redis, MLflow or predictor processes): tests/conftest.py marks the rest.
unit: setup
	$(PY) -m pytest -q -m "not integration"

# ruff, and the import contract (.importlinter): services -> SDK -> core, never sideways or back.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs.yml, docs/); --strict fails on a broken link or a page left out of the nav.
docs: setup
	$(VENV)/bin/mkdocs build --strict --site-dir $(or $(SITE_DIR),site)

protos: setup
	$(PY) scripts/gen_protos.py

# docker-compose.yml as separate hosts on this machine (root): one network namespace per
# service replica. Left running; `make twin-down` ends it. TWIN_SCALE="ray-worker=2 predictor=2".
TWIN_STATE ?= deploy/.twin/state.json
TWIN_SCALE ?=
twin-up: setup redis-server iproute2 deploy/tls/ca.pem
	$(PY) -m deploy.twin up --detach --host-access --state $(TWIN_STATE) $(addprefix --scale=,$(TWIN_SCALE))

# The deployment's self-signed CA and certificates, which docker-compose.yml mounts (TLS on by default).
deploy/tls/ca.pem: | setup
	$(VENV)/bin/trainwire tls init deploy/tls

twin-down:
	$(PY) -m deploy.twin down --state $(TWIN_STATE)

# CI's deployment stage (after `make test`): the compose topology as separate hosts, a fit from a
# client host and answers from every predictor replica.
deploy-check: setup redis-server iproute2
	deploy/ci_stage.sh

# Ray's own example scripts (the wheel's, and Ray's doc_code when scripts/fetch_ray_doc_code.sh has
# fetched it), each run under Ray and under trainwire with only its imports changed: the table in
# docs/porting/ray-examples.md. Long (an hour or more on 2 cores); CI runs a sample (tests/e2e).
ray-examples: setup
	$(PY) bench/ray_examples.py --all --write

# Ray 2.60's public Train and Tune names against trainwire's: the table in docs/porting/ray-surface.md.
ray-surface: setup
	$(PY) scripts/ray_surface.py --write
