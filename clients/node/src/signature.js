// Verification (and signing) of the Tock-Signature header of push deliveries:
//
//   Tock-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=<hex>...]
//
// Each v1 entry is the hex HMAC-SHA256, under one of the target's secrets, of the decimal
// timestamp, a dot, and the raw body bytes. While a secret is rotated the header carries
// one v1 entry per active secret: a request is genuine when any entry matches any secret.
import { createHmac, timingSafeEqual } from 'node:crypto';

export const SIGNATURE_HEADER = 'Tock-Signature';
export const DEFAULT_TOLERANCE = 300; // seconds
export const MAX_HEADER = 4096;

/** The header was refused: kind is "malformed", "stale", "mismatch" or "no_secret". */
export class SignatureError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'SignatureError';
    this.kind = kind;
  }
}

const toBuf = (v) => (typeof v === 'string' ? Buffer.from(v, 'utf8') : Buffer.from(v));
const mac = (secret, ts, body) =>
  createHmac('sha256', toBuf(secret)).update(`${ts}.`, 'ascii').update(toBuf(body)).digest();

/** A header value for body sent at timestamp (unix seconds; default now), one v1 per secret. */
export function sign(secrets, body, timestamp) {
  const list = Array.isArray(secrets) ? secrets : [secrets];
  const ts = String(Math.floor(timestamp ?? Date.now() / 1000));
  return `t=${ts}` + list.map((s) => `,v1=${mac(s, ts, body).toString('hex')}`).join('');
}

function parse(header) {
  if (typeof header !== 'string' || header.length > MAX_HEADER) {
    throw new SignatureError('malformed', 'missing or oversized signature header');
  }
  let ts = null;
  const sigs = [];
  for (const item of header.split(',')) {
    const s = item.trim();
    const eq = s.indexOf('=');
    if (eq <= 0) throw new SignatureError('malformed', `entry ${JSON.stringify(item)} is not key=value`);
    const k = s.slice(0, eq);
    const v = s.slice(eq + 1);
    if (k === 't') {
      if (ts !== null) throw new SignatureError('malformed', 'several t entries');
      if (!/^[0-9]{1,12}$/.test(v)) throw new SignatureError('malformed', `t=${JSON.stringify(v)} is not unix seconds`);
      ts = v;
    } else if (k === 'v1') {
      // Buffer.from(hex) stops at the first bad digit: check the form first.
      if (!/^[0-9a-fA-F]{64}$/.test(v)) throw new SignatureError('malformed', `v1=${JSON.stringify(v)} is not 64 hex digits`);
      sigs.push(Buffer.from(v, 'hex'));
    }
  }
  if (ts === null) throw new SignatureError('malformed', 'no t entry');
  if (sigs.length === 0) throw new SignatureError('malformed', 'no v1 entry');
  return { ts, sigs };
}

/**
 * Check a Tock-Signature header against the raw body (a Buffer, or a string taken as
 * UTF-8). secrets: the target's secret or a list of them (two while rotating). Throws a
 * SignatureError when the header is malformed, its timestamp is more than tolerance
 * seconds from now (past or future), or no v1 entry matches. Compares with
 * crypto.timingSafeEqual.
 */
export function verifySignature(header, body, secrets, { tolerance = DEFAULT_TOLERANCE, now } = {}) {
  const { ts, sigs } = parse(header);
  // Unset secrets (an old one no longer configured) are skipped.
  const list = (Array.isArray(secrets) ? secrets : [secrets]).filter((s) => s != null && s.length > 0);
  if (list.length === 0) throw new SignatureError('no_secret', 'no secret to verify with');
  const nowS = Math.floor(now ?? Date.now() / 1000);
  if (!(tolerance > 0)) tolerance = DEFAULT_TOLERANCE;
  const d = nowS - Number(ts);
  if (Math.abs(d) > tolerance) throw new SignatureError('stale', `signature timestamp ${ts} is ${d}s from now`);
  let ok = false;
  for (const s of list) {
    const want = mac(s, ts, body);
    for (const got of sigs) ok = timingSafeEqual(want, got) || ok;
  }
  if (!ok) throw new SignatureError('mismatch', 'no signature matches');
}
