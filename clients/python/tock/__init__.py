"""tock: a client and a reference worker for tock's HTTP API (standard library only)."""

from .client import APIError, Client
from .signature import HEADER as SIGNATURE_HEADER
from .signature import SignatureError, sign, verify_signature
from .worker import Cancel, Job, RetryAfter, Snooze, Worker

__all__ = ["APIError", "Client", "Cancel", "Job", "RetryAfter", "Snooze", "Worker", "SIGNATURE_HEADER",
           "SignatureError", "sign", "verify_signature"]
