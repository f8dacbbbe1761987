"""A small client of tock's HTTP API: jobs (create, get, runs) and the run endpoints of
the pull protocol (claim, heartbeat, ack, fail, snooze, cancel; ack_many and fail_many
report several runs in one call). Standard library only."""

import base64
import http.client
import json
import urllib.error
import urllib.parse
import urllib.request

from ._duration import format_duration, parse_duration

_MISSING = object()

# The bytes of an error message the server keeps (shard.MaxErrorLen): a longer one is
# cut to it before it is sent, rather than sent whole (and refused over the server's
# body limit).
MAX_ERROR = 2048


def _cut_error(msg):
    """msg as a str of at most MAX_ERROR bytes in UTF-8, cut at a character's start."""
    msg = str(msg)
    b = msg.encode("utf-8", "replace")
    if len(b) <= MAX_ERROR:
        return msg
    i = MAX_ERROR
    while i > 0 and b[i] & 0xC0 == 0x80:
        i -= 1  # b[i] continues a character: cut before its start
    return b[:i].decode("utf-8")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: urllib would send the Authorization header (the bearer token)
    to whatever host a redirect names. A 3xx is an APIError."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


class APIError(Exception):
    """An error reply of the API: status (HTTP), code ("conflict", "token_mismatch"...),
    message and field (the request field at fault, when one is)."""

    def __init__(self, status, code, message, field=None):
        super().__init__("%s %s: %s%s" % (status, code, message, " (%s)" % field if field else ""))
        self.status, self.code, self.message, self.field = status, code, message, field


