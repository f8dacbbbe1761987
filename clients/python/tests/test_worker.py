import os
import sys
import threading
import time
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from fake_server import FakeTock  # noqa: E402
from tock import APIError, Cancel, Client, RetryAfter, Snooze, Worker  # noqa: E402


class WorkerTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeTock()
        self.addCleanup(self.fake.close)
        self.client = Client(self.fake.url, self.fake.token, timeout=5)

    def start(self, handlers, **kw):
        w = Worker(self.client, ["q"], handlers, worker_name="py-test", wait=0.2, grace=kw.pop("grace", 2), **kw)
        t = threading.Thread(target=w.run, kwargs={"install_signals": False}, daemon=True)
        t.start()

        def stop():
            w.stop()
            t.join(10)
            self.assertFalse(t.is_alive(), "the worker did not stop")

        self.addCleanup(stop)
        return w, stop

    def test_outcomes(self):
        def boom(j):
            raise ValueError("bad input")

        def later(j):
            raise RetryAfter(90, "rate limited")

        def snooze(j):
            raise Snooze(3600)

        def cancel(j):
            raise Cancel("address bounced")

        ids = {
            "a": self.fake.add("a", "echo", {"x": 1}),
            "b": self.fake.add("b", "boom"),
            "c": self.fake.add("c", "later"),
            "d": self.fake.add("d", "snooze"),
            "e": self.fake.add("e", "cancel"),
            "f": self.fake.add("f", "unknown"),
            "g": self.fake.add("g", "bytes"),
            "h": self.fake.add("h", "odd"),
            "i": self.fake.add("i", "view"),
        }
        self.start({"echo": lambda j: {"echo": j.payload, "attempt": j.attempt}, "boom": boom, "later": later,
                    "snooze": snooze, "cancel": cancel, "bytes": lambda j: b"\x00\x01", "odd": lambda j: object(),
                    "view": lambda j: memoryview(b"\xff\x00\x01")[1:]}, concurrency=3)
        self.fake.wait_for(lambda: len(self.fake.reports()) == 9)
        rep = self.fake.reports()
        self.assertEqual(rep[ids["a"] + ":ack"], {"token": "1-a", "result": {"echo": {"x": 1}, "attempt": 1}})
        self.assertEqual(rep[ids["b"] + ":fail"], {"token": "1-b", "error": "ValueError: bad input"})
        self.assertEqual(rep[ids["c"] + ":fail"], {"token": "1-c", "error": "rate limited", "retry_after": "90s"})
        self.assertEqual(rep[ids["d"] + ":snooze"], {"token": "1-d", "delay": "3600s"})
        self.assertEqual(rep[ids["e"] + ":cancel"], {"token": "1-e", "error": "address bounced"})
        self.assertIn("no handler", rep[ids["f"] + ":fail"]["error"])
        self.assertEqual(rep[ids["g"] + ":ack"], {"token": "1-g", "result_base64": "AAE="})
        # A memoryview (of a buffer, a numpy array's data) was no JSON: the run failed.
        self.assertEqual(rep[ids["i"] + ":ack"], {"token": "1-i", "result_base64": "AAE="})
        self.assertIn("not JSON", rep[ids["h"] + ":fail"]["error"])
        claims = [b for p, b in self.fake.calls if p == "/v1/runs:claim"]
        self.assertEqual(claims[0]["worker"], "py-test")
        self.assertEqual(claims[0]["wait"], "200ms")
        self.assertEqual(claims[0]["types"], sorted(["echo", "boom", "later", "snooze", "cancel", "bytes", "odd", "view"]))
        self.assertTrue(all(1 <= c["max"] <= 3 for c in claims))

    def test_any_exception_fails_the_run(self):
        # A handler that raised SystemExit (sys.exit() in a library) or an exception whose
        # str() raised ended its thread before the report: the run stayed in flight,
        # heartbeated for ever (never redelivered), and its slot was lost.
        class Unprintable(Exception):
            def __str__(self):
                raise RuntimeError("no str")

        def leave(j):
            raise SystemExit(3)

        def odd(j):
            raise Unprintable()

        ids = {"x": self.fake.add("x", "exit"), "u": self.fake.add("u", "odd")}
        w, _ = self.start({"exit": leave, "odd": odd}, concurrency=2)
        self.fake.wait_for(lambda: len(self.fake.reports()) == 2)
        self.assertEqual(self.fake.reports()[ids["x"] + ":fail"], {"token": "1-x", "error": "SystemExit: 3"})
        self.assertIn("Unprintable", self.fake.reports()[ids["u"] + ":fail"]["error"])
        self.fake.wait_for(lambda: w.inflight == 0)

    def test_error_messages_are_cut_to_what_the_server_keeps(self):
        # The server keeps 2,048 bytes of an error; the worker sent it whole: megabytes for
        # an exception holding a response body, and over the server's body limit (64 MiB
        # by default) the report was refused (413) and the run left to its deadline.
        big = self.fake.add("big", "big")
        self.start({"big": lambda j: (_ for _ in ()).throw(ValueError("\u00e9" * 1_000_000))})
        self.fake.wait_for(lambda: big + ":fail" in self.fake.reports())
        sent = self.fake.reports()[big + ":fail"]["error"]
        self.assertLessEqual(len(sent.encode("utf-8")), 2048)
        self.assertGreater(len(sent.encode("utf-8")), 2040)
        self.assertEqual(sent, ("ValueError: " + "\u00e9" * 1_000_000)[:len(sent)])

    def test_settings_the_server_refuses_are_refused_at_once(self):
        # A worker whose every claim the server refuses (wait over 60 s, a queue listed
        # twice, more than 64 queues) logged the 400 and tried again for ever, running
        # nothing; a concurrency of 0 or less ran one run at a time. Each is refused when
        # the worker is made, naming the setting.
        bad = [
            (dict(queues=[]), "queues"),
            (dict(queues=["q", "q"]), "queues"),
            (dict(queues=["q%d" % i for i in range(65)]), "queues"),
            (dict(queues=["q", ""]), "queues"),
            (dict(wait=61), "wait"),
            (dict(wait=-1), "wait"),
            (dict(wait=float("nan")), "wait"),
            (dict(concurrency=0), "concurrency"),
            (dict(concurrency=2.5), "concurrency"),
            (dict(grace=-1), "grace"),
            (dict(types=["t%d" % i for i in range(257)]), "types"),
            (dict(types=[""]), "types"),
        ]
        for kw, name in bad:
            args = dict(queues=["q"])
            args.update(kw)
            queues = args.pop("queues")
            with self.assertRaises(ValueError, msg=repr(kw)) as cm:
                Worker(self.client, queues, {}, **args)
            self.assertIn(name, str(cm.exception), repr(kw))
        Worker(self.client, "q", {}, wait=60, concurrency=1000, grace=0)

    def test_heartbeat_and_cancel(self):
        release = threading.Event()
        seen = []

        def slow(j):
            seen.append(j.stop.wait(10))
            release.wait(10)
            return "done"

        run = self.fake.add("slow", "slow", visibility="300ms")
        self.start({"slow": slow})
        self.fake.wait_for(lambda: sum(p == "/v1/runs:heartbeat" for p, _ in self.fake.calls) >= 2)
        hb = [b for p, b in self.fake.calls if p == "/v1/runs:heartbeat"][0]
        self.assertEqual(hb, {"runs": [{"run": run, "token": "1-slow"}], "worker": "py-test"})
        # The job is cancelled: the handler is told to stop, and the run ends cancelled.
        self.fake.heartbeat_states[run] = "cancelled"
        self.fake.wait_for(lambda: bool(seen))
        self.assertEqual(seen, [True])
        release.set()
        self.fake.wait_for(lambda: run + ":cancel" in self.fake.reports())

    def test_lost_runs_are_not_reported(self):
        release = threading.Event()
        run = self.fake.add("lost", "slow", visibility="300ms")
        self.fake.heartbeat_states[run] = "lost"
        w, stop = self.start({"slow": lambda j: (j.stop.wait(10), release.wait(10))})
        self.fake.wait_for(lambda: any(p == "/v1/runs:heartbeat" for p, _ in self.fake.calls))
        release.set()
        self.fake.wait_for(lambda: w.inflight == 0)
        stop()
        self.assertEqual(self.fake.reports(), {})

    def test_timeout_fails_the_run(self):
        run = self.fake.add("t", "slow", timeout="200ms")
        self.start({"slow": lambda j: j.stop.wait(10)})
        self.fake.wait_for(lambda: run + ":fail" in self.fake.reports())
        self.assertIn("timeout", self.fake.reports()[run + ":fail"]["error"])

    def test_stop_lets_running_handlers_finish(self):
        started, release = threading.Event(), threading.Event()

        def slow(j):
            started.set()
            release.wait(10)
            return 1

        run = self.fake.add("s", "slow")
        w, stop = self.start({"slow": slow}, grace=10)
        self.assertTrue(started.wait(10))
        w.stop()
        threading.Timer(0.3, release.set).start()
        stop()
        self.assertEqual(self.fake.reports()[run + ":ack"], {"token": "1-s", "result": 1})

    def test_stop_hands_back_runs_still_running_after_the_grace(self):
        # A run still running after the grace period was left to its visibility deadline:
        # taken for lost then, with an attempt used (a job of one attempt dead at every
        # deploy). The Go worker hands such a run back, ready at once with no attempt
        # used; the protocol's snooze of 0s does that.
        started, release = threading.Event(), threading.Event()

        def stubborn(j):
            started.set()
            release.wait(10)
            return "late"

        run = self.fake.add("stubborn", "slow")
        w, stop = self.start({"slow": stubborn}, grace=0.3)
        self.assertTrue(started.wait(10))
        stop()
        self.assertEqual(self.fake.reports(), {run + ":snooze": {"token": "1-stubborn", "delay": "0s"}})
        release.set()  # the handler returns after the hand-back: nothing more is reported
        time.sleep(0.3)
        self.assertEqual(list(self.fake.reports()), [run + ":snooze"])

    def test_conflict_is_dropped(self):
        run = self.fake.add("late", "echo")
        self.fake.conflict.add(run)
        w, _ = self.start({"echo": lambda j: 1})
        self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())
        self.fake.wait_for(lambda: w.inflight == 0)

    def test_acks_go_in_batches(self):
        # Runs that finish while an ack call is in flight go together in the next.
        n = 30
        ids = [self.fake.add("b%d" % i, "echo") for i in range(n)]
        self.fake.conflict.add(ids[7])
        w, _ = self.start({"echo": lambda j: j.job_id}, concurrency=n)
        self.fake.wait_for(lambda: all(i + ":ack" in self.fake.reports() for i in ids))
        self.fake.wait_for(lambda: w.inflight == 0)
        calls = self.fake.batch_calls()
        self.assertLess(len(calls), n, "some acks went together")
        self.assertFalse(any(p.startswith("/v1/runs/") for p, _ in self.fake.calls), "no single acks")
        sent = [r["run"] for b in calls for r in b["runs"]]
        self.assertEqual(sorted(sent), sorted(ids), "each run acked once")
        self.assertEqual(self.fake.reports()[ids[3] + ":ack"], {"token": "1-b3", "result": "b3"})

    def test_acks_without_the_batch_endpoint(self):
        # An older server answers 404: the worker acks each run on its own from then on.
        self.fake.batch = False
        ids = [self.fake.add("o%d" % i, "echo") for i in range(5)]
        w, _ = self.start({"echo": lambda j: 1}, concurrency=5)
        self.fake.wait_for(lambda: all(i + ":ack" in self.fake.reports() for i in ids))
        self.fake.wait_for(lambda: w.inflight == 0)
        self.assertEqual(self.fake.reports()[ids[0] + ":ack"], {"token": "1-o0", "result": 1})

    def test_nan_result_fails_its_run_only(self):
        # NaN and infinities are no JSON: the server would refuse the whole batch ack
        # (400), leaving every run in it to its deadline and this one to be retried.
        nan = self.fake.add("nan", "nan")
        ok = self.fake.add("ok", "echo")
        w, _ = self.start({"nan": lambda j: {"mean": float("nan")}, "echo": lambda j: 1}, concurrency=2)
        self.fake.wait_for(lambda: nan + ":fail" in self.fake.reports() and ok + ":ack" in self.fake.reports())
        self.assertIn("not JSON", self.fake.reports()[nan + ":fail"]["error"])
        self.assertNotIn(nan + ":ack", self.fake.reports())
        with self.assertRaises(ValueError):
            self.client.ack("x:1", "t", {"v": float("inf")})

    def test_result_over_the_limit_fails_the_run(self):
        # An ack refused for its result (413) leaves the run held: it is failed with why,
        # not left to its deadline to be taken for lost.
        for batch in (True, False):
            big = self.fake.add("big-%s" % batch, "echo")
            self.fake.too_large.add(big)
            w, stop = self.start({"echo": lambda j: "x" * 70000}, batch_acks=batch)
            self.fake.wait_for(lambda: big + ":fail" in self.fake.reports())
            self.assertIn("over the limit", self.fake.reports()[big + ":fail"]["error"])
            self.fake.wait_for(lambda: w.inflight == 0)
            stop()

    def test_reports_are_retried_while_the_server_is_unavailable(self):
        # A 503 (a server restarting) is tried again, as the Go worker does; before, the
        # report was given up and its run left to its deadline, to be run again.
        for batch in (True, False):
            run = self.fake.add("u-%s" % batch, "echo")
            with self.fake.lock:
                self.fake.unavailable = 2
            w, stop = self.start({"echo": lambda j: None}, batch_acks=batch)
            self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())
            self.assertEqual(self.fake.unavailable, 0)
            self.fake.wait_for(lambda: w.inflight == 0)
            stop()

    def test_replies_cut_short_or_from_a_proxy(self):
        # A reply cut short (a server killed while it answered: http.client.IncompleteRead)
        # and a proxy's error body ({"error": "..."}: AttributeError) escaped the client
        # as exceptions the loops did not catch: the claim loop ended the worker, the
        # heartbeat thread died (every run held lost at its deadline from then on).
        release = threading.Event()
        run = self.fake.add("cut", "slow", visibility="300ms")
        with self.fake.lock:
            for path in ("/v1/runs:claim", "/v1/runs:heartbeat", "/v1/runs:ack"):
                self.fake.cut[path] = 1
                self.fake.proxy_error[path] = 1
        w, _ = self.start({"slow": lambda j: release.wait(10) and {"ok": True}})
        self.fake.wait_for(lambda: sum(p == "/v1/runs:heartbeat" for p, _ in self.fake.calls) >= 2)
        release.set()
        self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())
        self.assertEqual(self.fake.reports()[run + ":ack"], {"token": "1-cut", "result": {"ok": True}})
        self.assertEqual(self.fake.cut, {p: 0 for p in self.fake.cut})
        self.assertEqual(self.fake.proxy_error, {p: 0 for p in self.fake.proxy_error})
        with self.assertRaises(APIError) as cm:
            with self.fake.lock:  # a path the worker does not call here
                self.fake.proxy_error["/v1/runs:fail"] = 1
            self.client.fail_many([{"run": "x:1", "token": "t"}])
        self.assertEqual((cm.exception.status, cm.exception.code), (502, "http_502"))

    def test_reports_refused_for_redis_are_retried(self):
        # A run of a batch answered 503 (Redis failed for its shard: still held, safe to
        # report again, docs/executors.md), and a single report answered 500 (a store call
        # that failed), were given up, as the Go worker does not: its run was left to its
        # deadline and run again.
        run = self.fake.add("shard-down", "echo")
        with self.fake.lock:
            self.fake.shard_unavailable[run] = 2
        w, stop = self.start({"echo": lambda j: 5})
        self.fake.wait_for(lambda: sum(r["run"] == run for b in self.fake.batch_calls() for r in b["runs"]) == 3)
        self.fake.wait_for(lambda: w.inflight == 0)
        stop()
        self.assertEqual(self.fake.shard_unavailable[run], 0)
        for batch in (True, False):
            run = self.fake.add("redis-down-%s" % batch, "boom" if batch else "echo")
            with self.fake.lock:
                self.fake.unavailable, self.fake.unavailable_status = 2, 500
            w, stop = self.start({"echo": lambda j: 1, "boom": lambda j: 1 / 0}, batch_acks=batch)
            self.fake.wait_for(lambda: run + (":fail" if batch else ":ack") in self.fake.reports())
            self.assertEqual(self.fake.unavailable, 0)
            self.fake.wait_for(lambda: w.inflight == 0)
            stop()

    def test_more_than_a_thousand_runs_at_once(self):
        # The server takes at most 1000 runs in a claim (max) and in a heartbeat: a worker
        # with a concurrency over 1000 had every claim refused (400) and ran nothing, and
        # one holding over 1000 runs had every heartbeat refused: all lost at their deadline.
        n = 1001
        release = threading.Event()
        ids = {self.fake.add("m%d" % i, "slow", visibility="900ms") for i in range(n)}
        w, _ = self.start({"slow": lambda j: release.wait(30) and 1}, concurrency=n + 10)
        self.fake.wait_for(lambda: w.inflight == n, timeout=20)
        beat = set()

        def all_heartbeated():
            beat.update(r["run"] for p, b in self.fake.calls if p == "/v1/runs:heartbeat" for r in b["runs"])
            return beat == ids

        self.fake.wait_for(all_heartbeated, timeout=10)
        release.set()
        self.fake.wait_for(lambda: all(i + ":ack" in self.fake.reports() for i in ids), timeout=20)

    def test_runs_are_heartbeated_until_reported(self):
        # A run whose report waited (queued behind an ack call, or tried again while the
        # server was unavailable) was no longer heartbeated: one of a short visibility was
        # lost at its deadline meanwhile and run again. The Go worker heartbeats a run
        # until its report is sent.
        for batch in (True, False):
            run = self.fake.add("hb-%s" % batch, "echo", visibility="300ms")
            with self.fake.lock:
                self.fake.unavailable, self.fake.unavailable_status = 6, 503  # about 1.5 s
            w, stop = self.start({"echo": lambda j: 1}, batch_acks=batch)
            self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())
            beats = sum(r["run"] == run for p, b in self.fake.calls if p == "/v1/runs:heartbeat" for r in b["runs"])
            self.assertGreaterEqual(beats, 4, "heartbeats while the ack was tried again")
            self.fake.wait_for(lambda: w.inflight == 0)
            stop()

    def test_a_heartbeat_never_answered_does_not_hold_the_others(self):
        # A heartbeat waited for its answer as long as the client's timeout (30 s by
        # default, 5 s here): one call a server took and never answered held the next
        # heartbeats back, and every run of a shorter visibility was lost meanwhile. A
        # heartbeat waits a third of the shortest visibility at most.
        release = threading.Event()
        run = self.fake.add("hang", "slow", visibility="1200ms")
        with self.fake.lock:
            self.fake.hang["/v1/runs:heartbeat"] = 1
        w, _ = self.start({"slow": lambda j: release.wait(10) and 1})
        self.fake.wait_for(lambda: sum(p == "/v1/runs:heartbeat" for p, _ in self.fake.calls) >= 3, timeout=3)
        release.set()
        self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())

    def test_a_batch_over_the_body_limit_is_split(self):
        # A batch ack over the server's body limit (64 MiB by default: a thousand results
        # of 64 KiB, base64-encoded) was refused whole (413) and every run in it left to its
        # deadline, to be run again. It is split until its parts fit.
        self.fake.max_body = 100_000
        release = threading.Event()
        ids = [self.fake.add("s%d" % i, "big") for i in range(8)]
        w, _ = self.start({"big": lambda j: release.wait(10) and b"\x00" * 30_000}, concurrency=8)
        self.fake.wait_for(lambda: w.inflight == 8)
        release.set()
        self.fake.wait_for(lambda: all(i + ":ack" in self.fake.reports() for i in ids))
        self.fake.wait_for(lambda: w.inflight == 0)
        self.assertTrue(all(len(b["runs"]) <= 2 for b in self.fake.batch_calls()))

    def test_single_acks(self):
        run = self.fake.add("s1", "echo")
        w, _ = self.start({"echo": lambda j: None}, batch_acks=False)
        self.fake.wait_for(lambda: run + ":ack" in self.fake.reports())
        self.assertEqual(self.fake.batch_calls(), [])
        self.assertEqual(self.fake.reports()[run + ":ack"], {"token": "1-s1"})

    def test_ack_many_and_fail_many(self):
        self.fake.conflict.add("x:2")
        got = self.client.ack_many([{"run": "x:1", "token": "t1", "result": {"a": 1}},
                                    {"run": "x:2", "token": "t2", "result_bytes": b"\x00"}])
        self.assertEqual([r["status"] for r in got], [200, 409])
        self.assertEqual(self.fake.batch_calls()[-1], {"runs": [{"run": "x:1", "token": "t1", "result": {"a": 1}},
                                                                {"run": "x:2", "token": "t2", "result_base64": "AA=="}]})
        got = self.client.fail_many([{"run": "x:1", "token": "t1", "error": "boom", "retry_after": 90}])
        self.assertEqual(got[0]["outcome"], "error")
        self.assertEqual(self.fake.batch_calls("/v1/runs:fail")[-1],
                         {"runs": [{"run": "x:1", "token": "t1", "error": "boom", "retry_after": "90s"}]})

    def test_token_is_not_sent_where_a_redirect_points(self):
        # urllib follows redirects and keeps the Authorization header, to another host
        # too: a server or proxy answering with a redirect handed the bearer token to
        # whatever host it named. The client follows no redirect.
        seen = []

        class Other(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                seen.append(self.headers.get("Authorization"))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"runs": []}')

        other = ThreadingHTTPServer(("127.0.0.1", 0), Other)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        self.addCleanup(other.server_close)
        self.addCleanup(other.shutdown)
        with self.fake.lock:
            self.fake.redirect = "http://localhost:%d/elsewhere" % other.server_address[1]
        with self.assertRaises(APIError) as cm:
            self.client.job_runs("x")
        self.assertEqual(cm.exception.status, 302)
        self.assertEqual(seen, [])
        self.assertNotIn(self.fake.token, str(cm.exception))

    def test_api_error(self):
        c = Client(self.fake.url, "wrong-token-000000")
        with self.assertRaises(APIError) as cm:
            c.claim(["q"], "w")
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthenticated"))


if __name__ == "__main__":
    unittest.main()
