// DynamoDB store benchmark, JSON lines on stdout: FencedDynamo against plain PutItem of the same
// item to the same dynalite in the same run. Each case runs its implementations in ROUNDS
// interleaved rounds (the order alternating), each a closed loop of DURATION_MS / ROUNDS after a
// warm-up; a ratio is the median over rounds of (time per fenced put ÷ time per plain put) of the
// same round. Requests are counted where the client hands them to its HTTP handler, by operation
// and by what they touch (manifests, fences, the plain item).
//
// dynalite is an emulator (LevelDB, one Node process): the ratios say what the store adds in
// requests and client work over one emulated item write, not what DynamoDB's service time would make
// of them. Beside S3's on radosgw (`pnpm bench store-s3`), in the same form.
import { PutItemCommand, type DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { FencedDynamo } from "@fenced/store/dynamodb";
import { startDynamo } from "@fenced/servers";
import { closedLoop, emit, median, requestsPerOp, round3, type Op } from "./measure.js";

const DURATION_MS = Number(process.env.BENCH_DURATION_MS ?? 3_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const WARM_UP_MS = 300;

/** Requests per client, by "Operation kind". */
const wire = new Map<DynamoDBClient, Map<string, number>>();

function countRequests(client: DynamoDBClient): DynamoDBClient {
  const counts = new Map<string, number>();
  wire.set(client, counts);
  client.middlewareStack.add(
    (next) => (args) => {
      const request = args.request as { headers: Record<string, string>; body?: unknown };
      const operation = (request.headers["x-amz-target"] ?? "").split(".").pop() ?? "?";
      const body =
        typeof request.body === "string" ? request.body : request.body instanceof Uint8Array ? Buffer.from(request.body).toString() : "";
      const kind = /manifests\//.test(body) ? "manifest" : /fences\//.test(body) ? "fence" : "item";
      counts.set(`${operation} ${kind}`, (counts.get(`${operation} ${kind}`) ?? 0) + 1);
      return next(args);
    },
    { step: "finalizeRequest", priority: "low", name: "benchCountRequests" },
  );
  return client;
}

interface Impl {
  readonly op: Op;
  readonly client: DynamoDBClient;
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
  const counted = new Map(impls.map(([name, impl]) => [name, { ops: 0, before: new Map(wire.get(impl.client)) }]));
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? impls : [...impls].reverse();
    for (const [name, impl] of order) {
      const latencies: number[] = [];
      const start = performance.now();
      await closedLoop(impl.op, concurrency, DURATION_MS / ROUNDS, latencies);
      perRound.get(name)?.push((performance.now() - start) / Math.max(1, latencies.length));
      const c = counted.get(name);
      if (c !== undefined) c.ops += latencies.length;
    }
  }
  const summary = (name: string, impl: Impl) => {
    const c = counted.get(name);
    return {
      msPerOp: round3(median(perRound.get(name) ?? [])),
      requestsPerOp: c === undefined ? undefined : requestsPerOp(wire.get(impl.client) ?? new Map(), Math.max(1, c.ops), c.before),
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
      note: "informative: issue 53 asks for the ratio reported, beside S3's",
      ratioRange: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      rounds: ROUNDS,
      fenced: { impl: f.impl, ...summary(f.impl, f.run) },
      plain: { impl: "PutItem, same client configuration", ...summary("plain", plain) },
    });
  }
}

const dynamo = await startDynamo();
try {
  const table = await dynamo.createTable();

  const value = { text: "x".repeat(1000) }; // about 1 KiB of JSON
  const body = Buffer.from(JSON.stringify(value));
  const fence = { resource: "bench", token: 1n };
  const plainClient = countRequests(dynamo.client());
  const plainPut = (key: (w: number, i: number) => string): Impl => ({
    client: plainClient,
    op: async (w, i) => {
      await plainClient.send(new PutItemCommand({ TableName: table, Item: { key: { S: key(w, i) }, body: { B: body } } }));
    },
  });
  const fencedClient = countRequests(dynamo.client());
  const objectOnlyClient = countRequests(dynamo.client());
  const defaults = new FencedDynamo(fencedClient, { table, prefix: "fenced/" });
  const objectOnly = new FencedDynamo(objectOnlyClient, { table, prefix: "object-only/", checkResourceFence: false });
  await defaults.verify();
  const fencedPut = (store: FencedDynamo, client: DynamoDBClient, key: (w: number, i: number) => string): Impl => ({
    client,
    op: async (w, i) => {
      await store.put(key(w, i), value, { fence });
    },
  });
  await runCase(
    "dynamodb-put",
    "one writer, steady state (one key rewritten under one lease), 1 KiB",
    plainPut(() => "plain/steady"),
    [
      { impl: "fenced (defaults: resource fence on)", run: fencedPut(defaults, fencedClient, () => "steady") },
      { impl: "fenced, checkResourceFence: false", run: fencedPut(objectOnly, objectOnlyClient, () => "steady") },
    ],
  );

  // ifVersion: a conditional write on both sides (plain: a version attribute compared and replaced).
  const conditionalClient = countRequests(dynamo.client());
  const conditional = new FencedDynamo(conditionalClient, { table, prefix: "conditional/" });
  let version = (await conditional.put("cas", value, { fence })).version;
  let plainVersion = "v0";
  await plainClient.send(
    new PutItemCommand({ TableName: table, Item: { key: { S: "plain/cas" }, body: { B: body }, v: { S: plainVersion } } }),
  );
  await runCase(
    "dynamodb-put-if-version",
    "one writer, conditional put (ifVersion) of one key, 1 KiB",
    {
      client: plainClient,
      op: async (_, i) => {
        const next = `v${i + 1}-${Math.random()}`;
        await plainClient.send(
          new PutItemCommand({
            TableName: table,
            Item: { key: { S: "plain/cas" }, body: { B: body }, v: { S: next } },
            ConditionExpression: "v = :v",
            ExpressionAttributeValues: { ":v": { S: plainVersion } },
          }),
        );
        plainVersion = next;
      },
    },
    [
      {
        impl: "fenced conditional put (ifVersion)",
        run: {
          client: conditionalClient,
          op: async () => {
            version = (await conditional.put("cas", value, { fence, ifVersion: version })).version;
          },
        },
      },
    ],
  );

  // Several keys under one resource, and transfer: reported.
  const manyClient = countRequests(dynamo.client());
  const many = new FencedDynamo(manyClient, { table, prefix: "many/" });
  await runCase(
    "dynamodb-put-keys",
    "one writer, 64 keys of one resource in turn, 1 KiB",
    plainPut((_, i) => `plain/keys/${i % 64}`),
    [{ impl: "fenced (defaults)", run: fencedPut(many, manyClient, (_, i) => `keys/${i % 64}`) }],
  );
  const transferClient = countRequests(dynamo.client());
  const transfers = new FencedDynamo(transferClient, { table, prefix: "transfer/" });
  const sides = [
    { resource: "left", token: 1n },
    { resource: "right", token: 1n },
  ];
  await transfers.put("moved", value, { fence: sides[0] as { resource: string; token: bigint } });
  let owner = 0;
  await runCase(
    "dynamodb-transfer",
    "transfer of one key back and forth between two resources (plain: PutItem)",
    plainPut(() => "plain/moved"),
    [
      {
        impl: "fenced transfer",
        run: {
          client: transferClient,
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
  await dynamo.stop();
}
