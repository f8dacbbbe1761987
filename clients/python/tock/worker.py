"""A worker loop on tock's pull protocol: claim runs (long poll), run each handler in a
thread, heartbeat the runs in flight, then ack, fail, snooze or cancel them; stop
gracefully on SIGTERM or SIGINT."""

import base64
import json
import logging
import os
import random
import signal
import socket
import threading
import time

from ._duration import parse_duration
from .client import APIError

log = logging.getLogger("tock.worker")


class RetryAfter(Exception):
    """Raise from a handler to fail the attempt and retry after delay seconds (instead of
    the job's backoff)."""

    def __init__(self, delay, message="retry later"):
        super().__init__(message)
        self.delay = delay


class Snooze(Exception):
    """Raise from a handler to try again after delay seconds without using an attempt."""

    def __init__(self, delay):
        super().__init__("snoozed")
        self.delay = delay


class Cancel(Exception):
    """Raise from a handler to end the run cancelled: no retry."""


class Job:
    """What a handler gets: the claimed run (run, job_id, queue, type, payload, attempt,
    max_attempts, due, deadline, timeout and visibility in seconds, token) and stop, an
    Event set when the handler should give up (job cancelled, run lost, timeout, or the
    worker's grace period is over)."""

    def __init__(self, r):
        self.raw = r
        self.run = r["run"]
        self.job_id = r["job_id"]
        self.queue = r["queue"]
        self.type = r["type"]
        if "payload" in r:
            self.payload = r["payload"]
        elif "payload_base64" in r:
            self.payload = base64.b64decode(r["payload_base64"])
        else:
            self.payload = None
        self.attempt = r["attempt"]
        self.max_attempts = r["max_attempts"]
        self.due = r["due"]
        self.deadline = r["deadline"]
        self.timeout = parse_duration(r.get("timeout")) or 0
        self.visibility = parse_duration(r.get("visibility")) or 30.0
        self.token = r["token"]
        self.stop = threading.Event()
        self.state = "running"  # or "cancelled", "lost", "timeout"

    def __repr__(self):
        return "Job(%s, %s, attempt %d)" % (self.run, self.type, self.attempt)


def _default_name():
    host = "".join(c if c.isalnum() or c in "._~-" else "-" for c in socket.gethostname())[:60] or "worker"
    return "%s-py-%d-%04x" % (host, os.getpid(), random.getrandbits(16))


