// Azure Blob store benchmark, JSON lines on stdout: FencedAzureBlob against a plain Put Blob (the
// SDK's upload()) of the same bytes to the same azurite in the same run. Each case runs its
// implementations in ROUNDS interleaved rounds (the order alternating), each a closed loop of
// DURATION_MS / ROUNDS after a warm-up; a ratio is the median over rounds of (time per fenced put ÷
// time per plain put) of the same round. Requests are counted as Node starts them (the
// "http.client.request.start" diagnostics channel, to azurite's port only): the store sends on a
// pipeline of its own, which no policy on the caller's client sees. They are counted for the
// implementation whose loop is running (one at a time; the warm-up uncounted), by method and by what
// they touch (manifests, fences, the plain blob).
//
// azurite is an emulator (one Node process, its blobs' records in memory): the ratios say what the
// store adds in requests and client work over one emulated blob write, not what Azure's service time
// would make of them. Beside S3's on radosgw (`pnpm bench store-s3`) and DynamoDB's on dynalite
// (`pnpm bench store-dynamodb`), in the same form.
import { subscribe } from "node:diagnostics_channel";
import type { ClientRequest } from "node:http";
import { FencedAzureBlob } from "@fenced/store/azure-blob";
import { startAzureBlob } from "@fenced/servers";
import { closedLoop, emit, median, requestsPerOp, round3, type Op } from "./measure.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const WARM_UP_MS = 300;

/** Where the requests started now are counted, by "METHOD kind"; undefined: not counted (warm-up, setup). */
let counting: Map<string, number> | undefined;

/** Counts every request this process starts to `host` (127.0.0.1:port) into `counting`. */
function countRequests(host: string): void {
  subscribe("http.client.request.start", (message) => {
    const { request } = message as { request: ClientRequest };
    if (counting === undefined || request.getHeader("host") !== host) return;
    const kind = /manifests\//.test(request.path) ? "manifest" : /fences\//.test(request.path) ? "fence" : "blob";
    const key = `${request.method} ${kind}`;
    counting.set(key, (counting.get(key) ?? 0) + 1);
  });
}

interface Impl {
  readonly op: Op;
}

async function runCase(
  bench: string,
  what: string,
  plain: Impl,
  fenced: readonly { impl: string; run: Impl }[],
  concurrency = 1,
): Promise<void> {
  const impls: [string, Impl][] = [["plain", plain], ...fenced.map((f): [string, Impl] => [f.impl, f.run])];
  for (const [, impl] of impls) await closedLoop(impl.op, concurrency, WARM_UP_MS, []);
  const perRound = new Map<string, number[]>(impls.map(([name]) => [name, []]));
  const counted = new Map(impls.map(([name]) => [name, { ops: 0, requests: new Map<string, number>() }]));
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? impls : [...impls].reverse();
    for (const [name, impl] of order) {
      const c = counted.get(name);
      const latencies: number[] = [];
      const start = performance.now();
      counting = c?.requests;
      try {
        await closedLoop(impl.op, concurrency, DURATION_MS / ROUNDS, latencies);
      } finally {
        counting = undefined;
      }
      perRound.get(name)?.push((performance.now() - start) / Math.max(1, latencies.length));
      if (c !== undefined) c.ops += latencies.length;
    }
  }
  const summary = (name: string) => {
    const c = counted.get(name);
    return {
      msPerOp: round3(median(perRound.get(name) ?? [])),
      requestsPerOp: c === undefined ? undefined : requestsPerOp(c.requests, Math.max(1, c.ops)),
    };
  };
  const plainRounds = perRound.get("plain") ?? [];
  for (const f of fenced) {
    const ratios = (perRound.get(f.impl) ?? []).map((ms, i) => ms / (plainRounds[i] ?? ms));
    emit({
      bench,
      case: what,
      concurrency,
      compares: "fenced ÷ plain: time per operation, median of interleaved rounds",
      ratio: round3(median(ratios)),
      goal: null,
      note: "informative: the ratio reported, beside S3's and DynamoDB's",
      ratioRange: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      rounds: ROUNDS,
      fenced: { impl: f.impl, ...summary(f.impl) },
      plain: { impl: "Put Blob (upload), the SDK's own client, same azurite", ...summary("plain") },
    });
  }
}

