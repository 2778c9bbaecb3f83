// S3 store benchmark, JSON lines on stdout. First a 512 MiB generated stream put through FencedS3
// with the process RSS sampled. Then fenced puts against plain PutObject of the same body to the same
// radosgw in the same run: the goal lines (one writer, steady state, the resource fence on, 1 KiB and
// 1 MiB) and, labelled as not goals, the same without the resource fence, a new key per put, and
// four writers contending for one key.
//
// Every case runs its implementations in ROUNDS interleaved rounds (the order alternating), each a
// closed loop of DURATION_MS / ROUNDS after a warm-up; a fenced round ends with flush(), inside its
// time, so that the deletions it leaves in the background are paid for by the fenced side. A ratio
// is the median over rounds of (time per fenced put ÷ time per plain PutObject) of the same round.
// Requests are counted where they go on the wire (the client's request handler), background
// deletions included.
import { Readable } from "node:stream";
import { PutObjectCommand, type S3Client } from "@aws-sdk/client-s3";
import { FencedS3 } from "@fenced/store/s3";
import { startS3 } from "@fenced/servers";
import { closedLoop, emit, median, percentile, requestsPerOp, round3, type Op } from "./measure.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const WARM_UP_MS = 300;
const STREAM_BYTES = Number(process.env.BENCH_STREAM_BYTES ?? 512 * 1024 * 1024);
const GOAL = 1.3;
const MB = 1024 * 1024;

interface Impl {
  readonly op: Op;
  /** The client whose requests count for this implementation. */
  readonly client: S3Client;
  /** Waits for what the implementation left running in the background (counted in its time). */
  readonly settle?: () => Promise<void>;
}

/** Requests on the wire per client, by "METHOD kind" (kind: the store's folder, or "object"). */
const wire = new Map<S3Client, Map<string, number>>();

function countRequests(client: S3Client): S3Client {
  const counts = new Map<string, number>();
  wire.set(client, counts);
  // The innermost middleware of the client's stack: it sees each request as the HTTP handler is given
  // it, those the store sends over connections of its own included (conditional PUTs).
  client.middlewareStack.add(
    (next) => (args) => {
      const request = args.request as { method: string; path: string; query?: Record<string, unknown> };
      const folder = /\/(manifests|fences|data)\//.exec(request.path)?.[1];
      const kind = `${request.method} ${folder ?? (request.query !== undefined && "delete" in request.query ? "batch delete" : "object")}`;
      counts.set(kind, (counts.get(kind) ?? 0) + 1);
      return next(args);
    },
    { step: "deserialize", priority: "low", name: "benchCountRequests" },
  );
  return client;
}

function snapshot(client: S3Client): Map<string, number> {
  return new Map(wire.get(client));
}

/** One closed-loop slice: returns its operations, its time per operation (settling included), and the latencies. */
async function slice(impl: Impl, concurrency: number, durationMs: number): Promise<{ ops: number; msPerOp: number; latencies: number[] }> {
  const latencies: number[] = [];
  const start = performance.now();
  await closedLoop(impl.op, concurrency, durationMs, latencies);
  await impl.settle?.();
  return { ops: latencies.length, msPerOp: (performance.now() - start) / Math.max(1, latencies.length), latencies };
}

const pct = (xs: readonly number[], p: number): number =>
  percentile(
    [...xs].sort((a, b) => a - b),
    p,
  );

interface Case {
  readonly bench: string;
  readonly what: string;
  readonly size: number;
  readonly concurrency: number;
  readonly plain: Impl;
  /** The fenced implementations compared with plain; `goal` only on the lines the goal is about. */
  readonly fenced: readonly {
    readonly impl: string;
    readonly compares: string;
    readonly goal: number | null;
    readonly run: Impl;
    readonly failed?: () => number;
  }[];
}

