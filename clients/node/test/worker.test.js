import { test, beforeEach, afterEach } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { APIError, Cancel, Client, RetryAfter, Snooze, Worker } from '../src/index.js';

const TOKEN = 'worker-secret-0123';
const quiet = { info() {}, warn() {} };
const TOO_LARGE = '70000 bytes is over the limit of 65536 bytes';

// fakeTock stands in for tock's run endpoints.
async function fakeTock() {
  // batch: whether POST /v1/runs:ack and :fail exist (else 404, as an older server).
  // tooLarge: runs whose acks get 413 (the result over the server's limit).
  // unavailable: the next reports answered 503 (not recorded), as a server restarting.
  // cut: path -> how many of its next calls get a reply cut short (a server killed while
  // it answered; not recorded).
  // unavailableStatus: what the unavailable reports get (503, or 500: Redis failed).
  // shardDown: run -> how many of the next batch reports naming it answer it 503 in the
  // batch's reply (Redis failed for its shard), the other runs 200.
  const f = { ready: [], calls: [], hb: {}, conflict: new Set(), tooLarge: new Set(), waiters: [], batch: true, unavailable: 0,
    unavailableStatus: 503, cut: {}, shardDown: {}, hang: {}, maxBody: null };
  const changed = () => f.waiters.splice(0).forEach((w) => w());
  f.server = createServer((req, res) => {
    let data = '';
    req.on('data', (c) => (data += c));
    req.on('end', async () => {
      const reply = (status, obj) => {
        res.writeHead(status, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(obj));
      };
      if (req.headers.authorization !== `Bearer ${TOKEN}`) return reply(401, { error: { code: 'unauthenticated', message: 'no' } });
      if (f.maxBody !== null && Buffer.byteLength(data) > f.maxBody) {
        return reply(413, { error: { code: 'too_large', message: `the request body is over the limit of ${f.maxBody} bytes` } });
      }
      if (f.redirect) {
        res.writeHead(302, { Location: f.redirect, 'Content-Length': '0' });
        return res.end();
      }
      const body = JSON.parse(data || 'null');
      // The server's limits: at most 1000 runs a claim and a heartbeat.
      if (req.url === '/v1/runs:claim' && !(body.max >= 1 && body.max <= 1000)) {
        return reply(400, { error: { code: 'invalid_argument', field: 'max', message: `must be 1 to 1000, got ${body.max}` } });
      }
      if (req.url === '/v1/runs:heartbeat' && body.runs.length > 1000) {
        return reply(400, { error: { code: 'invalid_argument', field: 'runs', message: 'more than 1000 runs' } });
      }
      if (f.unavailable > 0 && req.url !== '/v1/runs:claim' && req.url !== '/v1/runs:heartbeat') {
        f.unavailable--;
        return reply(f.unavailableStatus, { error: { code: 'unavailable', message: 'restarting' } });
      }
      if (f.hang[req.url] > 0) {
        f.hang[req.url]--; // a server that took the call and never answers
        return;
      }
      if (f.cut[req.url] > 0) {
        f.cut[req.url]--;
        res.writeHead(200, { 'Content-Type': 'application/json', 'Content-Length': '100' });
        res.write('{"runs": [');
        setTimeout(() => res.socket?.destroy(), 10);
        return;
      }
      f.calls.push([req.url, body]);
      changed();
      if (req.url === '/v1/runs:claim') {
        if (f.ready.length === 0) await new Promise((r) => setTimeout(r, 100));
        return reply(200, { runs: f.ready.splice(0, body.max) });
      }
      if (req.url === '/v1/runs:heartbeat') {
        return reply(200, { runs: body.runs.map((r) => ({ run: r.run, state: f.hb[r.run] ?? 'extended' })) });
      }
      if (req.url === '/v1/runs:ack' || req.url === '/v1/runs:fail') {
        if (!f.batch) return reply(404, { error: { code: 'not_found', message: `no route for ${req.url}` } });
        const ack = req.url === '/v1/runs:ack';
        const runs = body.runs.map((r) => {
          if (f.shardDown[r.run] > 0) {
            f.shardDown[r.run]--;
            return { run: r.run, status: 503, error: { code: 'unavailable', message: 'redis did not answer in time' } };
          }
          if (f.conflict.has(r.run)) return { run: r.run, status: 409, error: { code: 'token_mismatch', message: 'not held' } };
          if (ack && f.tooLarge.has(r.run)) return { run: r.run, status: 413, error: { code: 'too_large', message: TOO_LARGE, field: 'runs[0].result' } };
          return { run: r.run, status: 200, outcome: ack ? 'ok' : 'error' };
        });
        return reply(200, { runs, done: runs.filter((r) => r.status === 200).length, refused: runs.filter((r) => r.status !== 200).length });
      }
      const path = decodeURIComponent(req.url.slice('/v1/runs/'.length));
      const i = path.lastIndexOf(':');
      if (f.conflict.has(path.slice(0, i))) return reply(409, { error: { code: 'token_mismatch', message: 'not held' } });
      if (path.slice(i + 1) === 'ack' && f.tooLarge.has(path.slice(0, i))) return reply(413, { error: { code: 'too_large', message: TOO_LARGE, field: 'result' } });
      reply(200, { run: path.slice(0, i), outcome: path.slice(i + 1) });
    });
  });
  await new Promise((r) => f.server.listen(0, '127.0.0.1', r));
  f.url = `http://127.0.0.1:${f.server.address().port}`;
  f.add = (id, type, payload, { visibility = '30s', timeout = '30m0s' } = {}) => {
    const r = { run: `${id}:1764000000000`, job_id: id, queue: 'q', type, attempt: 1, max_attempts: 3,
      due: '2025-11-24T16:00:00Z', deadline: '2025-11-24T16:00:30Z', timeout, visibility, token: `1-${id}` };
    if (payload !== undefined) r.payload = payload;
    f.ready.push(r);
    return r.run;
  };
  // Reports by "<run>:<verb>" with their bodies (a batch's runs as single calls').
  f.reports = () => {
    const out = {};
    for (const [p, b] of f.calls) {
      if (p.startsWith('/v1/runs/')) out[decodeURIComponent(p.slice(9))] = b;
      else if (f.batch && (p === '/v1/runs:ack' || p === '/v1/runs:fail')) {
        for (const { run, ...rest } of b.runs) out[`${run}:${p.slice(p.lastIndexOf(':') + 1)}`] = rest;
      }
    }
    return out;
  };
  f.batchCalls = (path = '/v1/runs:ack') => f.calls.filter(([p]) => p === path).map(([, b]) => b);
  f.waitFor = async (cond, ms = 10000) => {
    const end = Date.now() + ms;
    while (!cond()) {
      if (Date.now() > end) throw new Error(`condition not met; calls: ${JSON.stringify(f.calls)}`);
      await new Promise((r) => { f.waiters.push(r); setTimeout(r, 20); });
    }
  };
  return f;
}

