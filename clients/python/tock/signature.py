"""Verification (and signing) of the Tock-Signature header of push deliveries.

    Tock-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>[,v1=<hex>...]

Each v1 entry is the hex HMAC-SHA256, under one of the target's secrets, of the decimal
timestamp, a dot, and the raw body bytes. While a secret is rotated the header carries one
v1 entry per active secret: a request is genuine when any entry matches any known secret.
"""

import hashlib
import hmac
import re
import time

HEADER = "Tock-Signature"
DEFAULT_TOLERANCE = 300  # seconds
MAX_HEADER = 4096

_DIGITS = re.compile(r"[0-9]{1,12}")
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


class SignatureError(Exception):
    """The header was refused; kind is "malformed", "stale", "mismatch" or "no_secret"."""

    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def _bytes(v):
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def _mac(secret, ts, body):
    return hmac.new(_bytes(secret), ts.encode("ascii") + b"." + _bytes(body), hashlib.sha256).digest()


def sign(secrets, body, timestamp=None):
    """Return a header value for body: one v1 entry per secret (a str/bytes or a list)."""
    if isinstance(secrets, (str, bytes, bytearray)):
        secrets = [secrets]
    ts = str(int(time.time() if timestamp is None else timestamp))
    return "t=" + ts + "".join(",v1=" + _mac(s, ts, body).hex() for s in secrets)


def _parse(header):
    if not isinstance(header, str) or len(header) > MAX_HEADER:
        raise SignatureError("malformed", "missing or oversized signature header")
    ts, sigs = None, []
    for item in header.split(","):
        k, sep, v = item.strip().partition("=")
        if not sep or not k:
            raise SignatureError("malformed", "entry %r is not key=value" % item)
        if k == "t":
            if ts is not None:
                raise SignatureError("malformed", "several t entries")
            if not _DIGITS.fullmatch(v):
                raise SignatureError("malformed", "t=%r is not unix seconds" % v)
            ts = v
        elif k == "v1":
            if not _HEX64.fullmatch(v):
                raise SignatureError("malformed", "v1=%r is not 64 hex digits" % v)
            sigs.append(bytes.fromhex(v))
    if ts is None:
        raise SignatureError("malformed", "no t entry")
    if not sigs:
        raise SignatureError("malformed", "no v1 entry")
    return ts, sigs


def verify_signature(header, body, secrets, tolerance=DEFAULT_TOLERANCE, now=None):
    """Check a Tock-Signature header against the raw body bytes.

    secrets: the target's secret, or a list of them (two while rotating). Raises
    SignatureError when the header is malformed, its timestamp is more than tolerance
    seconds from now (past or future), or no v1 entry matches; returns None otherwise.
    Compares in constant time (hmac.compare_digest).
    """
    ts, sigs = _parse(header)
    if isinstance(secrets, (str, bytes, bytearray)):
        secrets = [secrets]
    secrets = [s for s in (secrets or []) if s]  # unset secrets (an old one gone) are skipped
    if not secrets:
        raise SignatureError("no_secret", "no secret to verify with")
    now = int(time.time() if now is None else now)
    if tolerance is None or tolerance <= 0:
        tolerance = DEFAULT_TOLERANCE
    if abs(now - int(ts)) > tolerance:
        raise SignatureError("stale", "signature timestamp %s is %ds from now" % (ts, now - int(ts)))
    ok = False
    for s in secrets:
        want = _mac(s, ts, body)
        for got in sigs:
            ok |= hmac.compare_digest(want, got)
    if not ok:
        raise SignatureError("mismatch", "no signature matches")
