// A small client of tock's HTTP API: jobs (create, get, runs) and the run endpoints of the
// pull protocol (claim, heartbeat, ack, fail, snooze, cancel; ackMany and failMany report
// several runs in one call). Uses the global fetch.
import { formatDuration, parseDuration } from './duration.js';

/** An error reply of the API: status (HTTP), code ("conflict", "token_mismatch"...), field. */
export class APIError extends Error {
  constructor(status, code, message, field) {
    super(`${status} ${code}: ${message}${field ? ` (${field})` : ''}`);
    this.name = 'APIError';
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

const DURATIONS = new Set(['timeout', 'visibility', 'misfire_after']);

/**
 * The bytes of an error message the server keeps (shard.MaxErrorLen): a longer one is cut
 * to it before it is sent, rather than sent whole (and refused over the server's body
 * limit).
 */
export const MAX_ERROR = 2048;

// cutError returns String(msg) in at most MAX_ERROR bytes of UTF-8, cut at a character's start.
function cutError(msg) {
  const s = String(msg);
  const b = Buffer.from(s, 'utf8');
  if (b.length <= MAX_ERROR) return s;
  let i = MAX_ERROR;
  while (i > 0 && (b[i] & 0xc0) === 0x80) i--; // b[i] continues a character: cut before its start
  return b.subarray(0, i).toString('utf8');
}

/**
 * The bytes of v when it is binary (a Buffer or another typed array, a DataView, an
 * ArrayBuffer or a SharedArrayBuffer: their bytes as they are in memory), else null.
 */
export function binary(v) {
  if (ArrayBuffer.isView(v)) return Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (v instanceof ArrayBuffer || (typeof SharedArrayBuffer !== 'undefined' && v instanceof SharedArrayBuffer)) return Buffer.from(v);
  return null;
}

export class Client {
  // The bearer token, private: console.log or JSON.stringify of a client, or of a worker
  // holding it, does not show it.
  #token;

  /**
   * @param {string} baseUrl e.g. http://127.0.0.1:8080
   * @param {string} [token] bearer token: write scope for jobs, worker scope for runs and
   *   nodeResult. It is sent to baseUrl only: the client follows no redirect (a 3xx is an
   *   APIError).
   * @param {{timeout?: number, userAgent?: string}} [opts] timeout in seconds (default 30)
   */
  constructor(baseUrl, token, { timeout = 30, userAgent = 'tock-node/0.1' } = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#token = token;
    this.timeout = timeout;
    this.userAgent = userAgent;
  }

  // #do sends a request and returns its status and decoded JSON body; with raw, the
  // body's bytes (a Buffer) and its content type instead.
  async #do(method, path, body, { headers = {}, timeout = this.timeout, raw = false } = {}) {
    const h = { Accept: 'application/json', 'User-Agent': this.userAgent, ...headers };
    if (this.#token) h.Authorization = `Bearer ${this.#token}`;
    // AbortSignal.timeout takes whole milliseconds (32200.000000000004 is a RangeError).
    const init = { method, headers: h, signal: AbortSignal.timeout(Math.ceil(timeout * 1000)), redirect: 'manual' };
    if (body !== undefined) {
      h['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const resp = await fetch(this.baseUrl + path, init);
    const bytes = Buffer.from(await resp.arrayBuffer());
    const text = bytes.toString('utf8');
    if (!resp.ok) {
      let err;
      try {
        err = JSON.parse(text).error;
      } catch {
        err = null;
      }
      if (err && typeof err === 'object') throw new APIError(resp.status, err.code ?? '', err.message ?? '', err.field);
      throw new APIError(resp.status, `http_${resp.status}`, text.slice(0, 200));
    }
    if (raw) return { status: resp.status, body: bytes, type: (resp.headers.get('content-type') ?? '').split(';')[0].trim() };
    return { status: resp.status, body: text ? JSON.parse(text) : null };
  }

  /**
   * A succeeded workflow node's result (GET /v1/workflows/{id}/nodes/{node}/result): a
   * JSON value as decoded, other results as a Buffer; an APIError 404 when it has none. A
   * worker token may read it: a handler reads the parents its claim left out
   * (job.parentsOmitted) with it.
   */
  async nodeResult(workflow, node) {
    const { body, type } = await this.#do('GET', `/v1/workflows/${encodeURIComponent(workflow)}/nodes/${encodeURIComponent(node)}/result`,
      undefined, { raw: true });
    return type === 'application/json' ? JSON.parse(body.toString('utf8')) : body;
  }

  static #runPath(run, verb) {
    // <job id>:<due ms>: the job id is path-escaped, the colons may stay.
    return `/v1/runs/${encodeURIComponent(run).replace(/%3A/gi, ':')}:${verb}`;
  }

  /**
   * Create a job; resolves to the job with `created` (whether it is new).
   * fields: payload (any JSON value), payloadBytes (a Buffer), schedule (default
   * {now: true}), idempotencyKey, and the API's JobRequest fields by name (id, queue,
   * priority, retry, timeout and visibility as Go durations or seconds...).
   */
  async createJob(type, { payload, payloadBytes, schedule, idempotencyKey, ...fields } = {}) {
    const body = { type, schedule: schedule ?? { now: true } };
    if (payload !== undefined) body.payload = payload;
    if (payloadBytes !== undefined) body.payload_base64 = Buffer.from(payloadBytes).toString('base64');
    for (const [k, v] of Object.entries(fields)) {
      if (v !== undefined && v !== null) body[k] = DURATIONS.has(k) ? formatDuration(v) : v;
    }
    const headers = idempotencyKey ? { 'Idempotency-Key': idempotencyKey } : {};
    const { status, body: job } = await this.#do('POST', '/v1/jobs', body, { headers });
    job.created = status === 201;
    return job;
  }

  async getJob(id) {
    return (await this.#do('GET', `/v1/jobs/${encodeURIComponent(id)}`)).body;
  }

  /** The job's recent runs, newest first (each with its outcome and result). */
  async jobRuns(id) {
    return (await this.#do('GET', `/v1/jobs/${encodeURIComponent(id)}/runs`)).body.runs;
  }

  /**
   * Claim up to max runs of queues, waiting up to wait (seconds or a Go duration, at most
   * 60 s) when none is ready. Resolves to the claimed runs, as the API gives them.
   */
  async claim(queues, worker, { max = 1, wait, types } = {}) {
    const body = { queues: [...queues], worker, max };
    if (wait) body.wait = formatDuration(wait);
    if (types && types.length) body.types = [...types];
    const w = parseDuration(body.wait) ?? 0;
    return (await this.#do('POST', '/v1/runs:claim', body, { timeout: this.timeout + w })).body.runs;
  }

  /**
   * Extend held runs ({run, token} objects). Resolves to {run: "extended"|"cancelled"|"lost"}.
   * timeout (in seconds; the client's by default) bounds the call: a worker gives it a
   * part of the runs' visibility, so that a call never answered does not hold back the next.
   */
  async heartbeat(runs, worker, { timeout = this.timeout } = {}) {
    const held = runs.map((r) => ({ run: r.run, token: r.token }));
    const reply = (await this.#do('POST', '/v1/runs:heartbeat', { runs: held, worker }, { timeout })).body;
    return Object.fromEntries(reply.runs.map((r) => [r.run, r.state]));
  }

  /**
   * Report success; result is any JSON value, or bytes (a Buffer or another typed array,
   * a DataView or an ArrayBuffer: kept as bytes).
   */
  async ack(run, token, result) {
    const body = { token };
    const bytes = binary(result);
    if (bytes) body.result_base64 = bytes.toString('base64');
    else if (result !== undefined && result !== null) body.result = result;
    return (await this.#do('POST', Client.#runPath(run, 'ack'), body)).body;
  }

  /**
   * Report that several runs succeeded in one call (POST /v1/runs:ack, at most 1000 runs;
   * one Redis call per shard instead of one per run). runs: {run, token, result} objects,
   * result any JSON value or bytes (as ack's: kept as bytes), or absent. Resolves to
   * the results in order: {run, status} with outcome when status is 200, else error: 409
   * (token_mismatch: redelivered meanwhile, drop it), 404, 400 or 413 for that run.
   */
  async ackMany(runs) {
    const items = runs.map(({ run, token, result }) => {
      const item = { run, token };
      const bytes = binary(result);
      if (bytes) item.result_base64 = bytes.toString('base64');
      else if (result !== undefined && result !== null) item.result = result;
      return item;
    });
    return (await this.#do('POST', '/v1/runs:ack', { runs: items })).body.runs;
  }

  /**
   * Report that several runs failed in one call (POST /v1/runs:fail): {run, token, error,
   * retryAfter} objects (retryAfter in seconds or a Go duration). Resolves as ackMany.
   */
  async failMany(runs) {
    const items = runs.map(({ run, token, error, retryAfter }) => {
      const item = { run, token };
      if (error) item.error = cutError(error);
      if (retryAfter !== undefined && retryAfter !== null) item.retry_after = formatDuration(retryAfter);
      return item;
    });
    return (await this.#do('POST', '/v1/runs:fail', { runs: items })).body.runs;
  }

  async fail(run, token, error, { retryAfter } = {}) {
    const body = { token };
    if (error) body.error = cutError(error);
    if (retryAfter !== undefined && retryAfter !== null) body.retry_after = formatDuration(retryAfter);
    return (await this.#do('POST', Client.#runPath(run, 'fail'), body)).body;
  }

  async snooze(run, token, delay) {
    return (await this.#do('POST', Client.#runPath(run, 'snooze'), { token, delay: formatDuration(delay) })).body;
  }

  async cancel(run, token, error) {
    const body = { token };
    if (error) body.error = cutError(error);
    return (await this.#do('POST', Client.#runPath(run, 'cancel'), body)).body;
  }
}