let fake;
let stops;
beforeEach(async () => {
  fake = await fakeTock();
  stops = [];
});
afterEach(async () => {
  for (const s of stops) await s();
  fake.server.closeAllConnections?.();
  await new Promise((r) => fake.server.close(r));
});

function start(handlers, opts = {}) {
  const w = new Worker(new Client(fake.url, TOKEN, { timeout: 5 }), ['q'], { handlers, workerName: 'node-test', wait: 0.2, grace: 2, logger: quiet, ...opts });
  const running = w.run({ signals: false });
  const stop = async () => { w.stop(); await running; };
  stops.push(stop);
  return { w, stop };
}

test('outcomes', async () => {
  const ids = {
    a: fake.add('a', 'echo', { x: 1 }), b: fake.add('b', 'boom'), c: fake.add('c', 'later'), d: fake.add('d', 'snooze'),
    e: fake.add('e', 'cancel'), f: fake.add('f', 'unknown'), g: fake.add('g', 'bytes'), h: fake.add('h', 'odd'),
  };
  start({
    echo: async (j) => ({ echo: j.payload, attempt: j.attempt }),
    boom: () => { throw new TypeError('bad input'); },
    later: () => { throw new RetryAfter(90, 'rate limited'); },
    snooze: () => { throw new Snooze(3600); },
    cancel: () => { throw new Cancel('address bounced'); },
    bytes: () => Buffer.from([0, 1]),
    odd: () => 10n,
  }, { concurrency: 3 });
  await fake.waitFor(() => Object.keys(fake.reports()).length === 8);
  const rep = fake.reports();
  assert.deepEqual(rep[`${ids.a}:ack`], { token: '1-a', result: { echo: { x: 1 }, attempt: 1 } });
  assert.deepEqual(rep[`${ids.b}:fail`], { token: '1-b', error: 'TypeError: bad input' });
  assert.deepEqual(rep[`${ids.c}:fail`], { token: '1-c', error: 'rate limited', retry_after: '90s' });
  assert.deepEqual(rep[`${ids.d}:snooze`], { token: '1-d', delay: '3600s' });
  assert.deepEqual(rep[`${ids.e}:cancel`], { token: '1-e', error: 'address bounced' });
  assert.match(rep[`${ids.f}:fail`].error, /no handler/);
  assert.deepEqual(rep[`${ids.g}:ack`], { token: '1-g', result_base64: 'AAE=' });
  assert.match(rep[`${ids.h}:fail`].error, /not JSON/);
  const claims = fake.calls.filter(([p]) => p === '/v1/runs:claim').map(([, b]) => b);
  assert.equal(claims[0].worker, 'node-test');
  assert.equal(claims[0].wait, '200ms');
  assert.deepEqual(claims[0].types, ['boom', 'bytes', 'cancel', 'echo', 'later', 'odd', 'snooze']);
  assert.ok(claims.every((c) => c.max >= 1 && c.max <= 3));
});

