import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { SignatureError, sign, verifySignature, parseDuration, formatDuration } from '../src/index.js';

const vectors = JSON.parse(readFileSync(new URL('../../testdata/signatures.json', import.meta.url), 'utf8'));

test('sign vectors', () => {
  for (const c of vectors.sign) {
    assert.equal(sign(c.secrets, Buffer.from(c.body, 'utf8'), c.t), c.header, c.name);
    verifySignature(c.header, Buffer.from(c.body, 'utf8'), c.secrets.at(-1), { now: c.t });
  }
});

test('verify vectors', () => {
  assert.ok(vectors.verify.length > 20);
  for (const c of vectors.verify) {
    const run = () => verifySignature(c.header, Buffer.from(c.body, 'utf8'), c.secrets, { tolerance: c.tolerance_seconds, now: c.now });
    if (c.error === null) {
      assert.doesNotThrow(run, c.name);
    } else {
      assert.throws(run, (e) => e instanceof SignatureError && e.kind === c.error, c.name);
    }
  }
});

test('strings, no secret, default tolerance', () => {
  const h = sign('k', 'héllo', 1000);
  verifySignature(h, 'héllo', 'k', { now: 1000 });
  verifySignature(h, Buffer.from('héllo'), ['x', 'k'], { now: 1300 });
  assert.throws(() => verifySignature(h, 'héllo', 'k', { now: 1301 }), { kind: 'stale' });
  assert.throws(() => verifySignature(h, 'héllo', [], { now: 1000 }), { kind: 'no_secret' });
  assert.throws(() => verifySignature(undefined, 'x', 'k'), { kind: 'malformed' });
});

test('durations', () => {
  for (const [s, want] of [['30s', 30], ['1m30s', 90], ['1h0m0s', 3600], ['250ms', 0.25], ['0s', 0], ['0', 0], ['30m0s', 1800]]) {
    assert.ok(Math.abs(parseDuration(s) - want) < 1e-9, s);
  }
  for (const bad of ['s', '1x', 'abc', '1.s.']) assert.throws(() => parseDuration(bad), undefined, bad);
  assert.equal(parseDuration(''), null);
  assert.equal(formatDuration(30), '30s');
  assert.equal(formatDuration(1.5), '1500ms');
  assert.equal(formatDuration('1h'), '1h');
});
