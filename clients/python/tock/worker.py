"""A worker loop on tock's pull protocol: claim runs (long poll), run each handler in a
thread, heartbeat the runs in flight, then ack, fail, snooze or cancel them (the acks of
runs that finish together go in one call); stop gracefully on SIGTERM or SIGINT."""

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

# The most runs one batch ack (POST /v1/runs:ack) carries, one claim asks for and one
# heartbeat extends: the server's limits. A worker with more runs at once (concurrency)
# claims and heartbeats them in several calls.
MAX_ACK_BATCH = 1000
MAX_CLAIM = 1000
MAX_HEARTBEAT = 1000

# What else the server refuses in every claim (ingest.MaxClaimQueues, MaxClaimTypes and
# MaxClaimWait): a worker with such settings would log the refusal and claim again for
# ever, so Worker refuses them when it is made (_check_settings).
MAX_CLAIM_QUEUES = 64
MAX_CLAIM_TYPES = 256
MAX_CLAIM_WAIT = 60.0

# How long a report (ack, fail, snooze, cancel) is tried again after a network error or
# a 500, 502, 503 or 504 (a server restarting, out of memory for request bodies, or whose
# Redis failed), as the Go worker does: a report given up leaves its run to its deadline,
# to be run again. A run of a batch answered one of those in the batch's reply (Redis
# failed for its shard) is sent again too.
REPORT_RETRY_FOR = 5.0

# The statuses of a report that is tried again: the run is still held (docs/executors.md).
RETRY_STATUSES = (500, 502, 503, 504)


def _retrying(call, retry_for=None, deadline=None):
    """Returns call(), tried again with backoff while it fails with a network error or a
    status of RETRY_STATUSES, for retry_for seconds (REPORT_RETRY_FOR) or until deadline
    (time.monotonic()). A report that reached the server before its answer was lost is
    refused the second time (409, not held), which the callers take as a run
    redelivered: nothing is done twice."""
    if deadline is None:
        deadline = time.monotonic() + (REPORT_RETRY_FOR if retry_for is None else retry_for)
    delay = 0.05
    while True:
        try:
            return call()
        except APIError as e:
            if e.status not in RETRY_STATUSES or time.monotonic() + delay > deadline:
                raise
        except OSError:
            if time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def _describe(e):
    """The error message of an exception: "Type: message", whatever its str() does."""
    name = type(e).__name__
    try:
        return "%s: %s" % (name, e)
    except Exception:  # noqa: BLE001 - a __str__ that raises
        try:
            return "%s: %r" % (name, e)
        except Exception:  # noqa: BLE001
            return name


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
    max_attempts, due, deadline, timeout and visibility in seconds, token; for a workflow
    node's run also workflow, node, parents, parents_omitted and parents_error: the
    parents not in parents are read with Client.node_result) and stop, an
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
        # A workflow node's run: its workflow and node ids, and its parents' results by
        # node id (JSON values as decoded, other results as bytes); parents_omitted names
        # the parents whose results did not fit in the claim (GET
        # /v1/workflows/{id}/nodes/{node}/result reads them).
        self.workflow = r.get("workflow")
        self.node = r.get("node")
        self.parents = {}
        for p in r.get("parents") or []:
            if "result" in p:
                self.parents[p["node"]] = p["result"]
            elif "result_base64" in p:
                self.parents[p["node"]] = base64.b64decode(p["result_base64"])
            else:
                self.parents[p["node"]] = b""
        self.parents_omitted = list(r.get("parents_omitted") or [])
        # Set when the claim could not read the parents' results (parents is then empty):
        # read them with Client.node_result.
        self.parents_error = r.get("parents_error")
        self.stop = threading.Event()
        self.state = "running"  # or "cancelled", "lost", "timeout"

    def __repr__(self):
        return "Job(%s, %s, attempt %d)" % (self.run, self.type, self.attempt)


def _default_name():
    host = "".join(c if c.isalnum() or c in "._~-" else "-" for c in socket.gethostname())[:60] or "worker"
    return "%s-py-%d-%04x" % (host, os.getpid(), random.getrandbits(16))


def _number(name, v, low, high=None):
    """Returns v as a float when it is a number from low to high (None: no bound), else
    raises ValueError naming the setting."""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= low
    if ok and high is not None:
        ok = v <= high
    if not ok:
        bound = "from %g to %g" % (low, high) if high is not None else "of %g or more" % low
        raise ValueError("%s: must be a number of seconds %s, got %r" % (name, bound, v))
    return float(v)