class Client:
    """Client(base_url, token): token is a bearer token (write scope to create and read
    jobs, worker scope for the run endpoints and node_result), or None without
    authentication. It follows no redirect (a 3xx is an APIError): the token goes to
    base_url only."""

    def __init__(self, base_url, token=None, timeout=30.0, user_agent="tock-python/0.1"):
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent

    # -- transport ---------------------------------------------------------------------

    def _do(self, method, path, body=None, headers=None, timeout=None, raw_reply=False):
        data = None
        h = {"Accept": "application/json", "User-Agent": self.user_agent}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("utf-8")
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(self.base_url + path, data=data, headers=h, method=method)
        try:
            with _opener.open(req, timeout=timeout or self.timeout) as resp:
                raw = resp.read()
                status = resp.status
                if raw_reply:
                    return status, raw, resp.headers.get_content_type()
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            except http.client.HTTPException as cut:
                raise ConnectionError("%s %s: the reply was cut short: %r" % (method, path, cut)) from None
            try:
                err = json.loads(raw)["error"]
                code, message, field = err.get("code", ""), err.get("message", ""), err.get("field")
            except (ValueError, KeyError, TypeError, AttributeError):
                # Not an API error: a proxy's page, or its own JSON ({"error": "..."}).
                raise APIError(e.code, "http_%d" % e.code, raw.decode("utf-8", "replace")[:200]) from None
            raise APIError(e.code, code, message, field) from None
        except http.client.HTTPException as e:
            # A reply cut short (IncompleteRead: the server was killed while it answered) or
            # malformed: a network error, as a reset connection is (OSError), so that the
            # loops and the reports' retries take it as one.
            raise ConnectionError("%s %s: the reply was cut short: %r" % (method, path, e)) from None
        return status, (json.loads(raw) if raw else None)

    @staticmethod
    def _run_path(run, verb):
        # <job id>:<due ms>: the job id is path-escaped, the colons may stay.
        return "/v1/runs/" + urllib.parse.quote(run, safe=":") + ":" + verb

    # -- jobs --------------------------------------------------------------------------

    def create_job(self, type, payload=_MISSING, *, schedule=None, idempotency_key=None, payload_bytes=None, **fields):
        """Create a job; returns the job (a dict) with "created" set to whether it is new.

        schedule: a dict with one of at, delay, now, cron (default {"now": True}). Other
        fields of the API's JobRequest go by name: id, queue, priority, retry (a dict),
        timeout and visibility (Go durations, or seconds), overlap, misfire...
        payload is any JSON value; payload_bytes arbitrary bytes.
        """
        body = {"type": type, "schedule": schedule if schedule is not None else {"now": True}}
        if payload is not _MISSING:
            body["payload"] = payload
        if payload_bytes is not None:
            body["payload_base64"] = base64.b64encode(payload_bytes).decode("ascii")
        for k, v in fields.items():
            if v is None:
                continue
            body[k] = format_duration(v) if k in ("timeout", "visibility", "misfire_after") else v
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        status, job = self._do("POST", "/v1/jobs", body, headers)
        job["created"] = status == 201
        return job

    def get_job(self, job_id):
        return self._do("GET", "/v1/jobs/" + urllib.parse.quote(job_id, safe=""))[1]

    def job_runs(self, job_id):
        """The job's recent runs, newest first (each with its outcome and result)."""
        return self._do("GET", "/v1/jobs/" + urllib.parse.quote(job_id, safe="") + "/runs")[1]["runs"]

    def node_result(self, workflow, node):
        """A succeeded workflow node's result (GET /v1/workflows/{id}/nodes/{node}/result):
        a JSON value as decoded, other results as bytes; APIError 404 when it has none. A
        worker token may read it: a handler reads the parents its claim left out
        (job.parents_omitted) with it."""
        path = "/v1/workflows/%s/nodes/%s/result" % (urllib.parse.quote(workflow, safe=""), urllib.parse.quote(node, safe=""))
        _, raw, ctype = self._do("GET", path, raw_reply=True)
        return json.loads(raw) if ctype == "application/json" else raw

    # -- runs (the pull protocol) ------------------------------------------------------

    def claim(self, queues, worker, max=1, wait=None, types=None):
        """Claim up to max runs of queues, waiting up to wait (seconds or a Go duration, at
        most 60 s) when none is ready. Returns a list of runs (dicts, as in the API)."""
        body = {"queues": list(queues), "worker": worker, "max": max}
        if wait:
            body["wait"] = format_duration(wait)
        if types:
            body["types"] = list(types)
        w = parse_duration(body.get("wait")) or 0
        return self._do("POST", "/v1/runs:claim", body, timeout=self.timeout + w)[1]["runs"]

    def heartbeat(self, runs, worker, timeout=None):
        """Extend held runs: runs is a list of (run, token) pairs or of claimed runs.
        Returns {run: state} with state "extended", "cancelled" or "lost". timeout (in
        seconds; the client's by default) bounds the call: a worker gives it a part of
        the runs' visibility, so that a call never answered does not hold back the next."""
        held = []
        for r in runs:
            if isinstance(r, dict):
                held.append({"run": r["run"], "token": r["token"]})
            else:
                held.append({"run": r[0], "token": r[1]})
        reply = self._do("POST", "/v1/runs:heartbeat", {"runs": held, "worker": worker}, timeout=timeout)[1]
        return {r["run"]: r["state"] for r in reply["runs"]}

    def ack(self, run, token, result=_MISSING, result_bytes=None):
        body = {"token": token}
        if result is not _MISSING and result is not None:
            body["result"] = result
        if result_bytes is not None:
            body["result_base64"] = base64.b64encode(result_bytes).decode("ascii")
        return self._do("POST", self._run_path(run, "ack"), body)[1]

    def ack_many(self, runs):
        """Report that several runs succeeded in one call (POST /v1/runs:ack, at most 1000
        runs; one Redis call per shard instead of one per run). runs: dicts with run,
        token and optionally result (any JSON value) or result_bytes. Returns the results
        in order: dicts with run and status, 200 with outcome, else error: 409
        (token_mismatch: redelivered meanwhile, drop it), 404, 400 or 413 for that run."""
        items = []
        for r in runs:
            item = {"run": r["run"], "token": r["token"]}
            if r.get("result") is not None:
                item["result"] = r["result"]
            if r.get("result_bytes") is not None:
                item["result_base64"] = base64.b64encode(bytes(r["result_bytes"])).decode("ascii")
            items.append(item)
        return self._do("POST", "/v1/runs:ack", {"runs": items})[1]["runs"]

    def fail_many(self, runs):
        """Report that several runs failed in one call (POST /v1/runs:fail): runs are
        dicts with run, token and optionally error and retry_after (seconds or a Go
        duration). Returns the results in order, as ack_many."""
        items = []
        for r in runs:
            item = {"run": r["run"], "token": r["token"]}
            if r.get("error"):
                item["error"] = _cut_error(r["error"])
            if r.get("retry_after") is not None:
                item["retry_after"] = format_duration(r["retry_after"])
            items.append(item)
        return self._do("POST", "/v1/runs:fail", {"runs": items})[1]["runs"]

    def fail(self, run, token, error=None, retry_after=None):
        body = {"token": token}
        if error:
            body["error"] = _cut_error(error)
        if retry_after is not None:
            body["retry_after"] = format_duration(retry_after)
        return self._do("POST", self._run_path(run, "fail"), body)[1]

    def snooze(self, run, token, delay):
        return self._do("POST", self._run_path(run, "snooze"), {"token": token, "delay": format_duration(delay)})[1]

    def cancel(self, run, token, error=None):
        body = {"token": token}
        if error:
            body["error"] = _cut_error(error)
        return self._do("POST", self._run_path(run, "cancel"), body)[1]
