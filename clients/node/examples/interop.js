// The Node side of the cross-language tests (clients/clients_test.go), and an example.
//
//   TOCK_API=http://127.0.0.1:8080 TOCK_TOKEN=... node interop.js create QUEUE PREFIX N
//   TOCK_API=... TOCK_TOKEN=... node interop.js work QUEUE NAME
//   node interop.js verify SECRET HEADER BODY [NOW]
//
// create prints the ids of the jobs it created (type "echo", payload {n: i, from: "node"}).
// work handles "echo" (result {echo: payload, by: "node"}, with node, parents and omitted,
// the sizes of the parents' results the claim left out, for a workflow node's run) and
// "blob" (a string of payload.size x's), printing "start <run>" as each handler starts,
// until SIGTERM. verify prints "ok" or the refusal's kind, exits 0 or 1.
import { Client, SignatureError, Worker, verifySignature } from '../src/index.js';

const [cmd, ...args] = process.argv.slice(2);
const client = () => new Client(process.env.TOCK_API, process.env.TOCK_TOKEN);

if (cmd === 'create') {
  const [queue, prefix, n] = args;
  const c = client();
  for (let i = 0; i < Number(n); i++) {
    const job = await c.createJob('echo', { id: `${prefix}-${i}`, queue, payload: { n: i, from: 'node' },
      retry: { max_attempts: 5, initial_backoff: '100ms' } });
    console.log(job.id);
  }
} else if (cmd === 'work') {
  const [queue, name] = args;
  const c = client();
  const worker = new Worker(c, [queue], {
    workerName: name, concurrency: 4, wait: 1, grace: 10, logger: { info: (m) => console.error(m), warn: (m) => console.error(m) },
    handlers: {
      echo: async (job) => {
        console.log('start', job.run);
        const r = { echo: job.payload, by: 'node', attempt: job.attempt };
        // A workflow node's run: pass on what the parents returned, and the sizes of those
        // the claim left out, read with the worker's token.
        if (job.node) {
          const omitted = {};
          for (const n of job.parentsOmitted) omitted[n] = (await c.nodeResult(job.workflow, n)).length;
          Object.assign(r, { node: job.node, parents: job.parents, omitted });
        }
        return r;
      },
      blob: async (job) => 'x'.repeat(job.payload.size),
    },
  });
  await worker.run();
} else if (cmd === 'verify') {
  const [secret, header, body, now] = args;
  try {
    verifySignature(header, Buffer.from(body, 'utf8'), [secret], { now: now ? Number(now) : undefined });
    console.log('ok');
  } catch (e) {
    if (!(e instanceof SignatureError)) throw e;
    console.log(e.kind);
    process.exitCode = 1;
  }
} else {
  console.error('usage: interop.js create|work|verify ...');
  process.exitCode = 2;
}