test('anything thrown fails the run', async () => {
  // A handler that threw a Symbol or an object with no toString made the error message's
  // template literal throw: the run was never reported, and the rejection, which nothing
  // handled, ended the process with every run it held.
  const ids = { s: fake.add('s', 'sym'), o: fake.add('o', 'bare'), n: fake.add('n', 'null') };
  const { w } = start({
    sym: () => { throw Symbol('boom'); },
    bare: () => { throw Object.create(null); },
    null: () => { throw null; }, // eslint-disable-line no-throw-literal
  }, { concurrency: 3 });
  await fake.waitFor(() => Object.keys(fake.reports()).length === 3);
  assert.deepEqual(fake.reports()[`${ids.s}:fail`], { token: '1-s', error: 'Error: Symbol(boom)' });
  assert.match(fake.reports()[`${ids.o}:fail`].error, /^Error: /);
  assert.deepEqual(fake.reports()[`${ids.n}:fail`], { token: '1-n', error: 'Error: null' });
  await fake.waitFor(() => w.inflight.size === 0);
});

test('error messages are cut to what the server keeps', async () => {
  // The server keeps 2,048 bytes of an error; the worker sent it whole: megabytes for an
  // error holding a response body, and over the server's body limit (64 MiB by default)
  // the report was refused (413) and the run left to its deadline.
  const run = fake.add('big', 'big');
  start({ big: () => { throw new Error('\u00e9'.repeat(1000000)); } });
  await fake.waitFor(() => `${run}:fail` in fake.reports());
  const sent = fake.reports()[`${run}:fail`].error;
  assert.ok(Buffer.byteLength(sent) <= 2048 && Buffer.byteLength(sent) > 2040, `${Buffer.byteLength(sent)} bytes`);
  assert.equal(sent, `Error: ${'\u00e9'.repeat(1000000)}`.slice(0, sent.length));
});

