#!/usr/bin/env node
'use strict';
// trainwire from Node.js: start a declarative XGBoost fit on the coordinator, follow it
// with WatchRun (one JSON line per event on stdout), then score a few rows with the
// predictor's ModelInfer (model name = the run id) and print the outputs.
//
//   node quickstart.js [COORDINATOR [PREDICTOR]] --label target \
//       (--dataset train=URI | --upload train=local.csv) [options]
//
// Exit status: 0 when the run SUCCEEDED and the predictor answered; 1 when the run
// ended otherwise or a call failed; 2 for bad usage.

const fs = require('node:fs');
const path = require('node:path');
const { parseArgs } = require('node:util');

const tw = require('./trainwire');

const USAGE = `usage: node quickstart.js [COORDINATOR [PREDICTOR]] --label COLUMN
         (--dataset NAME=URI | --upload NAME=FILE)... [options]

  COORDINATOR           host:port (default: $TRAINWIRE_ADDRESS or 127.0.0.1:50051)
  PREDICTOR             host:port (default: $TRAINWIRE_PREDICTOR_ADDRESS or 127.0.0.1:8001)
  --dataset NAME=URI    a parquet/csv URI the coordinator reads (file://, s3://, a path)
  --upload NAME=FILE    a local .csv or .arrow (uncompressed Arrow IPC) file, uploaded as Arrow
                        (stored once by content)
  --label COLUMN        label column of every dataset (required)
  --params JSON         XGBoost params (default: binary:logistic, logloss, max_depth 3)
  --rounds N            boosting rounds (default 10)
  --workers N           workers (default 1)
  --name NAME           run name (default node-quickstart)
  --rows FILE           a local .csv or .arrow file to score (default: the first local dataset)
  --num-rows N          rows of it to score (default 5)
  --token TOKEN         bearer token (default: $TRAINWIRE_AUTH_TOKEN or $TRAINWIRE_TOKEN)
  --predictor-token T   bearer token of the predictor (default: --token)
  --working-dir DIR     a directory shipped with the run (runtime_env working_dir): packed
                        and uploaded once by content, the workers' working directory
  --env NAME=VALUE      a variable set for the workers (runtime_env env_vars; repeatable)
  --logs                print the workers' output lines as they come ({"event":"log",...})
  --protos DIR          protos directory (default: $TRAINWIRE_PROTOS or the repository's protos/)

TLS: set TRAINWIRE_TLS_CA (and TRAINWIRE_TLS_CERT + TRAINWIRE_TLS_KEY for mutual TLS).`;

const DEFAULT_PARAMS = { objective: 'binary:logistic', eval_metric: 'logloss', max_depth: 3 };

class UsageError extends Error {}

function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

