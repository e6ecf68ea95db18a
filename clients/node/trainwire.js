'use strict';
// A small trainwire client for Node.js: stubs made at run time from the repository's
// protos/ by @grpc/proto-loader (no generated code to keep in sync), plus the few
// helpers every caller needs (Struct <-> JSON, dataset upload, resumable WatchRun).

const crypto = require('node:crypto');
const fs = require('node:fs');
const path = require('node:path');

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const JSZip = require('jszip');

const DEFAULT_PROTOS = path.resolve(__dirname, '..', '..', 'protos');
const UPLOAD_CHUNK_BYTES = 1 << 20;
const MAX_MESSAGE_BYTES = 64 << 20;
const TERMINAL_STATES = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

/** Loads trainwire.v1 and inference from a protos directory; returns the service constructors. */
function loadServices(protosDir = process.env.TRAINWIRE_PROTOS || DEFAULT_PROTOS) {
  const definition = protoLoader.loadSync(
    ['trainwire/v1/coordinator.proto', 'inference/grpc_service.proto'],
    {
      includeDirs: [protosDir],
      keepCase: true, // field names as in the .proto files (and the Python SDK)
      longs: Number, // int64 as JS numbers: event ids, sizes and shapes stay far below 2^53
      enums: String,
      bytes: Buffer,
      defaults: true,
      oneofs: true, // e.g. event.kind === 'metrics'
    },
  );
  const loaded = grpc.loadPackageDefinition(definition);
  return { Coordinator: loaded.trainwire.v1.Coordinator, GRPCInferenceService: loaded.inference.GRPCInferenceService };
}

/** TLS from TRAINWIRE_TLS_CA / _CERT / _KEY (as the Python SDK reads them), else plaintext. */
function channelCredentials(env = process.env) {
  const { TRAINWIRE_TLS_CA: ca, TRAINWIRE_TLS_CERT: cert, TRAINWIRE_TLS_KEY: key } = env;
  if (!ca && !cert && !key) return grpc.credentials.createInsecure();
  if (Boolean(cert) !== Boolean(key)) {
    throw new Error('TRAINWIRE_TLS_CERT and TRAINWIRE_TLS_KEY must be given together');
  }
  const read = (p) => (p ? fs.readFileSync(p) : null);
  return grpc.credentials.createSsl(read(ca), read(key), read(cert));
}

/** A client of `Service` at `address`; `token` adds `authorization: Bearer <token>` to every call. */
function connect(Service, address, token) {
  const options = {
    'grpc.max_send_message_length': MAX_MESSAGE_BYTES,
    'grpc.max_receive_message_length': MAX_MESSAGE_BYTES,
  };
  const client = new Service(address, channelCredentials(), options);
  const metadata = () => {
    const md = new grpc.Metadata();
    if (token) md.set('authorization', `Bearer ${token}`);
    return md;
  };
  return { client, metadata };
}

/** Calls a unary method and resolves with its response (rejects with the grpc error). */
function unary({ client, metadata }, method, request, deadlineS = 60) {
  return new Promise((resolve, reject) => {
    const deadline = new Date(Date.now() + deadlineS * 1000);
    client[method](request, metadata(), { deadline }, (err, response) => (err ? reject(err) : resolve(response)));
  });
}

// --- google.protobuf.Struct <-> plain JSON --------------------------------------
// protobufjs defines the well-known types itself, with camelCase field names
// (numberValue, listValue, ...), whatever keepCase says for our own messages.
function toValue(v) {
  if (v === null || v === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof v === 'number') return { numberValue: v };
  if (typeof v === 'string') return { stringValue: v };
  if (typeof v === 'boolean') return { boolValue: v };
  if (Array.isArray(v)) return { listValue: { values: v.map(toValue) } };
  if (typeof v === 'object') return { structValue: toStruct(v) };
  throw new TypeError(`cannot put a ${typeof v} in a google.protobuf.Struct`);
}

function toStruct(obj) {
  return { fields: Object.fromEntries(Object.entries(obj || {}).map(([k, v]) => [k, toValue(v)])) };
}

function fromValue(v) {
  switch (v && v.kind) {
    case 'numberValue':
      return v.numberValue;
    case 'stringValue':
      return v.stringValue;
    case 'boolValue':
      return v.boolValue;
    case 'listValue':
      return (v.listValue.values || []).map(fromValue);
    case 'structValue':
      return fromStruct(v.structValue);
    default:
      return null;
  }
}