/** The ETag of a Put Blob's answer. */
function etagOf(answer: { etag?: string | undefined }): string {
  if (answer.etag === undefined) throw new Error("azurite answered Put Blob without an ETag");
  return answer.etag;
}

const azure = await startAzureBlob();
try {
  countRequests(new URL(azure.url).host);
  const container = await azure.createContainer();

  const body = Buffer.from(JSON.stringify({ text: "x".repeat(1000) })); // about 1 KiB
  const fence = { resource: "bench", token: 1n };
  const plainContainer = azure.client().getContainerClient(container);
  const plainPut = (key: (w: number, i: number) => string): Impl => ({
    op: async (w, i) => {
      await plainContainer.getBlockBlobClient(key(w, i)).upload(body, body.length);
    },
  });
  const defaults = new FencedAzureBlob(azure.client().getContainerClient(container), { prefix: "fenced/" });
  const objectOnly = new FencedAzureBlob(azure.client().getContainerClient(container), {
    prefix: "object-only/",
    checkResourceFence: false,
  });
  await defaults.verify();
  const fencedPut = (store: FencedAzureBlob, key: (w: number, i: number) => string): Impl => ({
    op: async (w, i) => {
      await store.put(key(w, i), body, { fence });
    },
  });
  await runCase(
    "azure-blob-put",
    "one writer, steady state (one key rewritten under one lease), 1 KiB",
    plainPut(() => "plain/steady"),
    [
      { impl: "fenced (defaults: resource fence on)", run: fencedPut(defaults, () => "steady") },
      { impl: "fenced, checkResourceFence: false", run: fencedPut(objectOnly, () => "steady") },
    ],
  );

  // ifVersion: a conditional write on both sides (plain: Put Blob with If-Match on the blob's ETag).
  const conditional = new FencedAzureBlob(azure.client().getContainerClient(container), { prefix: "conditional/" });
  let version = (await conditional.put("cas", body, { fence })).version;
  const plainCas = plainContainer.getBlockBlobClient("plain/cas");
  let plainEtag = etagOf(await plainCas.upload(body, body.length));
  await runCase(
    "azure-blob-put-if-version",
    "one writer, conditional put (ifVersion) of one key, 1 KiB",
    {
      op: async () => {
        plainEtag = etagOf(await plainCas.upload(body, body.length, { conditions: { ifMatch: plainEtag } }));
      },
    },
    [
      {
        impl: "fenced conditional put (ifVersion)",
        run: {
          op: async () => {
            version = (await conditional.put("cas", body, { fence, ifVersion: version })).version;
          },
        },
      },
    ],
  );

  // Several keys under one resource, and transfer: reported.
  const many = new FencedAzureBlob(azure.client().getContainerClient(container), { prefix: "many/" });
  await runCase(
    "azure-blob-put-keys",
    "one writer, 64 keys of one resource in turn, 1 KiB",
    plainPut((_, i) => `plain/keys/${i % 64}`),
    [{ impl: "fenced (defaults)", run: fencedPut(many, (_, i) => `keys/${i % 64}`) }],
  );
  const transfers = new FencedAzureBlob(azure.client().getContainerClient(container), { prefix: "transfer/" });
  const sides = [
    { resource: "left", token: 1n },
    { resource: "right", token: 1n },
  ];
  await transfers.put("moved", body, { fence: sides[0] as { resource: string; token: bigint } });
  let owner = 0;
  await runCase(
    "azure-blob-transfer",
    "transfer of one key back and forth between two resources (plain: Put Blob)",
    plainPut(() => "plain/moved"),
    [
      {
        impl: "fenced transfer",
        run: {
          op: async () => {
            const from = sides[owner] as { resource: string; token: bigint };
            const to = sides[1 - owner] as { resource: string; token: bigint };
            await transfers.transfer("moved", { from, to });
            owner = 1 - owner;
          },
        },
      },
    ],
  );
} finally {
  await azure.stop();
}