async function runCase(c: Case): Promise<void> {
  const impls: [string, Impl][] = [["plain", c.plain], ...c.fenced.map((f): [string, Impl] => [f.impl, f.run])];
  for (const [, impl] of impls) await slice(impl, c.concurrency, WARM_UP_MS); // sockets, caches, JIT
  const perRound = new Map<string, number[]>(impls.map(([name]) => [name, []]));
  const latencies = new Map<string, number[]>(impls.map(([name]) => [name, []]));
  const requests = new Map<string, { ops: number; before: Map<string, number> }>();
  for (const [name, impl] of impls) requests.set(name, { ops: 0, before: snapshot(impl.client) });
  for (let round = 0; round < ROUNDS; round++) {
    // Alternate the order, so that drift in the machine's load hits every implementation alike.
    const order = round % 2 === 0 ? impls : [...impls].reverse();
    for (const [name, impl] of order) {
      const r = await slice(impl, c.concurrency, DURATION_MS / ROUNDS);
      perRound.get(name)?.push(r.msPerOp);
      latencies.get(name)?.push(...r.latencies);
      const counted = requests.get(name);
      if (counted !== undefined) counted.ops += r.ops;
    }
  }
  const plainRounds = perRound.get("plain") ?? [];
  const summary = (name: string, impl: Impl): Record<string, unknown> => {
    const lat = latencies.get(name) ?? [];
    const counted = requests.get(name);
    return {
      msPerOp: round3(median(perRound.get(name) ?? [])),
      p50Ms: round3(pct(lat, 0.5)),
      p99Ms: round3(pct(lat, 0.99)),
      ops: lat.length,
      requestsPerOp:
        counted === undefined ? undefined : requestsPerOp(wire.get(impl.client) ?? new Map(), Math.max(1, counted.ops), counted.before),
    };
  };
  for (const f of c.fenced) {
    const ratios = (perRound.get(f.impl) ?? []).map((ms, i) => ms / (plainRounds[i] ?? ms));
    const ratio = round3(median(ratios));
    emit({
      bench: c.bench,
      case: c.what,
      size: c.size,
      concurrency: c.concurrency,
      compares: f.compares,
      ratio,
      ...(f.goal === null ? { goal: null, note: "informative, not a goal" } : { goal: f.goal, met: ratio <= f.goal }),
      ratioRange: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      rounds: ROUNDS,
      fenced: { impl: f.impl, ...summary(f.impl, f.run), ...(f.failed === undefined ? {} : { gaveUp: f.failed() }) },
      plain: { impl: "PutObject, unconditional, same client configuration", ...summary("plain", c.plain) },
    });
  }
}

