// A worker loop on tock's pull protocol: claim runs (long poll), run each handler, heartbeat
// the runs in flight, then ack, fail, snooze or cancel them (the acks of runs that finish
// together go in one call); stop gracefully on SIGTERM or SIGINT.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import { APIError, binary } from './client.js';
import { parseDuration } from './duration.js';

/** Throw from a handler to fail the attempt and retry after delay seconds (not the backoff). */
export class RetryAfter extends Error {
  constructor(delay, message = 'retry later') {
    super(message);
    this.name = 'RetryAfter';
    this.delay = delay;
  }
}

/** Throw from a handler to try again after delay seconds without using an attempt. */
export class Snooze extends Error {
  constructor(delay) {
    super('snoozed');
    this.name = 'Snooze';
    this.delay = delay;
  }
}

/** Throw from a handler to end the run cancelled: no retry. */
export class Cancel extends Error {
  constructor(message) {
    super(message);
    this.name = 'Cancel';
  }
}

/**
 * What a handler gets: the claimed run (run, jobId, queue, type, payload, attempt,
 * maxAttempts, due, deadline, timeout and visibility in seconds, token, raw; for a
 * workflow node's run also workflow, node, parents, parentsOmitted and parentsError: the
 * parents not in parents are read with Client.nodeResult) and signal,
 * an AbortSignal aborted when the handler should give up (job cancelled, run lost,
 * timeout, or the worker's grace period is over).
 */
export class Job {
  constructor(r) {
    this.raw = r;
    this.run = r.run;
    this.jobId = r.job_id;
    this.queue = r.queue;
    this.type = r.type;
    if ('payload' in r) this.payload = r.payload;
    else if ('payload_base64' in r) this.payload = Buffer.from(r.payload_base64, 'base64');
    else this.payload = null;
    this.attempt = r.attempt;
    this.maxAttempts = r.max_attempts;
    this.due = r.due;
    this.deadline = r.deadline;
    this.timeout = parseDuration(r.timeout) ?? 0;
    this.visibility = parseDuration(r.visibility) ?? 30;
    this.token = r.token;
    // A workflow node's run: its workflow and node ids, and its parents' results by node
    // id (JSON values as decoded, other results as Buffers); parentsOmitted names the
    // parents whose results did not fit in the claim (GET
    // /v1/workflows/{id}/nodes/{node}/result reads them).
    this.workflow = r.workflow ?? null;
    this.node = r.node ?? null;
    this.parents = {};
    for (const p of r.parents ?? []) {
      if ('result' in p) this.parents[p.node] = p.result;
      else if ('result_base64' in p) this.parents[p.node] = Buffer.from(p.result_base64, 'base64');
      else this.parents[p.node] = Buffer.alloc(0);
    }
    this.parentsOmitted = [...(r.parents_omitted ?? [])];
    // Set when the claim could not read the parents' results (parents is then empty):
    // read them with Client.nodeResult.
    this.parentsError = r.parents_error ?? null;
    this.state = 'running'; // or cancelled, lost, timeout, reported
    this.controller = new AbortController();
    this.signal = this.controller.signal;
  }
}

// setTimeout's longest delay (2^31-1 ms, 24.8 days): a longer one fires after 1 ms.
const MAX_TIMER_MS = 2 ** 31 - 1;

// timer calls fn after ms, however long (a longer delay than setTimeout takes is waited
// in steps); the function it returns cancels it.
function timer(fn, ms) {
  let t;
  const step = (left) => {
    t = left > MAX_TIMER_MS ? setTimeout(() => step(left - MAX_TIMER_MS), MAX_TIMER_MS) : setTimeout(fn, left);
  };
  step(ms);
  return () => clearTimeout(t);
}

/**
 * The most runs one batch ack (POST /v1/runs:ack) carries, one claim asks for and one
 * heartbeat extends: the server's limits. A worker with more runs at once (concurrency)
 * claims and heartbeats them in several calls.
 */
export const MAX_ACK_BATCH = 1000;

// The states of runs that are heartbeated.
const HELD = new Set(['running', 'reported', 'cancelled']);
export const MAX_CLAIM = 1000;
export const MAX_HEARTBEAT = 1000;

// What else the server refuses in every claim (ingest.MaxClaimQueues, MaxClaimTypes and
// MaxClaimWait): a worker with such settings would log the refusal and claim again for
// ever, so the Worker constructor refuses them (checkSettings).
export const MAX_CLAIM_QUEUES = 64;
export const MAX_CLAIM_TYPES = 256;
export const MAX_CLAIM_WAIT = 60;

