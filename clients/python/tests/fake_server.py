"""An in-process stand-in for tock's run endpoints, for the unit tests."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeTock:
    def __init__(self, token="worker-secret-0123"):
        self.token = token
        self.lock = threading.Condition()
        self.ready = []  # runs to hand out
        self.calls = []  # (path, body)
        self.heartbeat_states = {}  # run -> state to answer
        self.conflict = set()  # runs whose reports get 409
        self.too_large = set()  # runs whose acks get 413 (the result over the server's limit)
        self.batch = True  # whether POST /v1/runs:ack and :fail exist (else 404, as an older server)
        self.unavailable = 0  # the next reports answered 503 (not recorded), as a server restarting
        self.unavailable_status = 503  # or 500: Redis failed (a connection refused)
        # run -> how many of the next batch reports naming it answer it 503 in the batch's
        # reply (Redis failed for its shard), the other runs 200.
        self.shard_unavailable = {}
        # path -> how many of its next calls get a reply cut short (a server killed while
        # it answered; not recorded), or an error body that is no API error (a proxy's).
        self.cut = {}
        self.proxy_error = {}
        self.redirect = None  # where a GET is redirected (302)
        self.hang = {}  # path -> how many of its next calls are never answered
        self.max_body = None  # a body over it is refused whole (413), as the server's MaxBody
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if fake.redirect:
                    self.send_response(302)
                    self.send_header("Location", fake.redirect)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.reply(404, {"error": {"code": "not_found", "message": "no route"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n)
                if fake.max_body is not None and n > fake.max_body:
                    return self.reply(413, {"error": {"code": "too_large", "message":
                                                      "the request body is over the limit of %d bytes" % fake.max_body}})
                body = json.loads(raw or b"null")
                if self.headers.get("Authorization") != "Bearer " + fake.token:
                    return self.reply(401, {"error": {"code": "unauthenticated", "message": "no"}})
                with fake.lock:
                    if fake.unavailable > 0 and self.path not in ("/v1/runs:claim", "/v1/runs:heartbeat"):
                        fake.unavailable -= 1
                        return self.reply(fake.unavailable_status, {"error": {"code": "unavailable", "message": "restarting"}})
                    # The server's limits: at most 1000 runs a claim and a heartbeat.
                    if self.path == "/v1/runs:claim" and not 1 <= body.get("max", 1) <= 1000:
                        return self.reply(400, {"error": {"code": "invalid_argument", "field": "max",
                                                          "message": "must be 1 to 1000, got %s" % body["max"]}})
                    if self.path == "/v1/runs:heartbeat" and len(body["runs"]) > 1000:
                        return self.reply(400, {"error": {"code": "invalid_argument", "field": "runs",
                                                          "message": "more than 1000 runs"}})
                    if fake.hang.get(self.path, 0) > 0:
                        fake.hang[self.path] -= 1
                        hung = True
                    else:
                        hung = False
                if hung:
                    time.sleep(30)  # a server that took the call and never answers
                    return
                with fake.lock:
                    if fake.cut.get(self.path, 0) > 0:
                        fake.cut[self.path] -= 1
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", "100")
                        self.end_headers()
                        self.wfile.write(b'{"runs": [')
                        self.close_connection = True
                        return
                    if fake.proxy_error.get(self.path, 0) > 0:
                        fake.proxy_error[self.path] -= 1
                        return self.reply(502, {"error": "upstream connect error"})
                    fake.calls.append((self.path, body))
                    fake.lock.notify_all()
                if self.path == "/v1/runs:claim":
                    with fake.lock:
                        if not fake.ready:
                            fake.lock.wait(0.2)
                        out, fake.ready = fake.ready[: body["max"]], fake.ready[body["max"]:]
                    return self.reply(200, {"runs": out})
                if self.path == "/v1/runs:heartbeat":
                    states = [{"run": r["run"], "state": fake.heartbeat_states.get(r["run"], "extended")}
                              for r in body["runs"]]
                    return self.reply(200, {"runs": states})
                if self.path in ("/v1/runs:ack", "/v1/runs:fail"):
                    if not fake.batch:
                        return self.reply(404, {"error": {"code": "not_found", "message": "no route for " + self.path}})
                    verb = self.path.rpartition(":")[2]
                    out = []
                    for r in body["runs"]:
                        with fake.lock:
                            down = fake.shard_unavailable.get(r["run"], 0) > 0
                            if down:
                                fake.shard_unavailable[r["run"]] -= 1
                        if down:
                            out.append({"run": r["run"], "status": 503, "error": {
                                "code": "unavailable", "message": "redis did not answer in time"}})
                        elif r["run"] in fake.conflict:
                            out.append({"run": r["run"], "status": 409,
                                        "error": {"code": "token_mismatch", "message": "not held"}})
                        elif verb == "ack" and r["run"] in fake.too_large:
                            out.append({"run": r["run"], "status": 413, "error": {
                                "code": "too_large", "message": "70000 bytes is over the limit of 65536 bytes",
                                "field": "runs[0].result"}})
                        else:
                            out.append({"run": r["run"], "status": 200, "outcome": "ok" if verb == "ack" else "error"})
                    return self.reply(200, {"runs": out, "done": sum(o["status"] == 200 for o in out),
                                            "refused": sum(o["status"] != 200 for o in out)})
                run, _, verb = self.path[len("/v1/runs/"):].rpartition(":")
                if run in fake.conflict:
                    return self.reply(409, {"error": {"code": "token_mismatch", "message": "not held"}})
                if verb == "ack" and run in fake.too_large:
                    return self.reply(413, {"error": {"code": "too_large", "field": "result",
                                                      "message": "70000 bytes is over the limit of 65536 bytes"}})
                self.reply(200, {"run": run, "outcome": verb})

            def reply(self, status, obj):
                b = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(b)))
                self.end_headers()
                self.wfile.write(b)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def add(self, job_id, type, payload=None, visibility="30s", timeout="30m0s"):
        r = {"run": job_id + ":1764000000000", "job_id": job_id, "queue": "q", "type": type, "attempt": 1,
             "max_attempts": 3, "due": "2025-11-24T16:00:00Z", "deadline": "2025-11-24T16:00:30Z",
             "timeout": timeout, "visibility": visibility, "token": "1-" + job_id}
        if payload is not None:
            r["payload"] = payload
        with self.lock:
            self.ready.append(r)
            self.lock.notify_all()
        return r["run"]

    def reports(self):
        """Reports by "<run>:<verb>", with their bodies (a batch's runs as single calls')."""
        out = {}
        with self.lock:
            for p, b in self.calls:
                if p.startswith("/v1/runs/"):
                    out[p[len("/v1/runs/"):]] = b
                elif p in ("/v1/runs:ack", "/v1/runs:fail") and self.batch:
                    verb = p.rpartition(":")[2]
                    for r in b["runs"]:
                        out[r["run"] + ":" + verb] = {k: v for k, v in r.items() if k != "run"}
        return out

    def batch_calls(self, path="/v1/runs:ack"):
        with self.lock:
            return [b for p, b in self.calls if p == path]

    def wait_for(self, cond, timeout=10.0):
        import time

        end = time.monotonic() + timeout
        with self.lock:
            while not cond():
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError("condition not met in %gs; calls: %r" % (timeout, self.calls))
                self.lock.wait(min(left, 0.05))