test('settings the server refuses are refused at once', () => {
  // A worker whose every claim the server refuses (wait over 60 s, a queue listed twice,
  // more than 64 queues) logged the 400 and tried again for ever, running nothing; a
  // concurrency of Infinity ran one run at a time. Each is refused when the worker is
  // made, naming the setting.
  const client = new Client(fake.url, TOKEN, { timeout: 5 });
  const bad = [
    [[], {}, 'queues'],
    [['q', 'q'], {}, 'queues'],
    [Array.from({ length: 65 }, (_, i) => `q${i}`), {}, 'queues'],
    [['q', ''], {}, 'queues'],
    [['q'], { wait: 61 }, 'wait'],
    [['q'], { wait: -1 }, 'wait'],
    [['q'], { wait: NaN }, 'wait'],
    [['q'], { concurrency: 0 }, 'concurrency'],
    [['q'], { concurrency: Infinity }, 'concurrency'],
    [['q'], { concurrency: 2.5 }, 'concurrency'],
    [['q'], { grace: -1 }, 'grace'],
    [['q'], { types: Array.from({ length: 257 }, (_, i) => `t${i}`) }, 'types'],
    [['q'], { types: [''] }, 'types'],
  ];
  for (const [queues, opts, name] of bad) {
    assert.throws(() => new Worker(client, queues, { logger: quiet, ...opts }), (e) => e instanceof RangeError && e.message.includes(name),
      JSON.stringify({ queues, opts }));
  }
  new Worker(client, 'q', { wait: 60, concurrency: 1000, grace: 0, logger: quiet });
});

test('heartbeats, then a cancelled job ends cancelled', async () => {
  let release;
  const released = new Promise((r) => (release = r));
  let aborted = false;
  const run = fake.add('slow', 'slow', undefined, { visibility: '300ms' });
  start({ slow: async (j) => { await new Promise((r) => j.signal.addEventListener('abort', r)); aborted = true; await released; return 'done'; } });
  await fake.waitFor(() => fake.calls.filter(([p]) => p === '/v1/runs:heartbeat').length >= 2);
  assert.deepEqual(fake.calls.find(([p]) => p === '/v1/runs:heartbeat')[1], { runs: [{ run, token: '1-slow' }], worker: 'node-test' });
  fake.hb[run] = 'cancelled';
  await fake.waitFor(() => aborted);
  release();
  await fake.waitFor(() => `${run}:cancel` in fake.reports());
});

test('sleeps leave no listener behind', async () => {
  // Each heartbeat period's sleep (and each claim's backoff) added an abort listener to a
  // signal that lives as long as the worker and never removed it: a worker heartbeating
  // every 10 s gathered 8,640 a day, every 333 ms 260,000 (MaxListenersExceededWarning).
  const warnings = [];
  const onWarning = (w) => warnings.push(w);
  process.on('warning', onWarning);
  try {
    const run = fake.add('long', 'slow', undefined, { visibility: '150ms' });
    fake.unavailable = 0;
    const { w, stop } = start({ slow: async () => { await new Promise((r) => setTimeout(r, 2000)); return 1; } });
    await fake.waitFor(() => `${run}:ack` in fake.reports());
    assert.ok(fake.calls.filter(([p]) => p === '/v1/runs:heartbeat').length >= 12);
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
    await new Promise((r) => setImmediate(r));
  } finally {
    process.off('warning', onWarning);
  }
  assert.deepEqual(warnings.filter((w) => w.name === 'MaxListenersExceededWarning').map(String), []);
});

test('a lost run is not reported', async () => {
  const run = fake.add('lost', 'slow', undefined, { visibility: '300ms' });
  fake.hb[run] = 'lost';
  const { w, stop } = start({ slow: (j) => new Promise((r) => j.signal.addEventListener('abort', r)) });
  await fake.waitFor(() => fake.calls.some(([p]) => p === '/v1/runs:heartbeat'));
  await fake.waitFor(() => w.inflight.size === 0);
  await stop();
  assert.deepEqual(fake.reports(), {});
});

test('a handler past its timeout fails the run', async () => {
  const run = fake.add('t', 'slow', undefined, { timeout: '200ms' });
  start({ slow: (j) => new Promise((r) => j.signal.addEventListener('abort', r)) });
  await fake.waitFor(() => `${run}:fail` in fake.reports());
  assert.match(fake.reports()[`${run}:fail`].error, /timeout/);
});

