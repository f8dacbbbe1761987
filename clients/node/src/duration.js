const UNITS = { ns: 1e-9, us: 1e-6, 'µs': 1e-6, 'μs': 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 };
const PART = /([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)/y;

/** Seconds in a Go duration string ("30s", "1m30s", "250ms"); null for an empty one. */
export function parseDuration(s) {
  if (s === undefined || s === null || s === '') return null;
  s = String(s);
  const sign = s.startsWith('-') ? -1 : 1;
  const rest = s.replace(/^[+-]/, '');
  if (rest === '0') return 0;
  let total = 0;
  let pos = 0;
  while (pos < rest.length) {
    PART.lastIndex = pos;
    const m = PART.exec(rest);
    if (!m || m[1] === '' || m[1] === '.') throw new Error(`invalid duration ${JSON.stringify(s)}`);
    total += Number(m[1]) * UNITS[m[2]];
    pos = PART.lastIndex;
  }
  if (pos === 0) throw new Error(`invalid duration ${JSON.stringify(s)}`);
  return sign * total;
}

/** A Go duration string for seconds, or v itself when it is a string. */
export function formatDuration(v) {
  if (v === undefined || v === null || typeof v === 'string') return v;
  const ms = Math.round(Number(v) * 1000);
  return ms % 1000 === 0 ? `${ms / 1000}s` : `${ms}ms`;
}