function fromStruct(struct) {
  return Object.fromEntries(Object.entries((struct && struct.fields) || {}).map(([k, v]) => [k, fromValue(v)]));
}

// --- datasets ----------------------------------------------------------------------
/**
 * Uploads one Arrow IPC stream (bytes) once: GetDataset by its sha256 first, UploadDataset
 * (header, then 1 MiB chunks) only when the coordinator does not have it. Resolves with
 * the DatasetInfo; its `ref` goes in FitRequest.datasets.
 */
async function uploadDataset(coordinator, ipcBytes) {
  const sha256 = crypto.createHash('sha256').update(ipcBytes).digest('hex');
  try {
    return await unary(coordinator, 'GetDataset', { sha256 });
  } catch (err) {
    if (err.code !== grpc.status.NOT_FOUND) throw err;
  }
  return clientStream(coordinator, 'UploadDataset', sha256, ipcBytes);
}

// --- runtime environments ---------------------------------------------------------------
const ZIP_DATE = new Date(Date.UTC(1980, 0, 1));
const ALWAYS_EXCLUDED = new Set(['.git', 'node_modules', '__pycache__']);

/** The files under `dir` (sorted relative paths), less version control and dependency folders. */
function listFiles(dir, prefix = '') {
  const out = [];
  for (const entry of fs.readdirSync(path.join(dir, prefix), { withFileTypes: true })) {
    if (ALWAYS_EXCLUDED.has(entry.name)) continue;
    const rel = prefix ? `${prefix}/${entry.name}` : entry.name;
    if (entry.isDirectory()) out.push(...listFiles(dir, rel));
    else if (entry.isFile()) out.push(rel);
  }
  return out.sort();
}

/**
 * A working_dir as the Python SDK packs it: a zip with fixed dates and sorted entries, so
 * the same content gives the same bytes (and the coordinator stores it once).
 */
async function zipDirectory(dir) {
  const zip = new JSZip();
  for (const rel of listFiles(dir)) {
    const mode = fs.statSync(path.join(dir, rel)).mode & 0o111 ? 0o100755 : 0o100644;
    zip.file(rel, fs.readFileSync(path.join(dir, rel)), { date: ZIP_DATE, unixPermissions: mode });
  }
  return zip.generateAsync({ type: 'nodebuffer', compression: 'DEFLATE', platform: 'UNIX' });
}

/** Uploads a package (zip bytes) once, as uploadDataset does; resolves with its PackageInfo. */
async function uploadPackage(coordinator, zipBytes) {
  const sha256 = crypto.createHash('sha256').update(zipBytes).digest('hex');
  try {
    return await unary(coordinator, 'GetPackage', { sha256 });
  } catch (err) {
    if (err.code !== grpc.status.NOT_FOUND) throw err;
  }
  return clientStream(coordinator, 'UploadPackage', sha256, zipBytes);
}

/** A header-first upload: {header: {sha256, size_bytes}}, then 1 MiB chunks. */
function clientStream(coordinator, method, sha256, bytes) {
  return new Promise((resolve, reject) => {
    const call = coordinator.client[method](coordinator.metadata(), (err, info) => (err ? reject(err) : resolve(info)));
    call.write({ header: { sha256, size_bytes: bytes.length } });
    for (let offset = 0; offset < bytes.length; offset += UPLOAD_CHUNK_BYTES) {
      call.write({ chunk: bytes.subarray(offset, offset + UPLOAD_CHUNK_BYTES) });
    }
    call.end();
  });
}

// --- watching a run ------------------------------------------------------------------
/**
 * Yields a run's events until the run has ended. If the coordinator becomes unreachable
 * (UNAVAILABLE), reconnects after the last event seen, so no event is lost or repeated,
 * backing off, for up to `reconnectForS` seconds.
 */
async function* watchRun(coordinator, runId, { afterEventId = 0, reconnectForS = 60 } = {}) {
  let last = afterEventId;
  const open = () => coordinator.client.WatchRun({ run_id: runId, after_event_id: last }, coordinator.metadata());
  for await (const event of resuming(open, reconnectForS)) {
    last = event.event_id;
    yield event;
  }
}

/**
 * Yields the workers' output lines (LogLine: world_rank, attempt, stream, text, cursor); with
 * `follow`, until the run has ended. Reconnects from the last line's cursor, as watchRun does.
 */
async function* watchLogs(coordinator, runId, { ranks = [], follow = true, after = '', reconnectForS = 60 } = {}) {
  let cursor = after;
  const open = () => coordinator.client.WatchLogs({ run_id: runId, ranks, follow, after: cursor }, coordinator.metadata());
  for await (const batch of resuming(open, reconnectForS)) {
    for (const line of batch.lines) {
      cursor = line.cursor;
      yield line;
    }
  }
}