// seconds throws a RangeError naming setting name unless v is a number of seconds from
// low to high (undefined: no bound).
function seconds(name, v, low, high) {
  if (typeof v !== 'number' || Number.isNaN(v) || v < low || (high !== undefined && v > high)) {
    const bound = high !== undefined ? `from ${low} to ${high}` : `of ${low} or more`;
    throw new RangeError(`${name}: must be a number of seconds ${bound}, got ${String(v)}`);
  }
}

// checkSettings throws a RangeError naming the first of a worker's settings that the
// server refuses in every claim, or that can run nothing.
function checkSettings(queues, { concurrency, wait, grace, types }) {
  if (queues.length === 0) throw new RangeError('queues: at least one queue is required');
  if (queues.length > MAX_CLAIM_QUEUES) throw new RangeError(`queues: ${queues.length} queues, at most ${MAX_CLAIM_QUEUES}`);
  const seen = new Set();
  queues.forEach((q, i) => {
    if (typeof q !== 'string' || q === '') throw new RangeError(`queues[${i}]: must be a queue's name, got ${JSON.stringify(q)}`);
    if (seen.has(q)) throw new RangeError(`queues[${i}]: queue ${JSON.stringify(q)} is listed twice`);
    seen.add(q);
  });
  if (types !== undefined && types !== null) {
    if (types.length > MAX_CLAIM_TYPES) throw new RangeError(`types: ${types.length} types, at most ${MAX_CLAIM_TYPES}`);
    types.forEach((t, i) => {
      if (typeof t !== 'string' || t === '') throw new RangeError(`types[${i}]: must be a type's name, got ${JSON.stringify(t)}`);
    });
  }
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new RangeError(`concurrency: must be a whole number of 1 or more, got ${String(concurrency)}`);
  }
  seconds('wait', wait, 0, MAX_CLAIM_WAIT);
  seconds('grace', grace, 0);
}

// sleep resolves after ms, or as soon as signal aborts. Its listener goes with it: the
// signals it is given live as long as the worker.
const sleep = (ms, signal) =>
  new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const onAbort = () => {
      clearTimeout(t);
      resolve();
    };
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });

/**
 * How long a report (ack, fail, snooze, cancel) is tried again after a network error or
 * a 500, 502, 503 or 504 (a server restarting, out of memory for request bodies, or whose
 * Redis failed), as the Go worker does: a report given up leaves its run to its deadline,
 * to be run again. A run of a batch answered one of those in the batch's reply (Redis
 * failed for its shard) is sent again too.
 */
export const REPORT_RETRY_MS = 5000;

// The statuses of a report that is tried again: the run is still held (docs/executors.md).
const RETRY_STATUSES = [500, 502, 503, 504];

// isNetworkError tells fetch's network errors: 'fetch failed' (no connection, or one
// reset before the reply) and 'terminated' (the reply's body cut short: a server killed
// while it answered).
const isNetworkError = (e) => e instanceof TypeError && (e.message === 'fetch failed' || e.message === 'terminated');

// retrying returns call(), tried again with backoff while it fails with a network error
// (isNetworkError, or fetch's timeout) or a status of RETRY_STATUSES, until deadline
// (Date.now(); REPORT_RETRY_MS from now by default). A report that reached the server
// before its answer was lost is refused the second time (409, not held), which the
// callers take as a run redelivered: nothing is done twice.
async function retrying(call, deadline = Date.now() + REPORT_RETRY_MS) {
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      return await call();
    } catch (e) {
      const again = e instanceof APIError ? RETRY_STATUSES.includes(e.status)
        : e?.name === 'TimeoutError' || isNetworkError(e);
      if (!again || Date.now() + delay > deadline) throw e;
    }
    await sleep(delay);
  }
}

// describe returns the error message of what a handler threw: "Name: message", whatever
// it is (a template literal throws on a Symbol and on an object without toString).
function describe(e) {
  try {
    return `${e?.name ?? 'Error'}: ${e?.message ?? e}`;
  } catch {
    try {
      return `Error: ${String(e)}`;
    } catch {
      return `Error: a thrown ${typeof e} that cannot be printed`;
    }
  }
}

function defaultName() {
  const host = hostname().replace(/[^A-Za-z0-9._~-]/g, '-').slice(0, 60) || 'worker';
  return `${host}-node-${process.pid}-${randomBytes(2).toString('hex')}`;
}

