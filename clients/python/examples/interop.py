"""The Python side of the cross-language tests (clients/clients_test.go), and an example.

    TOCK_API=http://127.0.0.1:8080 TOCK_TOKEN=... python3 interop.py create QUEUE PREFIX N [VISIBILITY]
    TOCK_API=... TOCK_TOKEN=... python3 interop.py create-slow QUEUE ID SECONDS
    TOCK_API=... TOCK_TOKEN=... python3 interop.py work QUEUE NAME [GRACE]
    python3 interop.py verify SECRET HEADER BODY [NOW]

create prints the ids of the jobs it created (type "echo", payload {"n": i, "from": "python"}).
work handles "echo" (result {"echo": payload, "by": "python"}, with "node", "parents"
and "omitted", the sizes of the parents' results the claim left out, for a workflow
node's run), "blob" (a string of payload["size"] x's) and "slow" (on a worker whose
NAME holds "doomed", waits payload["seconds"] or until told to stop, then answers as
echo), printing "start <run>" as each handler starts, until SIGTERM (GRACE: the grace
period in seconds, 10 by default). verify prints "ok" or the refusal's kind, and exits 0 or 1.
"""

import logging
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tock import Client, SignatureError, Worker, verify_signature  # noqa: E402


def client():
    return Client(os.environ["TOCK_API"], os.environ.get("TOCK_TOKEN"))


def main(argv):
    cmd = argv[1]
    if cmd == "create":
        queue, prefix, n = argv[2], argv[3], int(argv[4])
        vis = argv[5] if len(argv) > 5 else None
        c = client()
        for i in range(n):
            j = c.create_job("echo", {"n": i, "from": "python"}, id="%s-%d" % (prefix, i), queue=queue,
                             visibility=vis, retry={"max_attempts": 5, "initial_backoff": "100ms"})
            print(j["id"], flush=True)
        return 0
    if cmd == "create-slow":
        queue, job_id, seconds = argv[2], argv[3], float(argv[4])
        j = client().create_job("slow", {"seconds": seconds, "from": "python"}, id=job_id, queue=queue,
                                visibility="1s", retry={"max_attempts": 5, "initial_backoff": "100ms"})
        print(j["id"], flush=True)
        return 0
    if cmd == "work":
        queue, name = argv[2], argv[3]
        grace = float(argv[4]) if len(argv) > 4 else 10

        def echo(job):
            print("start", job.run, flush=True)
            r = {"echo": job.payload, "by": "python", "attempt": job.attempt}
            if job.node:  # a workflow node's run: pass on what the parents returned
                r["node"], r["parents"] = job.node, job.parents
                # Those the claim left out, read with the worker's token: their sizes.
                r["omitted"] = {n: len(c.node_result(job.workflow, n)) for n in job.parents_omitted}
            return r

        def blob(job):
            return "x" * job.payload["size"]

        def slow(job):
            print("start", job.run, flush=True)
            if "doomed" in name:  # the redelivery tests kill or stop the worker meanwhile
                job.stop.wait(job.payload["seconds"])
            return {"echo": job.payload, "by": "python", "attempt": job.attempt}

        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        c = client()
        Worker(c, [queue], {"echo": echo, "slow": slow, "blob": blob}, concurrency=4, worker_name=name, wait=1,
               grace=grace).run()
        return 0
    if cmd == "verify":
        secret, header, body = argv[2], argv[3], argv[4]
        now = int(argv[5]) if len(argv) > 5 else int(time.time())
        try:
            verify_signature(header, body.encode("utf-8"), [secret], now=now)
        except SignatureError as e:
            print(e.kind)
            return 1
        print("ok")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
