// The scenario of "How to do distributed locking" (Martin Kleppmann, 2016) against the fenced HTTP
// gateway, through a client generated from the gateway's own API document: `api.ts` is what
// openapi-typescript writes from GET /openapi.json, and every call goes through openapi-fetch.
// ../openapi-client.test.ts generates api.ts, type-checks this file against it (tsc --strict with
// exactOptionalPropertyTypes and noUncheckedIndexedAccess; no non-null assertion, no cast), and runs
// what tsc compiled. The types are the document's promises: a lease answer's `fence` is there, a lease
// request may leave out `register`, a record is a JSON value, and a problem's `type` tells its fields.
//
// Last, a lease of two resources writes a record under each in one request (POST /v1/records).
//
// Client 1 takes a lease and reads; it sends its write while the lease is valid, and the network holds
// the write's body until the lease has expired. Client 2 takes the lease, reads, and writes with its
// fence and If-Match. Client 1's write arrives: every check a clock can make passed when it left, and
// the storage refuses the stale token (409 stale-token). Client 1, awake after its pause, writes again:
// its fence credential ended with its lease (403 credential-expired). Client 2's data stays.
//
// Prints one JSON object per line for each step. Usage:
//
//     FENCED_GATEWAY_KEY=<API key> node article-scenario.js --gateway http://127.0.0.1:8080 \
//         --resource articles/42 --key articles/42/draft --ttl-ms 1000
//
// Exit status 0 when every step answered as the document says it must, 1 otherwise.
import { parseArgs } from "node:util";
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./api.js";

type JsonValue = components["schemas"]["JsonValue"];
type Lease = components["schemas"]["LeaseAnswer"];
// A record's value is typed as JSON, not `unknown`: this line compiles only while the document says so.
const _recordsAreJson: unknown extends JsonValue ? never : true = true;
type Name = "setup" | "client1" | "client2" | "pair";

/** One line of the transcript (a field left undefined is left out). */
interface Step {
  readonly client?: Name;
  readonly step: string;
  readonly status?: number;
  readonly token?: string;
  readonly etag?: string;
  readonly type?: string | undefined;
  readonly highest?: string | undefined;
  readonly version?: string;
  readonly value?: JsonValue;
  readonly ok?: boolean;
  readonly wrong?: readonly string[];
  readonly resources?: readonly string[];
  readonly tokens?: readonly string[];
}

const emit = (step: Step): void => void process.stdout.write(`${JSON.stringify(step)}\n`);

class StepFailed extends Error {
  override readonly name = "StepFailed";
}

type JsonObject = components["schemas"]["JsonObject"];
const asObject = (value: JsonValue): JsonObject => (typeof value === "object" && value !== null && !Array.isArray(value) ? value : {});

/** The article as `writer` leaves it: the value read, with its text replaced. */
function revised(value: JsonValue, writer: string): JsonValue {
  return { ...asObject(value), text: `written by ${writer}` };
}

/** A network that sends a request's headers with the first byte of its body, and the rest on deliver(). */
class HeldNetwork {
  #deliver = (): void => undefined;
  readonly #delivered = new Promise<void>((resolve) => (this.#deliver = resolve));

  body(text: string): ReadableStream<Uint8Array> {
    const bytes = new TextEncoder().encode(text);
    const delivered = this.#delivered;
    return new ReadableStream<Uint8Array>({
      // fetch writes the headers with the first chunk.
      start: (controller) => controller.enqueue(bytes.subarray(0, 1)),
      pull: async (controller) => {
        await delivered;
        controller.enqueue(bytes.subarray(1));
        controller.close();
      },
    });
  }

  deliver(): void {
    this.#deliver();
  }
}

/** One client of the article: the gateway as its API key sees it, and the lease it holds. */
class ArticleClient {
  readonly #api: Client<paths>;
  #lease: Lease | undefined;

  constructor(
    readonly name: Name,
    baseUrl: string,
    apiKey: string,
    readonly resource: string,
    readonly key: string,
  ) {
    this.#api = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });
  }