/**
 * new Worker(client, queues, {handlers: {type: async fn(job)}, concurrency, workerName,
 * wait, grace, types, logger, batchAcks}).
 *
 * A handler resolves to the result (any JSON value, or bytes: a Buffer, another typed
 * array, a DataView or an ArrayBuffer) that the ack keeps with the run. Throwing
 * RetryAfter, Snooze or Cancel reports accordingly; any other error fails the attempt
 * (retried by the job's policy). Settings the server refuses in every claim (more than 64
 * queues, one listed twice, a wait over 60 s, more than 256 types) throw a RangeError
 * naming the setting, as does a concurrency that is no whole number of 1 or more or a
 * negative grace.
 *
 * wait: the claim's long poll in seconds (at most 60); a stop is noticed when the current
 * claim returns. grace: how long a stop lets running handlers finish; runs still running
 * after it are handed back (snoozed for 0s: ready again at once, no attempt used), as the
 * Go worker does, and their signals aborted.
 *
 * Successes are acked in batches (POST /v1/runs:ack): the acks waiting when a call can go
 * are sent in one, so runs that finish while a call is in flight go together in the next;
 * with one run at a time, each ack is a call of its own, sent at once. batchAcks: false
 * acks each run with its own call (POST /v1/runs/{run}:ack); so does a server without the
 * batch endpoint, found out at the first call. A run keeps its slot until its ack is sent.
 */
export class Worker {
  constructor(client, queues, { handlers = {}, concurrency = 4, workerName, wait = 10, grace = 30, types, logger = console, batchAcks = true } = {}) {
    queues = typeof queues === 'string' ? [queues] : [...queues];
    checkSettings(queues, { concurrency, wait, grace, types });
    this.client = client;
    this.queues = queues;
    this.handlers = { ...handlers };
    this.concurrency = concurrency;
    this.name = workerName ?? defaultName();
    this.wait = wait;
    this.grace = grace;
    this.types = types;
    this.log = logger;
    this.inflight = new Map(); // run id -> {job, done: Promise}
    this.stopping = new AbortController();
    this.slotFreed = null;
    this.batchAcks = batchAcks;
    this.acks = []; // {job, value, resolve} waiting to be sent
    this.acking = false; // a #flushAcks runs
  }

  /** Register fn for jobs of type. */
  handle(type, fn) {
    this.handlers[type] = fn;
    return this;
  }

  /** Ask the loop to stop: it claims no more and waits for running handlers. */
  stop() {
    this.stopping.abort();
    this.#freed();
  }