class Worker:
    """Worker(client, queues, handlers={type: fn}, concurrency=4, worker_name=None).

    A handler is fn(job) -> result: the result (any JSON value, or bytes) is kept with the
    run by the ack. Raising RetryAfter, Snooze or Cancel reports accordingly; any other
    exception fails the attempt (retried by the job's policy).

    wait: the claim's long poll in seconds (at most 60); a stop is noticed when the
    current claim returns, so keep it short. grace: how long a stop lets running
    handlers finish; runs still running after it are left to their visibility deadline
    (the protocol has no hand-back), and retried then.
    """

    def __init__(self, client, queues, handlers=None, concurrency=4, worker_name=None, wait=10.0, grace=30.0,
                 types=None):
        if isinstance(queues, str):
            queues = [queues]
        self.client = client
        self.queues = list(queues)
        self.handlers = dict(handlers or {})
        self.concurrency = max(1, int(concurrency))
        self.name = worker_name or _default_name()
        self.wait = wait
        self.grace = grace
        self.types = types
        self._lock = threading.Condition()
        self._inflight = {}  # run id -> Job
        self._stopping = threading.Event()
        self._done = threading.Event()

    def handle(self, type, fn=None):
        """Register fn for jobs of type; usable as a decorator: @worker.handle("mail")."""
        if fn is None:
            return lambda f: self.handle(type, f) or f
        self.handlers[type] = fn
        return fn

    def stop(self):
        """Ask the loop to stop: it claims no more and waits for running handlers."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    @property
    def inflight(self):
        with self._lock:
            return len(self._inflight)

    def run(self, install_signals=True):
        """Work until stop() or, when install_signals (main thread only), SIGTERM/SIGINT."""
        previous = {}
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, lambda *_: self.stop())
        hb = threading.Thread(target=self._heartbeat_loop, name="tock-heartbeat", daemon=True)
        hb.start()
        log.info("worker %s: claiming from %s", self.name, ",".join(self.queues))
        try:
            self._claim_loop()
            deadline = time.monotonic() + self.grace
            with self._lock:
                while self._inflight and time.monotonic() < deadline:
                    self._lock.wait(min(0.1, max(0.0, deadline - time.monotonic())))
                left = list(self._inflight.values())
            for j in left:
                log.warning("worker %s: %s still running after the grace period; left to its deadline", self.name, j)
                j.stop.set()
        finally:
            self._done.set()
            hb.join(timeout=5)
            for sig, h in previous.items():
                signal.signal(sig, h)
        log.info("worker %s: stopped", self.name)

    # -- the claim loop ----------------------------------------------------------------

    def _claim_loop(self):
        backoff = 0.1
        types = self.types if self.types is not None else sorted(self.handlers)
        while not self._stopping.is_set():
            with self._lock:
                while len(self._inflight) >= self.concurrency and not self._stopping.is_set():
                    self._lock.wait(1.0)
                free = self.concurrency - len(self._inflight)
            if self._stopping.is_set():
                return
            try:
                runs = self.client.claim(self.queues, self.name, max=free, wait=self.wait, types=types)
                backoff = 0.1
            except (APIError, OSError, ValueError) as e:
                log.warning("worker %s: claim: %s", self.name, e)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for r in runs:
                # Claimed runs are ours even when a stop came meanwhile: run them.
                j = Job(r)
                with self._lock:
                    self._inflight[j.run] = j
                threading.Thread(target=self._work, args=(j,), name="tock-" + j.run, daemon=True).start()

    # -- one run -----------------------------------------------------------------------

    def _work(self, j):
        kind, value = "ack", None
        fn = self.handlers.get(j.type)
        timer = None
        if j.timeout > 0:
            timer = threading.Timer(j.timeout, self._timed_out, args=(j,))
            timer.daemon = True
            timer.start()
        try:
            if fn is None:
                kind, value = "fail", "no handler for type %r" % j.type
            else:
                value = fn(j)
                if not isinstance(value, (bytes, bytearray)):
                    try:
                        json.dumps(value)
                    except (TypeError, ValueError) as e:
                        kind, value = "fail", "the handler's result is not JSON: %s" % e
        except RetryAfter as e:
            kind, value = "retry", e
        except Snooze as e:
            kind, value = "snooze", e.delay
        except Cancel as e:
            kind, value = "cancel", str(e)
        except Exception as e:  # noqa: BLE001 - any handler error fails the attempt
            kind, value = "fail", "%s: %s" % (type(e).__name__, e)
        finally:
            if timer:
                timer.cancel()
        try:
            self._report(j, kind, value)
        finally:
            with self._lock:
                self._inflight.pop(j.run, None)
                self._lock.notify_all()

    def _timed_out(self, j):
        with self._lock:
            if j.state != "running":
                return
            j.state = "timeout"
        j.stop.set()
        try:
            self.client.fail(j.run, j.token, "timeout: the handler ran longer than %gs" % j.timeout)
        except (APIError, OSError) as e:
            log.warning("worker %s: fail %s after its timeout: %s", self.name, j.run, e)

    def _report(self, j, kind, value):
        with self._lock:
            state = j.state
            if state == "running":
                j.state = "reported"
        if state in ("lost", "timeout", "abandoned"):
            return  # lost: another worker has it; timeout: reported already
        if state == "cancelled":
            kind, value = "cancel", "job cancelled"
        try:
            if kind == "ack":
                if isinstance(value, (bytes, bytearray)):
                    self.client.ack(j.run, j.token, result_bytes=bytes(value))
                else:
                    self.client.ack(j.run, j.token, value)
            elif kind == "retry":
                self.client.fail(j.run, j.token, str(value), retry_after=value.delay)
            elif kind == "fail":
                self.client.fail(j.run, j.token, value)
            elif kind == "snooze":
                self.client.snooze(j.run, j.token, value)
            else:
                self.client.cancel(j.run, j.token, value or None)
        except APIError as e:
            if e.status == 409:
                log.info("worker %s: %s was redelivered meanwhile; report dropped", self.name, j.run)
            else:
                log.warning("worker %s: %s %s: %s", self.name, kind, j.run, e)
        except (OSError, ValueError, TypeError) as e:  # TypeError: a result that is not JSON
            log.warning("worker %s: %s %s: %s (left to its deadline)", self.name, kind, j.run, e)

    # -- heartbeats --------------------------------------------------------------------

    def _heartbeat_loop(self):
        while not self._done.is_set():
            with self._lock:
                held = [j for j in self._inflight.values() if j.state == "running"]
            period = min([j.visibility for j in held] or [3.0]) / 3.0
            period = min(max(period, 0.05), 10.0)
            if self._done.wait(period):
                return
            with self._lock:
                held = [j for j in self._inflight.values() if j.state == "running"]
            if not held:
                continue
            try:
                states = self.client.heartbeat([(j.run, j.token) for j in held], self.name)
            except (APIError, OSError, ValueError) as e:
                log.warning("worker %s: heartbeat: %s", self.name, e)
                continue
            for j in held:
                st = states.get(j.run)
                if st in ("cancelled", "lost"):
                    with self._lock:
                        if j.state == "running":
                            j.state = st
                    j.stop.set()