test('a timeout longer than 24.8 days is not taken for 1 ms', async () => {
  // setTimeout takes at most 2^31-1 ms and fires after 1 ms past it: a job whose timeout
  // was 720h had its handler aborted and its run failed at once ("timeout").
  const run = fake.add('long', 'slow', undefined, { timeout: '720h0m0s' });
  let aborted = false;
  start({ slow: async (j) => { await new Promise((r) => setTimeout(r, 300)); aborted = j.signal.aborted; return 1; } });
  await fake.waitFor(() => Object.keys(fake.reports()).length > 0);
  assert.deepEqual(fake.reports(), { [`${run}:ack`]: { token: '1-long', result: 1 } });
  assert.equal(aborted, false);
});

test('stop lets running handlers finish', async () => {
  let started;
  const isStarted = new Promise((r) => (started = r));
  const run = fake.add('s', 'slow');
  const { w, stop } = start({ slow: async () => { started(); await new Promise((r) => setTimeout(r, 300)); return 1; } }, { grace: 10 });
  await isStarted;
  w.stop();
  await stop();
  assert.deepEqual(fake.reports()[`${run}:ack`], { token: '1-s', result: 1 });
});

test('stop hands back runs still running after the grace period', async () => {
  // A run still running after the grace period was left to its visibility deadline: taken
  // for lost then, with an attempt used (a job of one attempt dead at every deploy). The
  // Go worker hands such a run back, ready at once with no attempt used; the protocol's
  // snooze of 0s does that.
  let started;
  const isStarted = new Promise((r) => (started = r));
  let release;
  const released = new Promise((r) => (release = r));
  const run = fake.add('stubborn', 'slow');
  const { stop } = start({ slow: async () => { started(); await released; return 'late'; } }, { grace: 0.3 });
  await isStarted;
  await stop();
  assert.deepEqual(fake.reports(), { [`${run}:snooze`]: { token: '1-stubborn', delay: '0s' } });
  release(); // the handler returns after the hand-back: nothing more is reported
  await new Promise((r) => setTimeout(r, 300));
  assert.deepEqual(Object.keys(fake.reports()), [`${run}:snooze`]);
});

test('a 409 report is dropped', async () => {
  const run = fake.add('late', 'echo');
  fake.conflict.add(run);
  const { w } = start({ echo: () => 1 });
  await fake.waitFor(() => `${run}:ack` in fake.reports());
  await fake.waitFor(() => w.inflight.size === 0);
});

test('acks go in batches', async () => {
  const n = 30;
  const ids = Array.from({ length: n }, (_, i) => fake.add(`b${i}`, 'echo'));
  fake.conflict.add(ids[7]);
  const { w } = start({ echo: async (j) => j.jobId }, { concurrency: n });
  await fake.waitFor(() => ids.every((id) => `${id}:ack` in fake.reports()));
  await fake.waitFor(() => w.inflight.size === 0);
  const calls = fake.batchCalls();
  assert.ok(calls.length < n, `some acks went together (${calls.length} calls)`);
  assert.ok(!fake.calls.some(([p]) => p.startsWith('/v1/runs/')), 'no single acks');
  assert.deepEqual(calls.flatMap((b) => b.runs.map((r) => r.run)).sort(), [...ids].sort(), 'each run acked once');
  assert.deepEqual(fake.reports()[`${ids[3]}:ack`], { token: '1-b3', result: 'b3' });
});

test('acks without the batch endpoint', async () => {
  fake.batch = false;
  const ids = Array.from({ length: 5 }, (_, i) => fake.add(`o${i}`, 'echo'));
  const { w } = start({ echo: () => 1 }, { concurrency: 5 });
  await fake.waitFor(() => ids.every((id) => `${id}:ack` in fake.reports()));
  await fake.waitFor(() => w.inflight.size === 0);
  assert.deepEqual(fake.reports()[`${ids[0]}:ack`], { token: '1-o0', result: 1 });
});