  #freed() {
    const f = this.slotFreed;
    this.slotFreed = null;
    f?.();
  }

  /** Work until stop() or (with signals, the default) SIGTERM/SIGINT. */
  async run({ signals = true } = {}) {
    const onSignal = () => this.stop();
    if (signals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    const done = new AbortController();
    const hb = this.#heartbeatLoop(done.signal);
    this.log.info?.(`worker ${this.name}: claiming from ${this.queues.join(',')}`);
    try {
      await this.#claimLoop();
      const all = Promise.all([...this.inflight.values()].map((f) => f.done));
      const graceOver = new AbortController();
      const cancelGrace = timer(() => graceOver.abort(), this.grace * 1000);
      await Promise.race([all, new Promise((r) => graceOver.signal.addEventListener('abort', r, { once: true }))]);
      cancelGrace();
      await this.#handBack([...this.inflight.values()].map((e) => e.job));
    } finally {
      done.abort();
      await hb;
      if (signals) {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    }
    this.log.info?.(`worker ${this.name}: stopped`);
  }

  // Hands back the runs still running after the grace period, as the Go worker does at
  // shutdown: a snooze of 0s makes each ready again at once without using an attempt
  // (left to its deadline, it would be taken for lost and use one). Their handlers' signals
  // are aborted; what they resolve to later is not reported. A cancelled run is reported
  // cancelled.
  async #handBack(jobs) {
    const deadline = Date.now() + REPORT_RETRY_MS;
    await Promise.all(jobs.map(async (job) => {
      const state = job.state;
      if (state !== 'running' && state !== 'cancelled') return; // reported, being reported, lost, timed out
      job.state = 'abandoned';
      job.controller.abort(new Error('worker stopped'));
      const snooze = state === 'running';
      this.log.warn?.(`worker ${this.name}: ${job.run} still running after the grace period; ${snooze ? 'handed back' : 'reported cancelled'}`);
      try {
        await retrying(() => (snooze ? this.client.snooze(job.run, job.token, 0) : this.client.cancel(job.run, job.token, 'job cancelled')), deadline);
      } catch (e) {
        if (!(e instanceof APIError && e.status === 409)) this.log.warn?.(`worker ${this.name}: hand back ${job.run}: ${e.message} (left to its deadline)`);
      }
    }));
  }

  async #claimLoop() {
    let backoff = 100;
    const types = this.types ?? Object.keys(this.handlers).sort();
    while (!this.stopping.signal.aborted) {
      while (this.inflight.size >= this.concurrency && !this.stopping.signal.aborted) {
        await new Promise((r) => (this.slotFreed = r));
      }
      if (this.stopping.signal.aborted) return;
      let runs;
      try {
        runs = await this.client.claim(this.queues, this.name, { max: Math.min(this.concurrency - this.inflight.size, MAX_CLAIM), wait: this.wait, types });
        backoff = 100;
      } catch (e) {
        this.log.warn?.(`worker ${this.name}: claim: ${e.message}`);
        await sleep(backoff, this.stopping.signal);
        backoff = Math.min(backoff * 2, 5000);
        continue;
      }
      // Claimed runs are ours even when a stop came meanwhile: run them.
      for (const r of runs) {
        const job = new Job(r);
        const entry = { job, done: null };
        this.inflight.set(job.run, entry);
        // A rejection nothing handled would end the process, with every run it holds.
        entry.done = this.#work(job).catch((e) => this.log.warn?.(`worker ${this.name}: ${job.run}: ${e?.message}`)).finally(() => {
          this.inflight.delete(job.run);
          this.#freed();
        });
      }
    }
  }

  async #work(job) {
    let kind = 'ack';
    let value;
    const fn = this.handlers[job.type];
    let cancelTimer = () => {};
    if (job.timeout > 0) cancelTimer = timer(() => this.#timedOut(job), job.timeout * 1000);
    try {
      if (!fn) {
        kind = 'fail';
        value = `no handler for type ${JSON.stringify(job.type)}`;
      } else {
        value = await fn(job);
        if (binary(value) === null) {
          try {
            JSON.stringify(value);
          } catch (e) {
            [kind, value] = ['fail', `the handler's result is not JSON: ${e.message}`];
          }
        }
      }
    } catch (e) {
      if (e instanceof RetryAfter) [kind, value] = ['retry', e];
      else if (e instanceof Snooze) [kind, value] = ['snooze', e.delay];
      else if (e instanceof Cancel) [kind, value] = ['cancel', e.message];
      else [kind, value] = ['fail', describe(e)];
    } finally {
      cancelTimer();
    }
    await this.#report(job, kind, value);
  }

  async #timedOut(job) {
    if (job.state !== 'running') return;
    job.state = 'timeout';
    job.controller.abort(new Error('timeout'));
    try {
      await retrying(() => this.client.fail(job.run, job.token, `timeout: the handler ran longer than ${job.timeout}s`));
    } catch (e) {
      this.log.warn?.(`worker ${this.name}: fail ${job.run} after its timeout: ${e.message}`);
    }
  }

  async #report(job, kind, value) {
    const state = job.state;
    if (state === 'running') job.state = 'reported';
    if (state === 'running' && kind === 'ack' && this.batchAcks) return this.#queueAck(job, value);
    // lost: another worker has it; timeout: reported already; abandoned: handed back
    if (state === 'lost' || state === 'timeout' || state === 'abandoned') return;
    if (state === 'cancelled') [kind, value] = ['cancel', 'job cancelled'];
    await this.#reportOne(job, kind, value);
  }

  // Resolves once the ack went (or failed: the run is then left to its deadline).
  #queueAck(job, value) {
    return new Promise((resolve) => {
      this.acks.push({ job, value, resolve });
      if (!this.acking) {
        this.acking = true;
        this.#flushAcks();
      }
    });
  }

  // Sends the waiting acks, those queued meanwhile in one call each time, until none is
  // left. acking is cleared in the same turn as the queue is found empty.
  async #flushAcks() {
    try {
      await null; // the acks of handlers that returned in this turn go along
      while (this.acks.length > 0) {
        const batch = this.acks.splice(0, MAX_ACK_BATCH);
        try {
          await this.#sendAcks(batch);
        } catch (e) {
          this.log.warn?.(`worker ${this.name}: ack ${batch.length} runs: ${e.message} (left to their deadlines)`);
        } finally {
          for (const a of batch) a.resolve();
        }
      }
    } finally {
      this.acking = false;
    }
  }

  async #sendAcks(batch) {
    if (this.batchAcks) {
      const deadline = Date.now() + REPORT_RETRY_MS;
      for (let delay = 50; batch.length > 0; delay = Math.min(delay * 2, 1000)) {
        let results;
        try {
          results = await retrying(() => this.client.ackMany(batch.map(({ job, value }) => ({ run: job.run, token: job.token, result: value }))), deadline);
        } catch (e) {
          if (e instanceof APIError && e.status === 413) {
            // The body is over the server's limit: its halves go on their own.
            if (batch.length === 1) return this.#refusedAck(batch[0].job, e.message);
            const half = batch.length >> 1;
            await this.#sendAcks(batch.slice(0, half));
            return this.#sendAcks(batch.slice(half));
          }
          if (!(e instanceof APIError && (e.status === 404 || e.status === 405))) {
            this.log.warn?.(`worker ${this.name}: ack ${batch.length} runs: ${e.message} (left to their deadlines)`);
            return;
          }
          this.log.info?.(`worker ${this.name}: the server has no batch ack (${e.message}); acking each run`);
          this.batchAcks = false;
          break;
        }
        const refused = [];
        const again = [];
        batch.forEach((a, i) => {
          const { job } = a;
          const r = results[i] ?? {};
          if (r.status === 409) this.log.info?.(`worker ${this.name}: ${job.run} was redelivered meanwhile; report dropped`);
          else if (r.status === 400 || r.status === 413) refused.push(this.#refusedAck(job, r.error?.message ?? ''));
          else if (RETRY_STATUSES.includes(r.status) && Date.now() + delay <= deadline) again.push(a); // Redis failed for its shard: still held
          else if (r.status !== 200) this.log.warn?.(`worker ${this.name}: ack ${job.run}: ${r.status} ${r.error?.message ?? ''} (left to its deadline)`);
        });
        await Promise.all(refused);
        batch = again;
        if (batch.length > 0) await sleep(delay);
      }
      if (this.batchAcks) return;
    }
    await Promise.all(batch.map(({ job, value }) => this.#reportOne(job, 'ack', value)));
  }

  async #reportOne(job, kind, value) {
    try {
      await retrying(() => {
        switch (kind) {
          case 'ack': return this.client.ack(job.run, job.token, value);
          case 'retry': return this.client.fail(job.run, job.token, value.message, { retryAfter: value.delay });
          case 'fail': return this.client.fail(job.run, job.token, value);
          case 'snooze': return this.client.snooze(job.run, job.token, value);
          default: return this.client.cancel(job.run, job.token, value || undefined);
        }
      });
    } catch (e) {
      if (e instanceof APIError && e.status === 409) {
        this.log.info?.(`worker ${this.name}: ${job.run} was redelivered meanwhile; report dropped`);
      } else if (e instanceof APIError && kind === 'ack' && (e.status === 400 || e.status === 413)) {
        await this.#refusedAck(job, e.message);
      } else {
        this.log.warn?.(`worker ${this.name}: ${kind} ${job.run}: ${e.message}`);
      }
    }
  }

  // An ack refused for its result (over the server's limit): the run is still held, so
  // its attempt is failed with why, rather than left to its deadline and taken for lost.
  async #refusedAck(job, message) {
    this.log.warn?.(`worker ${this.name}: ack ${job.run} refused: ${message}; failing the attempt`);
    await this.#reportOne(job, 'fail', `the handler's result was refused: ${message}`);
  }

  async #heartbeat(jobs, timeout) {
    let states;
    try {
      states = await this.client.heartbeat(jobs, this.name, { timeout });
    } catch (e) {
      this.log.warn?.(`worker ${this.name}: heartbeat: ${e.message}`);
      return;
    }
    for (const j of jobs) {
      const st = states[j.run];
      if ((st === 'cancelled' || st === 'lost') && j.state === 'running') {
        j.state = st;
        j.controller.abort(new Error(`run ${st}`));
      }
    }
  }

  async #heartbeatLoop(done) {
    while (!done.aborted) {
      // Runs still held: running, ended but not reported yet (queued for an ack call, or
      // being tried again), or cancelled (until reported).
      const held = () => [...this.inflight.values()].map((e) => e.job).filter((j) => HELD.has(j.state));
      const vis = held().map((j) => j.visibility);
      const period = Math.min(Math.max((vis.length ? Math.min(...vis) : 3) / 3, 0.05), 10);
      await sleep(period * 1000, done);
      if (done.aborted) return;
      const jobs = held();
      if (jobs.length === 0) continue;
      // A heartbeat waits at most a third of the shortest visibility for its answer: one a
      // server never answers must not hold the next back until the runs' deadlines pass
      // (the client's timeout is 30 s by default).
      const timeout = Math.min(Math.max(jobs.reduce((m, j) => Math.min(m, j.visibility), Infinity) / 3, 0.25), this.client.timeout);
      for (let i = 0; i < jobs.length; i += MAX_HEARTBEAT) await this.#heartbeat(jobs.slice(i, i + MAX_HEARTBEAT), timeout);
    }
  }
}