def _check_settings(queues, concurrency, wait, grace, types):
    """Raises ValueError naming the first of a worker's settings that the server refuses
    in every claim (MAX_CLAIM_QUEUES), or that can run nothing: a worker would log the
    refusal and claim again for ever."""
    if not queues:
        raise ValueError("queues: at least one queue is required")
    if len(queues) > MAX_CLAIM_QUEUES:
        raise ValueError("queues: %d queues, at most %d" % (len(queues), MAX_CLAIM_QUEUES))
    seen = set()
    for i, q in enumerate(queues):
        if not isinstance(q, str) or not q:
            raise ValueError("queues[%d]: must be a queue's name, got %r" % (i, q))
        if q in seen:
            raise ValueError("queues[%d]: queue %r is listed twice" % (i, q))
        seen.add(q)
    if types is not None:
        if len(types) > MAX_CLAIM_TYPES:
            raise ValueError("types: %d types, at most %d" % (len(types), MAX_CLAIM_TYPES))
        for i, t in enumerate(types):
            if not isinstance(t, str) or not t:
                raise ValueError("types[%d]: must be a type's name, got %r" % (i, t))
    if isinstance(concurrency, bool) or not isinstance(concurrency, (int, float)) or concurrency != concurrency \
            or concurrency < 1 or concurrency != int(concurrency):
        raise ValueError("concurrency: must be a whole number of 1 or more, got %r" % (concurrency,))
    _number("wait", wait, 0, MAX_CLAIM_WAIT)
    _number("grace", grace, 0)