  get lease(): Lease {
    if (this.#lease === undefined) throw new StepFailed(`${this.name} holds no lease`);
    return this.#lease;
  }

  /** The README's request, `{ resource, ttlMs }`; `register: true` registers the fence with the stores at once. */
  async takeLease(ttlMs: number, register?: true): Promise<Lease> {
    const body = register === undefined ? { resource: this.resource, ttlMs } : { resource: this.resource, ttlMs, register };
    const { data, error, response } = await this.#api.POST("/v1/leases", { body });
    if (data === undefined) throw new StepFailed(`${this.name} lease: ${response.status} ${error.type}`);
    emit({ client: this.name, step: "lease", status: response.status, token: data.token });
    this.#lease = data;
    return data;
  }

  async read(): Promise<{ etag: string; value: JsonValue }> {
    const { data, error, response } = await this.#api.GET("/v1/records/{key}", { params: { path: { key: this.key } } });
    if (error !== undefined) throw new StepFailed(`${this.name} read: ${response.status} ${error.type}`);
    const etag = response.headers.get("ETag");
    if (etag === null) throw new StepFailed(`${this.name} read: no ETag`);
    emit({
      client: this.name,
      step: "read",
      status: response.status,
      etag,
      token: response.headers.get("Fencing-Token") ?? "",
      value: data,
    });
    return { etag, value: data };
  }

  /**
   * A write under this client's lease. The fence credential is the whole fence (resource, token and
   * holder come from it); If-Match makes the write a compare-and-set on the version read. Through a
   * held network, the body is a stream (which fetch sends with duplex "half").
   */
  write(value: JsonValue, ifMatch?: string, network?: HeldNetwork) {
    const fence = this.lease.fence;
    const header = ifMatch === undefined ? { "Fencing-Credential": fence } : { "Fencing-Credential": fence, "If-Match": ifMatch };
    const duplex: RequestInit["duplex"] = "half";
    const held = network === undefined ? {} : { bodySerializer: (body: JsonValue) => network.body(JSON.stringify(body)), duplex };
    emit({ client: this.name, step: network === undefined ? "write" : "write sent", token: this.lease.token });
    return this.#api.PUT("/v1/records/{key}", { params: { path: { key: this.key }, header }, body: value, ...held });
  }

  async release(): Promise<number> {
    const { response } = await this.#api.POST("/v1/leases/release", { body: { leaseId: this.lease.leaseId } });
    emit({ client: this.name, step: "release", status: response.status });
    return response.status;
  }
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs the scenario once; returns what went wrong (empty: everything answered as it must). */
async function scenario(baseUrl: string, apiKey: string, resource: string, key: string, ttlMs: number): Promise<string[]> {
  const wrong: string[] = [];
  const expect = (what: string, actual: unknown, expected: unknown): void => {
    if (actual !== expected) wrong.push(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
  };
  const client = (name: Name): ArticleClient => new ArticleClient(name, baseUrl, apiKey, resource, key);

  // Setup: a first version, so that both clients read one and make their writes conditional on it.
  const setup = client("setup");
  await setup.takeLease(ttlMs, true);
  const first = await setup.write({ article: key, text: "written by setup" });
  expect("setup write", first.response.status, 200);
  expect("setup release", await setup.release(), 204);

  const [client1, client2] = [client("client1"), client("client2")];
  const lease1 = await client1.takeLease(ttlMs);
  const read1 = await client1.read();

  // The write leaves while the lease is valid; the network holds it longer than the lease.
  const network = new HeldNetwork();
  const held = client1.write(revised(read1.value, "client1"), read1.etag, network);
  emit({ client: "client1", step: "pause" });
  await sleep(ttlMs + 500);

  const lease2 = await client2.takeLease(ttlMs);
  expect("client2's token above client1's", BigInt(lease2.token) > BigInt(lease1.token), true);
  const read2 = await client2.read();
  expect("client2 read the version client1 read", read2.etag, read1.etag);
  const value2 = revised(read2.value, "client2");
  const write2 = await client2.write(value2, read2.etag);
  if (write2.data === undefined) throw new StepFailed(`client2 write: ${write2.response.status} ${write2.error.type}`);
  emit({ client: "client2", step: "written", status: write2.response.status, ...write2.data, value: value2 });

  // The held write arrives: no clock could refuse it, the storage's ratchet does.
  emit({ client: "client1", step: "wake" });
  network.deliver();
  const stale = await held;
  // The problem's type tells its fields: a stale-token problem names the highest token the storage accepted.
  const highest = stale.error?.type === "/problems/stale-token" ? stale.error.highest : undefined;
  emit({ client: "client1", step: "written", status: stale.response.status, token: lease1.token, type: stale.error?.type, highest });
  expect("client1's held write (stale)", stale.response.status, 409);
  expect("its problem's highest token", highest, lease2.token);

  // Written again after the pause: the credential ended with the lease.
  const late = await client1.write(revised(read1.value, "client1"), read1.etag);
  emit({ client: "client1", step: "written", status: late.response.status, token: lease1.token, type: late.error?.type });
  expect("client1's write after its lease (expired)", late.error?.type, "/problems/credential-expired");

  const final = await client2.read();
  expect("client2's version stays", final.etag, `"${write2.data.version}"`);
  expect("client2's text stays", asObject(final.value).text, "written by client2");
  expect("client2 release", await client2.release(), 204);
  await pair(baseUrl, apiKey, resource, ttlMs, expect);
  return wrong;
}

/**
 * A lease of two resources — a token and a credential for each — and a record written under each
 * resource's fence in one transaction (POST /v1/records), every write naming its resource.
 */
async function pair(
  baseUrl: string,
  apiKey: string,
  resource: string,
  ttlMs: number,
  expect: (what: string, actual: unknown, expected: unknown) => void,
): Promise<void> {
  const api = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${apiKey}` } });
  const resources = [`${resource}/left`, `${resource}/right`];
  const granted = await api.POST("/v1/leases", { body: { resources, ttlMs } });
  if (granted.data === undefined) throw new StepFailed(`pair lease: ${granted.response.status} ${granted.error.type}`);
  const { fences, leaseId } = granted.data;
  emit({
    client: "pair",
    step: "lease",
    status: granted.response.status,
    resources: fences.map((f) => f.resource),
    tokens: fences.map((f) => f.token),
  });
  expect("the pair's resources, in order", fences.map((f) => f.resource).join(" "), resources.join(" "));
  const writes = fences.map((f) => ({ key: `${f.resource}/total`, resource: f.resource, value: { under: f.resource, token: f.token } }));
  const written = await api.POST("/v1/records", { body: { fences: fences.map((f) => f.fence), writes } });
  if (written.data === undefined) throw new StepFailed(`pair write: ${written.response.status} ${written.error.type}`);
  emit({ client: "pair", step: "written", status: written.response.status, tokens: written.data.writes.map((w) => w.token) });
  expect(
    "the pair's writes, each under its own resource",
    written.data.writes.map((w) => `${w.resource} ${w.token}`).join(", "),
    fences.map((f) => `${f.resource} ${f.token}`).join(", "),
  );
  const released = await api.POST("/v1/leases/release", { body: { leaseId } });
  emit({ client: "pair", step: "release", status: released.response.status });
  expect("pair release", released.response.status, 204);
}

async function main(): Promise<number> {
  const { values } = parseArgs({
    options: {
      gateway: { type: "string" },
      resource: { type: "string" },
      key: { type: "string" },
      "ttl-ms": { type: "string", default: "1000" },
    },
  });
  // From the environment, not the command line: a command line is visible to every user of the machine.
  const apiKey = process.env.FENCED_GATEWAY_KEY;
  const { gateway, resource, key } = values;
  if (gateway === undefined || resource === undefined || key === undefined || apiKey === undefined) {
    process.stderr.write("usage: FENCED_GATEWAY_KEY=<API key> article-scenario --gateway <url> --resource <r> --key <k> [--ttl-ms <ms>]\n");
    return 2;
  }
  try {
    const wrong = await scenario(gateway, apiKey, resource, key, Number(values["ttl-ms"]));
    emit({ step: "done", ok: wrong.length === 0, wrong });
    return wrong.length === 0 ? 0 : 1;
  } catch (err) {
    if (!(err instanceof StepFailed)) throw err;
    emit({ step: "done", ok: false, wrong: [err.message] });
    return 1;
  }
}

process.exitCode = await main();