/** Items of a server stream opened by `open` (which resumes), again while the server is UNAVAILABLE. */
async function* resuming(open, reconnectForS) {
  let delayMs = 100;
  let giveUpAt = null;
  for (;;) {
    const call = open();
    try {
      for await (const item of call) {
        delayMs = 100;
        giveUpAt = null;
        yield item;
      }
      return;
    } catch (err) {
      if (err.code !== grpc.status.UNAVAILABLE) throw err;
      giveUpAt = giveUpAt || Date.now() + reconnectForS * 1000;
      if (Date.now() >= giveUpAt) throw err;
      await new Promise((r) => setTimeout(r, delayMs));
      delayMs = Math.min(delayMs * 2, 5000);
    } finally {
      call.cancel();
    }
  }
}

// --- inference tensors -----------------------------------------------------------------
const TYPED_FIELD = {
  BOOL: 'bool_contents',
  INT8: 'int_contents',
  INT16: 'int_contents',
  INT32: 'int_contents',
  INT64: 'int64_contents',
  UINT8: 'uint_contents',
  UINT16: 'uint_contents',
  UINT32: 'uint_contents',
  UINT64: 'uint64_contents',
  FP32: 'fp32_contents',
  FP64: 'fp64_contents',
  BYTES: 'bytes_contents',
};

const RAW_READER = {
  BOOL: [1, (b, o) => b.readUInt8(o) !== 0],
  INT8: [1, (b, o) => b.readInt8(o)],
  INT16: [2, (b, o) => b.readInt16LE(o)],
  INT32: [4, (b, o) => b.readInt32LE(o)],
  INT64: [8, (b, o) => Number(b.readBigInt64LE(o))],
  UINT8: [1, (b, o) => b.readUInt8(o)],
  UINT16: [2, (b, o) => b.readUInt16LE(o)],
  UINT32: [4, (b, o) => b.readUInt32LE(o)],
  UINT64: [8, (b, o) => Number(b.readBigUInt64LE(o))],
  FP32: [4, (b, o) => b.readFloatLE(o)],
  FP64: [8, (b, o) => b.readDoubleLE(o)],
};

function decodeRaw(buf, datatype) {
  if (datatype === 'BYTES') {
    const out = [];
    for (let o = 0; o < buf.length; ) {
      const n = buf.readUInt32LE(o);
      out.push(buf.subarray(o + 4, o + 4 + n).toString('utf8'));
      o += 4 + n;
    }
    return out;
  }
  const reader = RAW_READER[datatype];
  if (!reader) throw new Error(`cannot decode raw contents of datatype ${datatype}`);
  const [size, read] = reader;
  return Array.from({ length: buf.length / size }, (_, i) => read(buf, i * size));
}

/** A typed input tensor (one column): FP64 for numbers (null: NaN), BYTES for anything else. */
function inputTensor(name, values) {
  if (values.every((v) => v === null || typeof v === 'number')) {
    const fp64 = values.map((v) => (v === null ? NaN : v)); // missing values as NaN, as pandas has them
    return { name, datatype: 'FP64', shape: [values.length], contents: { fp64_contents: fp64 } };
  }
  return {
    name,
    datatype: 'BYTES',
    shape: [values.length],
    contents: { bytes_contents: values.map((v) => Buffer.from(String(v), 'utf8')) },
  };
}

/** The outputs of a ModelInferResponse as {name: {datatype, shape, data}} (typed or raw contents). */
function decodeOutputs(response) {
  const raw = response.raw_output_contents || [];
  const outputs = {};
  response.outputs.forEach((out, i) => {
    let data;
    if (raw.length) {
      data = decodeRaw(raw[i], out.datatype);
    } else {
      data = (out.contents && out.contents[TYPED_FIELD[out.datatype]]) || [];
      if (out.datatype === 'BYTES') data = data.map((b) => Buffer.from(b).toString('utf8'));
    }
    outputs[out.name] = { datatype: out.datatype, shape: out.shape, data };
  });
  return outputs;
}

module.exports = {
  DEFAULT_PROTOS,
  TERMINAL_STATES,
  channelCredentials,
  connect,
  decodeOutputs,
  fromStruct,
  grpc,
  inputTensor,
  loadServices,
  toStruct,
  unary,
  uploadDataset,
  uploadPackage,
  watchLogs,
  watchRun,
  zipDirectory,
};