test('an ack refused for its result fails the run', async () => {
  // A 413 leaves the run held: it is failed with why, not left to its deadline to be
  // taken for lost.
  for (const batchAcks of [true, false]) {
    const run = fake.add(`big-${batchAcks}`, 'echo');
    fake.tooLarge.add(run);
    const { w, stop } = start({ echo: () => 'x'.repeat(70000) }, { batchAcks });
    await fake.waitFor(() => `${run}:fail` in fake.reports());
    assert.match(fake.reports()[`${run}:fail`].error, /over the limit/);
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
  }
});

test('reports are retried while the server is unavailable', async () => {
  // A 503 (a server restarting) is tried again, as the Go worker does; before, the report
  // was given up and its run left to its deadline, to be run again.
  for (const batchAcks of [true, false]) {
    const run = fake.add(`u-${batchAcks}`, 'echo');
    fake.unavailable = 2;
    const { w, stop } = start({ echo: () => undefined }, { batchAcks });
    await fake.waitFor(() => `${run}:ack` in fake.reports());
    assert.equal(fake.unavailable, 0);
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
  }
});

test('a report whose reply was cut short is sent again', async () => {
  // A reply cut short (a server killed while it answered) fails fetch's body read with
  // TypeError('terminated'), which was not taken for a network error: the report was
  // given up and its run left to its deadline, to be run again.
  for (const batchAcks of [true, false]) {
    const run = fake.add(`cut-${batchAcks}`, 'echo');
    fake.cut = { '/v1/runs:claim': 1, '/v1/runs:heartbeat': 1, '/v1/runs:ack': 1, [`/v1/runs/${run}:ack`]: 1 };
    const { w, stop } = start({ echo: () => 7 }, { batchAcks });
    await fake.waitFor(() => `${run}:ack` in fake.reports());
    assert.deepEqual(fake.reports()[`${run}:ack`], { token: `1-cut-${batchAcks}`, result: 7 });
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
  }
});

test('reports refused for Redis are sent again', async () => {
  // A run of a batch answered 503 (Redis failed for its shard: still held, safe to report
  // again, docs/executors.md), and a single report answered 500 (a store call that
  // failed), were given up, as the Go worker does not: its run was left to its deadline
  // and run again.
  const run = fake.add('shard-down', 'echo');
  fake.shardDown[run] = 2;
  const first = start({ echo: () => 5 });
  await fake.waitFor(() => fake.batchCalls().flatMap((b) => b.runs).filter((r) => r.run === run).length === 3);
  await fake.waitFor(() => first.w.inflight.size === 0);
  await first.stop();
  assert.equal(fake.shardDown[run], 0);
  for (const batchAcks of [true, false]) {
    const r = fake.add(`redis-down-${batchAcks}`, batchAcks ? 'boom' : 'echo');
    fake.unavailable = 2;
    fake.unavailableStatus = 500;
    const { w, stop } = start({ echo: () => 1, boom: () => { throw new Error('boom'); } }, { batchAcks });
    await fake.waitFor(() => `${r}:${batchAcks ? 'fail' : 'ack'}` in fake.reports());
    assert.equal(fake.unavailable, 0);
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
  }
});

test('binary results of every kind are kept as bytes', async () => {
  // An ArrayBuffer (what fetch's arrayBuffer() gives) or a DataView was not taken for
  // bytes: JSON.stringify made it {}, and the run succeeded with {} for its result.
  const ids = { ab: fake.add('ab', 'ab'), dv: fake.add('dv', 'dv'), u16: fake.add('u16', 'u16') };
  start({
    ab: () => new Uint8Array([0, 1, 255]).buffer,
    dv: () => new DataView(new Uint8Array([9, 0, 1, 255, 9]).buffer, 1, 3),
    u16: () => new Uint16Array([0x0100]),
  }, { concurrency: 3 });
  await fake.waitFor(() => Object.keys(fake.reports()).length === 3);
  for (const id of ['ab', 'dv']) assert.deepEqual(fake.reports()[`${ids[id]}:ack`], { token: `1-${id}`, result_base64: 'AAH/' }, id);
  assert.deepEqual(fake.reports()[`${ids.u16}:ack`], { token: '1-u16', result_base64: 'AAE=' });
  const c = new Client(fake.url, TOKEN);
  await c.ackMany([{ run: 'x:1', token: 't1', result: new Uint8Array([0]).buffer }]);
  assert.deepEqual(fake.batchCalls().at(-1), { runs: [{ run: 'x:1', token: 't1', result_base64: 'AA==' }] });
  await c.ack('x:2', 't2', new Uint8Array([0]).buffer);
  assert.deepEqual(fake.reports()['x:2:ack'], { token: 't2', result_base64: 'AA==' });
});