function positiveInt(value, flag) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${flag} must be an integer >= 1, got ${value}`);
  return n;
}

function namedPairs(values, flag) {
  return (values || []).map((v) => {
    const eq = v.indexOf('=');
    if (eq < 1 || eq === v.length - 1) throw new UsageError(`${flag} takes NAME=VALUE, got ${JSON.stringify(v)}`);
    return [v.slice(0, eq), v.slice(eq + 1)];
  });
}

function parseCommandLine(argv, env) {
  const { values, positionals } = parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      dataset: { type: 'string', multiple: true },
      upload: { type: 'string', multiple: true },
      label: { type: 'string' },
      params: { type: 'string' },
      rounds: { type: 'string', default: '10' },
      workers: { type: 'string', default: '1' },
      name: { type: 'string', default: 'node-quickstart' },
      rows: { type: 'string' },
      'num-rows': { type: 'string', default: '5' },
      token: { type: 'string' },
      'predictor-token': { type: 'string' },
      protos: { type: 'string' },
      'working-dir': { type: 'string' },
      env: { type: 'string', multiple: true },
      logs: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) return { help: true };
  if (positionals.length > 2) throw new UsageError(`unexpected arguments: ${positionals.slice(2).join(' ')}`);
  if (!values.label) throw new UsageError('--label is required');
  const datasets = namedPairs(values.dataset, '--dataset');
  const uploads = namedPairs(values.upload, '--upload');
  if (!datasets.length && !uploads.length) throw new UsageError('give at least one --dataset or --upload');
  let params = DEFAULT_PARAMS;
  if (values.params) {
    try {
      params = JSON.parse(values.params);
    } catch (err) {
      throw new UsageError(`--params is not JSON: ${err.message}`);
    }
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      throw new UsageError('--params must be a JSON object');
    }
  }
  const token = values.token || env.TRAINWIRE_AUTH_TOKEN || env.TRAINWIRE_TOKEN || '';
  const workingDir = values['working-dir'];
  if (workingDir && !(fs.existsSync(workingDir) && fs.statSync(workingDir).isDirectory())) {
    throw new UsageError(`--working-dir ${workingDir} is not a directory`);
  }
  return {
    coordinator: positionals[0] || env.TRAINWIRE_ADDRESS || '127.0.0.1:50051',
    predictor: positionals[1] || env.TRAINWIRE_PREDICTOR_ADDRESS || '127.0.0.1:8001',
    datasets,
    uploads,
    label: values.label,
    params,
    rounds: positiveInt(values.rounds, '--rounds'),
    workers: positiveInt(values.workers, '--workers'),
    name: values.name,
    rows: values.rows,
    numRows: positiveInt(values['num-rows'], '--num-rows'),
    token,
    workingDir,
    envVars: Object.fromEntries(namedPairs(values.env, '--env')),
    logs: Boolean(values.logs),
    predictorToken: values['predictor-token'] || token,
    protos: values.protos,
  };
}

// --- local tables (CSV or Arrow) ------------------------------------------------------
/** Splits CSV text into rows of fields (RFC 4180: quoted fields, "" escapes, CRLF). */
function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') {
        field += '"';
        i++;
      } else if (c === '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c === '"') {
      quoted = true;
    } else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') i++;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else {
      field += c;
    }
  }
  if (field !== '' || row.length) {
    row.push(field);
    rows.push(row);
  }
  return rows.filter((r) => !(r.length === 1 && r[0] === ''));
}

const isNumeric = (values) => values.every((v) => v === null || typeof v === 'number');

/** Reads a local .csv (header row; all-numeric columns become numbers, blanks null) or .arrow file as {name: values[]}. */
function readLocalTable(file) {
  const ext = path.extname(file).toLowerCase();
  if (ext === '.arrow' || ext === '.arrows' || ext === '.feather' || ext === '.ipc') {
    const { tableFromIPC } = require('apache-arrow');
    let table;
    try {
      table = tableFromIPC(fs.readFileSync(file));
    } catch (err) {
      if (err.code) throw err; // a file system error
      // Arrow JS reads uncompressed IPC only (feather files are LZ4 by default).
      throw new UsageError(`${file}: not an uncompressed Arrow IPC file or stream: ${err.message}`);
    }
    return Object.fromEntries(
      table.schema.fields.map((f) => [
        f.name,
        Array.from(table.getChild(f.name), (v) => (typeof v === 'bigint' ? Number(v) : v)), // nulls stay null
      ]),
    );
  }
  if (ext !== '.csv') {
    throw new UsageError(`${file}: only .csv and .arrow files are read locally; pass other formats with --dataset URI`);
  }
  const [header, ...body] = parseCsv(fs.readFileSync(file, 'utf8'));
  if (!header) throw new UsageError(`${file}: empty CSV`);
  const columns = {};
  header.forEach((name, j) => {
    const cells = body.map((r) => (r[j] === undefined ? '' : r[j]));
    const numeric = cells.every((c) => c.trim() === '' || Number.isFinite(Number(c)));
    columns[name] = numeric ? cells.map((c) => (c.trim() === '' ? null : Number(c))) : cells;
  });
  return columns;
}

/** A table as one Arrow IPC stream: number columns as float64 (blanks as nulls), others as utf8. */
function toArrowIpc(columns) {
  const { Float64, Table, Utf8, tableToIPC, vectorFromArray } = require('apache-arrow');
  const vectors = Object.fromEntries(
    Object.entries(columns).map(([name, values]) => [
      name,
      isNumeric(values)
        ? vectorFromArray(values, new Float64())
        : vectorFromArray(values.map((v) => (v === null ? null : String(v))), new Utf8()),
    ]),
  );
  return Buffer.from(tableToIPC(new Table(vectors), 'stream'));
}

function localPath(uri) {
  if (uri.startsWith('file://')) return decodeURIComponent(uri.slice('file://'.length));
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(uri) ? null : uri;
}

/** The rows to score: --rows, else the first local upload or dataset; the label column dropped. */
function rowsToScore(opts) {
  let file = opts.rows;
  if (!file) {
    const candidates = [...opts.uploads.map(([, f]) => f), ...opts.datasets.map(([, uri]) => localPath(uri))];
    file = candidates.find((f) => f && /\.(csv|arrows?|feather|ipc)$/i.test(f) && fs.existsSync(f));
  }
  if (!file) throw new UsageError('no local .csv or .arrow file to take rows from: give --rows FILE');
  const columns = readLocalTable(file);
  delete columns[opts.label];
  const picked = Object.fromEntries(Object.entries(columns).map(([k, v]) => [k, v.slice(0, opts.numRows)]));
  return { file, columns: picked };
}

// --- the quickstart -----------------------------------------------------------------------
async function fitRequest(coordinator, opts) {
  const datasets = {};
  for (const [name, uri] of opts.datasets) datasets[name] = { uri, format: '' };
  for (const [name, file] of opts.uploads) {
    const info = await tw.uploadDataset(coordinator, toArrowIpc(readLocalTable(file)));
    emit({ event: 'uploaded', dataset: name, file, sha256: info.sha256, num_rows: info.num_rows, ref: info.ref });
    datasets[name] = info.ref;
  }
  const runtimeEnv = { env_vars: opts.envVars };
  if (opts.workingDir) {
    const info = await tw.uploadPackage(coordinator, await tw.zipDirectory(opts.workingDir));
    emit({ event: 'uploaded', working_dir: opts.workingDir, sha256: info.sha256, num_files: info.num_files });
    runtimeEnv.working_dir = info.sha256;
  }
  const shipped = runtimeEnv.working_dir || Object.keys(opts.envVars).length;
  return {
    framework: 'xgboost',
    scaling_config: { num_workers: opts.workers },
    run_config: shipped ? { name: opts.name, runtime_env: runtimeEnv } : { name: opts.name },
    datasets,
    gbdt: {
      params: tw.toStruct(opts.params),
      label_column: opts.label,
      num_boost_round: opts.rounds,
      dmatrix_params: tw.toStruct({}),
    },
    metadata: tw.toStruct({ client: 'trainwire-node-quickstart' }),
  };
}

function eventLine(event) {
  const base = { event_id: event.event_id, run_id: event.run_id };
  switch (event.kind) {
    case 'state_change':
      return { event: 'state', ...base, state: event.state_change.state, reason: event.state_change.reason };
    case 'metrics':
      return {
        event: 'metrics',
        ...base,
        report_index: event.metrics.report_index,
        metrics: tw.fromStruct(event.metrics.metrics),
      };
    case 'checkpoint':
      return {
        event: 'checkpoint',
        ...base,
        checkpoint_id: event.checkpoint.checkpoint_id,
        uri: event.checkpoint.uri,
        metrics: tw.fromStruct(event.checkpoint.metrics),
      };
    case 'worker_error': {
      const { world_rank, exc_type, message, attempt } = event.worker_error;
      return { event: 'worker_error', ...base, world_rank, exc_type, message, attempt };
    }
    default:
      return { event: 'unknown', ...base };
  }
}

/** ModelInfer, retried briefly while a just-finished run's checkpoint reaches the predictor's index. */
async function modelInfer(predictor, request, retryForS = 10) {
  const giveUpAt = Date.now() + retryForS * 1000;
  for (;;) {
    try {
      return await tw.unary(predictor, 'ModelInfer', request);
    } catch (err) {
      const retryable = err.code === tw.grpc.status.UNAVAILABLE || err.code === tw.grpc.status.NOT_FOUND;
      if (!retryable || Date.now() >= giveUpAt) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** Emits the workers' lines while the run goes on; ends once the run and its output have. */
async function followLogs(coordinator, runId) {
  for await (const line of tw.watchLogs(coordinator, runId, { follow: true })) {
    const { world_rank: rank, attempt, stream, text } = line;
    emit({ event: 'log', rank, attempt: attempt + 1, stream, text });
  }
}

async function main(argv, env) {
  const opts = parseCommandLine(argv, env);
  if (opts.help) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const rows = rowsToScore(opts); // fail on bad input before starting a run
  const { Coordinator, GRPCInferenceService } = tw.loadServices(opts.protos);
  const coordinator = tw.connect(Coordinator, opts.coordinator, opts.token);
  const predictor = tw.connect(GRPCInferenceService, opts.predictor, opts.predictorToken);
  try {
    const started = await tw.unary(coordinator, 'Fit', await fitRequest(coordinator, opts));
    emit({ event: 'run_started', run_id: started.run_id, name: started.name, state: started.state });
    const logs = opts.logs ? followLogs(coordinator, started.run_id) : Promise.resolve();
    for await (const event of tw.watchRun(coordinator, started.run_id)) {
      emit(eventLine(event));
    }
    await logs;
    const run = await tw.unary(coordinator, 'GetRun', { run_id: started.run_id });
    emit({
      event: 'run_ended',
      run_id: run.run_id,
      name: run.name,
      state: run.state,
      state_reason: run.state_reason,
      checkpoint: run.latest_checkpoint ? run.latest_checkpoint.uri : '',
      metrics: tw.fromStruct(run.latest_metrics),
    });
    if (run.state !== 'SUCCEEDED') {
      const err = run.error && run.error.exc_type ? run.error : null;
      const detail = err ? `rank ${err.world_rank}: ${err.exc_type}: ${err.message}` : run.state_reason;
      process.stderr.write(`run ${run.name} (${run.run_id}) ended ${run.state}: ${detail}\n`);
      if (err && err.traceback) process.stderr.write(`${err.traceback}\n`);
      return 1;
    }
    const names = Object.keys(rows.columns);
    const response = await modelInfer(predictor, {
      model_name: run.run_id,
      model_version: '', // the run's best checkpoint, else its latest
      id: 'node-quickstart',
      inputs: names.map((n) => tw.inputTensor(n, rows.columns[n])),
    });
    emit({
      event: 'prediction',
      model_name: response.model_name,
      model_version: response.model_version,
      rows_from: rows.file,
      num_rows: rows.columns[names[0]].length,
      outputs: tw.decodeOutputs(response),
    });
    return 0;
  } finally {
    coordinator.client.close();
    predictor.client.close();
  }
}

if (require.main === module) {
  main(process.argv.slice(2), process.env).then(
    (code) => {
      process.exitCode = code;
    },
    (err) => {
      if (err instanceof UsageError || (err && err.code && String(err.code).startsWith('ERR_PARSE_ARGS'))) {
        process.stderr.write(`error: ${err.message}\n\n${USAGE}\n`);
        process.exitCode = 2;
        return;
      }
      const code = err && typeof err.code === 'number' ? ` (${tw.grpc.status[err.code] || err.code})` : '';
      process.stderr.write(`error${code}: ${err && err.details ? err.details : err && err.message}\n`);
      process.exitCode = 1;
    },
  );
}

module.exports = { main, parseCsv, readLocalTable, toArrowIpc };
