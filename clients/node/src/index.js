export { APIError, Client } from './client.js';
export { Cancel, Job, RetryAfter, Snooze, Worker } from './worker.js';
export { DEFAULT_TOLERANCE, SIGNATURE_HEADER, SignatureError, sign, verifySignature } from './signature.js';
export { formatDuration, parseDuration } from './duration.js';