test('more than a thousand runs at once', async () => {
  // The server takes at most 1000 runs in a claim (max) and in a heartbeat: a worker with
  // a concurrency over 1000 had every claim refused (400) and ran nothing, and one holding
  // over 1000 runs had every heartbeat refused: all lost at their deadline.
  const n = 1001;
  let release;
  const released = new Promise((r) => (release = r));
  const ids = new Set(Array.from({ length: n }, (_, i) => fake.add(`m${i}`, 'slow', undefined, { visibility: '900ms' })));
  const { w } = start({ slow: async () => { await released; return 1; } }, { concurrency: n + 10 });
  await fake.waitFor(() => w.inflight.size === n, 20000);
  const beat = new Set();
  await fake.waitFor(() => {
    for (const [p, b] of fake.calls) if (p === '/v1/runs:heartbeat') for (const r of b.runs) beat.add(r.run);
    return beat.size === n;
  });
  release();
  await fake.waitFor(() => [...ids].every((id) => `${id}:ack` in fake.reports()), 20000);
});

test('runs are heartbeated until reported', async () => {
  // A run whose report waited (queued behind an ack call, or tried again while the server
  // was unavailable) was no longer heartbeated: one of a short visibility was lost at its
  // deadline meanwhile and run again. The Go worker heartbeats a run until its report is
  // sent.
  for (const batchAcks of [true, false]) {
    const run = fake.add(`hb-${batchAcks}`, 'echo', undefined, { visibility: '300ms' });
    fake.unavailable = 6; // about 1.5 s
    fake.unavailableStatus = 503;
    const { w, stop } = start({ echo: () => 1 }, { batchAcks });
    await fake.waitFor(() => `${run}:ack` in fake.reports());
    const beats = fake.calls.filter(([p]) => p === '/v1/runs:heartbeat').flatMap(([, b]) => b.runs).filter((r) => r.run === run).length;
    assert.ok(beats >= 4, `${beats} heartbeats while the ack was tried again`);
    await fake.waitFor(() => w.inflight.size === 0);
    await stop();
  }
});

test('a heartbeat never answered does not hold the others back', async () => {
  // A heartbeat waited for its answer as long as the client's timeout (30 s by default, 5 s
  // here): one call a server took and never answered held the next heartbeats back, and
  // every run of a shorter visibility was lost meanwhile. A heartbeat waits a third of the
  // shortest visibility at most.
  let release;
  const released = new Promise((r) => (release = r));
  const run = fake.add('hang', 'slow', undefined, { visibility: '1200ms' });
  fake.hang['/v1/runs:heartbeat'] = 1;
  start({ slow: async () => { await released; return 1; } });
  await fake.waitFor(() => fake.calls.filter(([p]) => p === '/v1/runs:heartbeat').length >= 3, 3000);
  release();
  await fake.waitFor(() => `${run}:ack` in fake.reports());
});