class Worker:
    """Worker(client, queues, handlers={type: fn}, concurrency=4, worker_name=None).

    A handler is fn(job) -> result: the result (any JSON value, or bytes, bytearray or
    memoryview) is kept with the run by the ack. Raising RetryAfter, Snooze or Cancel
    reports accordingly; any other exception fails the attempt (retried by the job's
    policy). Settings the server refuses in every claim (more than 64 queues, one listed
    twice, a wait over 60 s, more than 256 types) raise ValueError naming the setting, as
    does a concurrency that is no whole number of 1 or more or a negative grace.

    wait: the claim's long poll in seconds (at most 60); a stop is noticed when the
    current claim returns, so keep it short. grace: how long a stop lets running
    handlers finish; runs still running after it are handed back (snoozed for 0s: ready
    again at once, no attempt used), as the Go worker does, and their job.stop set.

    Successes are acked in batches (POST /v1/runs:ack): a thread sends the acks waiting
    at once in one call, so runs that finish while a call is in flight go together in
    the next; with one run at a time, each ack is a call of its own, as soon as it
    comes. batch_acks=False acks each run with its own call (POST /v1/runs/{run}:ack);
    so does a server without the batch endpoint, found out at the first call. A run
    keeps its slot until its ack is sent.
    """

    def __init__(self, client, queues, handlers=None, concurrency=4, worker_name=None, wait=10.0, grace=30.0,
                 types=None, batch_acks=True):
        if isinstance(queues, str):
            queues = [queues]
        queues = list(queues)
        _check_settings(queues, concurrency, wait, grace, None if types is None else list(types))
        self.client = client
        self.queues = queues
        self.handlers = dict(handlers or {})
        self.concurrency = int(concurrency)
        self.name = worker_name or _default_name()
        self.wait = wait
        self.grace = grace
        self.types = types
        self._lock = threading.Condition()
        self._inflight = {}  # run id -> Job
        self._stopping = threading.Event()
        self._done = threading.Event()
        self._batch_acks = batch_acks
        self._acks = []  # (Job, result) waiting for the ack thread

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
        acker = threading.Thread(target=self._ack_loop, name="tock-acks", daemon=True)
        acker.start()
        log.info("worker %s: claiming from %s", self.name, ",".join(self.queues))
        try:
            self._claim_loop()
            deadline = time.monotonic() + self.grace
            with self._lock:
                while self._inflight and time.monotonic() < deadline:
                    self._lock.wait(min(0.1, max(0.0, deadline - time.monotonic())))
                left = list(self._inflight.values())
            self._hand_back(left)
        finally:
            self._done.set()
            with self._lock:
                self._lock.notify_all()
            acker.join(timeout=self.client.timeout + 5)
            hb.join(timeout=5)
            for sig, h in previous.items():
                signal.signal(sig, h)
        log.info("worker %s: stopped", self.name)

    def _hand_back(self, jobs):
        """Hands back the runs still running after the grace period, as the Go worker
        does at shutdown: a snooze of 0s makes each ready again at once without using an
        attempt (left to its deadline, it would be taken for lost and use one). Their
        handlers have job.stop set; what they return later is not reported. A cancelled
        run is reported cancelled."""
        deadline = time.monotonic() + REPORT_RETRY_FOR
        for j in jobs:
            with self._lock:
                state = j.state
                if state in ("running", "cancelled"):
                    j.state = "abandoned"
            j.stop.set()
            if state not in ("running", "cancelled"):
                continue  # reported, or being reported; lost; timed out (failed)
            kind = "snooze" if state == "running" else "cancel"
            log.warning("worker %s: %s still running after the grace period; %s", self.name, j,
                        "handed back" if kind == "snooze" else "reported cancelled")
            try:
                if kind == "snooze":
                    _retrying(lambda: self.client.snooze(j.run, j.token, 0), deadline=deadline)
                else:
                    _retrying(lambda: self.client.cancel(j.run, j.token, "job cancelled"), deadline=deadline)
            except APIError as e:
                if e.status != 409:
                    log.warning("worker %s: hand back %s: %s (left to its deadline)", self.name, j.run, e)
            except Exception as e:  # noqa: BLE001 - the others still go
                log.warning("worker %s: hand back %s: %s (left to its deadline)", self.name, j.run, e)

    # -- the claim loop ----------------------------------------------------------------

    def _claim_loop(self):
        backoff = 0.1
        types = self.types if self.types is not None else sorted(self.handlers)
        while not self._stopping.is_set():
            with self._lock:
                while len(self._inflight) >= self.concurrency and not self._stopping.is_set():
                    self._lock.wait(1.0)
                free = min(self.concurrency - len(self._inflight), MAX_CLAIM)
            if self._stopping.is_set():
                return
            try:
                runs = self.client.claim(self.queues, self.name, max=free, wait=self.wait, types=types)
                backoff = 0.1
            except Exception as e:  # noqa: BLE001 - the loop must go on (a reply that is no claim's too)
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
                if not isinstance(value, (bytes, bytearray, memoryview)):
                    try:
                        # NaN and the infinities are no JSON: the server would refuse the
                        # whole batch ack they went in.
                        json.dumps(value, allow_nan=False)
                    except (TypeError, ValueError) as e:
                        kind, value = "fail", "the handler's result is not JSON: %s" % e
        except RetryAfter as e:
            kind, value = "retry", e
        except Snooze as e:
            kind, value = "snooze", e.delay
        except Cancel as e:
            kind, value = "cancel", str(e)
        except BaseException as e:  # noqa: BLE001 - anything a handler raises fails the attempt
            # SystemExit too: in a handler's thread it would only end the thread, leaving
            # the run in flight and heartbeated for ever.
            kind, value = "fail", _describe(e)
        finally:
            if timer:
                timer.cancel()
        queued = False
        try:
            queued = self._report(j, kind, value)
        finally:
            if not queued:  # else the ack thread releases it
                self._release([j])

    def _release(self, jobs):
        with self._lock:
            for j in jobs:
                self._inflight.pop(j.run, None)
            self._lock.notify_all()

    def _timed_out(self, j):
        with self._lock:
            if j.state != "running":
                return
            j.state = "timeout"
        j.stop.set()
        try:
            _retrying(lambda: self.client.fail(j.run, j.token, "timeout: the handler ran longer than %gs" % j.timeout))
        except (APIError, OSError) as e:
            log.warning("worker %s: fail %s after its timeout: %s", self.name, j.run, e)

    def _report(self, j, kind, value):
        """Reports how a run ended; returns True when its ack was queued for the ack
        thread (which then releases the run)."""
        with self._lock:
            state = j.state
            if state == "running":
                j.state = "reported"
            if state == "running" and kind == "ack" and self._batch_acks:
                self._acks.append((j, value))
                self._lock.notify_all()
                return True
        if state in ("lost", "timeout", "abandoned"):
            return False  # lost: another worker has it; timeout: reported already
        if state == "cancelled":
            kind, value = "cancel", "job cancelled"
        self._report_one(j, kind, value)
        return False

    def _report_one(self, j, kind, value):
        def call():
            if kind == "ack":
                if isinstance(value, (bytes, bytearray, memoryview)):
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

        try:
            _retrying(call)
        except APIError as e:
            if e.status == 409:
                log.info("worker %s: %s was redelivered meanwhile; report dropped", self.name, j.run)
            elif kind == "ack" and e.status in (400, 413):
                self._refused_ack(j, e.message)
            else:
                log.warning("worker %s: %s %s: %s", self.name, kind, j.run, e)
        except (OSError, ValueError, TypeError) as e:  # TypeError: a result that is not JSON
            log.warning("worker %s: %s %s: %s (left to its deadline)", self.name, kind, j.run, e)

    def _refused_ack(self, j, message):
        """An ack refused for its result (over the server's limit): the run is still held,
        so its attempt is failed with why, rather than left to its deadline and taken
        for lost."""
        log.warning("worker %s: ack %s refused: %s; failing the attempt", self.name, j.run, message)
        self._report_one(j, "fail", "the handler's result was refused: %s" % message)

    # -- batch acks --------------------------------------------------------------------

    def _ack_loop(self):
        """Sends the queued acks, those waiting at once in one call, until the worker is
        done and none is left."""
        while True:
            with self._lock:
                while not self._acks and not self._done.is_set():
                    self._lock.wait(1.0)
                if not self._acks:
                    return
                batch, self._acks = self._acks[:MAX_ACK_BATCH], self._acks[MAX_ACK_BATCH:]
            try:
                self._send_acks(batch)
            except Exception as e:  # noqa: BLE001 - the thread must go on
                log.warning("worker %s: ack %d runs: %s (left to their deadlines)", self.name, len(batch), e)
            finally:
                self._release([j for j, _ in batch])

    def _send_acks(self, batch):
        if self._batch_acks:
            deadline = time.monotonic() + REPORT_RETRY_FOR
            delay = 0.05
            while batch:
                runs = []
                for j, value in batch:
                    r = {"run": j.run, "token": j.token}
                    if isinstance(value, (bytes, bytearray, memoryview)):
                        r["result_bytes"] = bytes(value)
                    elif value is not None:
                        r["result"] = value
                    runs.append(r)
                try:
                    results = _retrying(lambda: self.client.ack_many(runs), deadline=deadline)
                except APIError as e:
                    if e.status == 413 and len(batch) > 1:
                        # The body is over the server's limit: its halves go on their own.
                        half = len(batch) // 2
                        self._send_acks(batch[:half])
                        self._send_acks(batch[half:])
                        return
                    if e.status == 413:
                        self._refused_ack(batch[0][0], e.message)
                        return
                    if e.status not in (404, 405):
                        log.warning("worker %s: ack %d runs: %s (left to their deadlines)", self.name, len(batch), e)
                        return
                    log.info("worker %s: the server has no batch ack (%s); acking each run", self.name, e)
                    self._batch_acks = False
                    break
                except (OSError, ValueError) as e:
                    log.warning("worker %s: ack %d runs: %s (left to their deadlines)", self.name, len(batch), e)
                    return
                again = []
                for (j, value), r in zip(batch, results):
                    status = r.get("status")
                    if status == 409:
                        log.info("worker %s: %s was redelivered meanwhile; report dropped", self.name, j.run)
                    elif status in (400, 413):
                        self._refused_ack(j, (r.get("error") or {}).get("message", ""))
                    elif status in RETRY_STATUSES and time.monotonic() + delay <= deadline:
                        again.append((j, value))  # Redis failed for its shard: still held
                    elif status != 200:
                        log.warning("worker %s: ack %s: %s %s (left to its deadline)", self.name, j.run, status,
                                    r.get("error"))
                batch = again
                if batch:
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
            else:
                return
        for j, value in batch:
            self._report_one(j, "ack", value)

    # -- heartbeats --------------------------------------------------------------------

    # The states of runs still held, and so heartbeated: running, ended but not reported
    # yet (queued for the ack thread, or being tried again), or cancelled (until reported).
    _HELD = ("running", "reported", "cancelled")

    def _heartbeat_loop(self):
        while not self._done.is_set():
            with self._lock:
                held = [j for j in self._inflight.values() if j.state in self._HELD]
            period = min([j.visibility for j in held] or [3.0]) / 3.0
            period = min(max(period, 0.05), 10.0)
            if self._done.wait(period):
                return
            with self._lock:
                held = [j for j in self._inflight.values() if j.state in self._HELD]
            if not held:
                continue
            # A heartbeat waits at most a third of the shortest visibility for its answer:
            # one a server never answers must not hold the next back until the runs'
            # deadlines pass (the client's timeout is 30 s by default).
            timeout = min(max(min(j.visibility for j in held) / 3.0, 0.25), self.client.timeout)
            for i in range(0, len(held), MAX_HEARTBEAT):
                self._heartbeat(held[i:i + MAX_HEARTBEAT], timeout)

    def _heartbeat(self, held, timeout):
        try:
            states = self.client.heartbeat([(j.run, j.token) for j in held], self.name, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - the thread must go on, or every run held is lost
            log.warning("worker %s: heartbeat: %s", self.name, e)
            return
        for j in held:
            st = states.get(j.run)
            if st in ("cancelled", "lost"):
                with self._lock:
                    if j.state == "running":
                        j.state = st
                j.stop.set()