const server = await startS3();
try {
  const bucket = await server.createBucket();
  // One client per side, so that each side's requests are counted apart; both configured alike.
  const plainClient = countRequests(server.client());
  const fencedClient = countRequests(server.client());
  const objectOnlyClient = countRequests(server.client());
  const inlinedClient = countRequests(server.client());
  const fence = { resource: "bench", token: 1n };
  const plain = (key: (w: number, i: number) => string, body: Buffer): Impl => ({
    client: plainClient,
    op: async (w, i) => {
      await plainClient.send(new PutObjectCommand({ Bucket: bucket, Key: key(w, i), Body: body }));
    },
  });
  const fenced = (store: FencedS3, client: S3Client, key: (w: number, i: number) => string, body: Buffer): Impl => ({
    client,
    op: async (w, i) => {
      await store.put(key(w, i), body, { fence });
    },
    settle: () => store.flush(),
  });
  const defaults = new FencedS3(fencedClient, { bucket, prefix: "fenced/" });
  const objectOnly = new FencedS3(objectOnlyClient, { bucket, prefix: "object-only/", checkResourceFence: false });
  // A 1 MiB body inside the manifest: one PUT, but the window from the fence read to the PUT landing
  // then spans the body's upload, and every manifest read carries the body.
  const inlined = new FencedS3(inlinedClient, { bucket, prefix: "inlined/", inlineLimit: MB });
  await defaults.verify();

  // First, while the heap holds nothing from the other runs: a stream generated on the fly. Without a
  // length it goes multipart with a few part buffers in memory; with one, as one streamed PUT.
  const chunk = Buffer.alloc(MB, 7);
  const generated = (bytes: number): Readable =>
    Readable.from(
      (function* () {
        for (let sent = 0; sent < bytes; sent += chunk.length) yield chunk.subarray(0, Math.min(chunk.length, bytes - sent));
      })(),
      { objectMode: false },
    );
  for (const length of ["unknown", "known"] as const) {
    (globalThis as { gc?: () => void }).gc?.();
    const rssBefore = process.memoryUsage().rss;
    let maxRss = rssBefore;
    const sampler = setInterval(() => {
      maxRss = Math.max(maxRss, process.memoryUsage().rss);
    }, 20);
    const t0 = performance.now();
    const key = `stream/${length}`;
    await defaults.put(key, generated(STREAM_BYTES), { fence, ...(length === "known" ? { contentLength: STREAM_BYTES } : {}) });
    const seconds = (performance.now() - t0) / 1000;
    clearInterval(sampler);
    maxRss = Math.max(maxRss, process.memoryUsage().rss);
    const stored = await defaults.get(key);
    stored?.body.destroy();
    if (stored?.size !== STREAM_BYTES) throw new Error(`stream put stored ${stored?.size} bytes, expected ${STREAM_BYTES}`);
    emit({
      bench: "s3-put-stream",
      impl: "fenced",
      length,
      bytes: STREAM_BYTES,
      seconds: Number(seconds.toFixed(2)),
      mbPerSec: Number((STREAM_BYTES / MB / seconds).toFixed(1)),
      rssBeforeMb: Math.round(rssBefore / MB),
      maxRssMb: Math.round(maxRss / MB),
      goalMaxRssMb: 200,
    });
  }
  await defaults.delete("stream/unknown", { fence });
  await defaults.delete("stream/known", { fence });
  await defaults.flush();

  const steady = "fenced put ÷ plain PutObject of the same body: time per operation, median of interleaved rounds";
  for (const size of [1024, MB]) {
    const body = Buffer.alloc(size, 1);
    // Steady state: one writer rewriting one key under the same lease.
    await runCase({
      bench: "s3-put",
      what: "one writer, steady state (one key rewritten under one lease)",
      size,
      concurrency: 1,
      plain: plain(() => `plain/steady-${size}`, body),
      fenced: [
        {
          impl: "fenced (defaults: resource fence on)",
          compares: steady,
          goal: GOAL,
          run: fenced(defaults, fencedClient, () => `steady-${size}`, body),
        },
        {
          impl: "fenced, checkResourceFence: false",
          compares: `${steady}; without the cross-object guarantee`,
          goal: null,
          run: fenced(objectOnly, objectOnlyClient, () => `steady-${size}`, body),
        },
        ...(size > 64 * 1024
          ? [
              {
                impl: "fenced, inlineLimit: 1 MiB",
                compares: `${steady}; the body inside the manifest (its upload inside the fence read's window)`,
                goal: null,
                run: fenced(inlined, inlinedClient, () => `steady-${size}`, body),
              },
            ]
          : []),
      ],
    });
  }
  const small = Buffer.alloc(1024, 2);
  // Every put is the first write of its key (nothing remembered: a blind create).
  await runCase({
    bench: "s3-put-new-key",
    what: "one writer, every put the first write of its key",
    size: small.length,
    concurrency: 1,
    plain: plain((_, i) => `plain/new/${i}`, small),
    fenced: [
      {
        impl: "fenced (defaults: resource fence on)",
        compares: steady,
        goal: null,
        run: fenced(defaults, fencedClient, (_, i) => `new/${i}`, small),
      },
      {
        impl: "fenced, checkResourceFence: false",
        compares: `${steady}; without the cross-object guarantee`,
        goal: null,
        run: fenced(objectOnly, objectOnlyClient, (_, i) => `new/${i}`, small),
      },
    ],
  });
  // 4 writers (separate stores, as separate processes would be) contending for one key.
  let gaveUp = 0;
  const contendedClient = countRequests(server.client());
  const contenders = Array.from({ length: 4 }, () => new FencedS3(contendedClient, { bucket, prefix: "contended/" }));
  await runCase({
    bench: "s3-put-contended",
    what: "4 writers contending for one key (plain: 4 writers of one key)",
    size: small.length,
    concurrency: 4,
    plain: plain(() => "plain/contended", small),
    fenced: [
      {
        impl: "fenced (defaults), 4 stores",
        compares: "fenced put ÷ plain PutObject: time per operation at concurrency 4, median of interleaved rounds",
        goal: null,
        failed: () => gaveUp,
        run: {
          client: contendedClient,
          // Counted, not thrown: a put that exhausts its attempts under this much contention is a result.
          op: async (w) => {
            await contenders[w]?.put("contended", small, { fence: { resource: "bench-contended", token: 1n } }).catch(() => {
              gaveUp++;
            });
          },
          settle: async () => {
            await Promise.all(contenders.map((s) => s.flush()));
          },
        },
      },
    ],
  });
} finally {
  await server.stop();
}