test('a batch over the body limit is split', async () => {
  // A batch ack over the server's body limit (64 MiB by default: a thousand results of 64
  // KiB, base64-encoded) was refused whole (413) and every run in it left to its deadline,
  // to be run again. It is split until its parts fit.
  fake.maxBody = 100000;
  let release;
  const released = new Promise((r) => (release = r));
  const ids = Array.from({ length: 8 }, (_, i) => fake.add(`s${i}`, 'big'));
  const { w } = start({ big: async () => { await released; return Buffer.alloc(30000); } }, { concurrency: 8 });
  await fake.waitFor(() => w.inflight.size === 8);
  release();
  await fake.waitFor(() => ids.every((id) => `${id}:ack` in fake.reports()));
  await fake.waitFor(() => w.inflight.size === 0);
  assert.ok(fake.batchCalls().length > 1 && fake.batchCalls().every((b) => b.runs.length <= 2), JSON.stringify(fake.batchCalls().map((b) => b.runs.length)));
});

test('single acks', async () => {
  const run = fake.add('s1', 'echo');
  start({ echo: () => undefined }, { batchAcks: false });
  await fake.waitFor(() => `${run}:ack` in fake.reports());
  assert.deepEqual(fake.batchCalls(), []);
  assert.deepEqual(fake.reports()[`${run}:ack`], { token: '1-s1' });
});

test('ackMany and failMany', async () => {
  const c = new Client(fake.url, TOKEN);
  fake.conflict.add('x:2');
  const got = await c.ackMany([{ run: 'x:1', token: 't1', result: { a: 1 } }, { run: 'x:2', token: 't2', result: Buffer.from([0]) }]);
  assert.deepEqual(got.map((r) => r.status), [200, 409]);
  assert.deepEqual(fake.batchCalls().at(-1), { runs: [{ run: 'x:1', token: 't1', result: { a: 1 } }, { run: 'x:2', token: 't2', result_base64: 'AA==' }] });
  const failed = await c.failMany([{ run: 'x:1', token: 't1', error: 'boom', retryAfter: 90 }]);
  assert.equal(failed[0].outcome, 'error');
  assert.deepEqual(fake.batchCalls('/v1/runs:fail').at(-1), { runs: [{ run: 'x:1', token: 't1', error: 'boom', retry_after: '90s' }] });
});

test('the token is not shown nor sent where a redirect points', async () => {
  // The token was a public property: console.log(client), or of a worker, or
  // JSON.stringify printed it. And a redirect was followed (a POST turned into a GET).
  const c = new Client(fake.url, TOKEN);
  const w = new Worker(c, ['q'], { logger: quiet });
  const { inspect } = await import('node:util');
  for (const shown of [inspect(c), inspect(w, { depth: 5 }), JSON.stringify(c), JSON.stringify(w)]) assert.ok(!shown.includes(TOKEN), shown);
  const seen = [];
  const other = createServer((req, res) => { seen.push(req.headers.authorization); res.writeHead(200, { 'Content-Type': 'application/json' }); res.end('{"runs": []}'); });
  await new Promise((r) => other.listen(0, '127.0.0.1', r));
  try {
    fake.redirect = `http://127.0.0.1:${other.address().port}/elsewhere`;
    await assert.rejects(c.claim(['q'], 'w'), (e) => e instanceof APIError && e.status === 302 && !String(e).includes(TOKEN));
    assert.deepEqual(seen, []);
  } finally {
    other.closeAllConnections?.();
    await new Promise((r) => other.close(r));
  }
});

test('a wait or timeout of any fraction of a second', async () => {
  // AbortSignal.timeout takes whole milliseconds only: a claim whose timeout came to
  // 32200.000000000004 ms (the default 30 s and a wait of 2.2 s) threw a RangeError, so a
  // worker with that wait never claimed anything.
  const c = new Client(fake.url, TOKEN, { timeout: 30 });
  fake.add('w', 'echo');
  assert.equal((await c.claim(['q'], 'w', { wait: 2.2 })).length, 1);
  assert.deepEqual(await new Client(fake.url, TOKEN, { timeout: 2.01 }).heartbeat([{ run: 'w:1764000000000', token: 't' }], 'w'), { 'w:1764000000000': 'extended' });
});

test('API errors', async () => {
  const c = new Client(fake.url, 'wrong-token-000000');
  await assert.rejects(c.claim(['q'], 'w'), (e) => e instanceof APIError && e.status === 401 && e.code === 'unauthenticated');
});
