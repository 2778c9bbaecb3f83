import { channel } from "node:diagnostics_channel";
import { performance } from "node:perf_hooks";
import { outcomeOf, type Outcome } from "@fenced/fence/internal";
import { context, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span } from "@opentelemetry/api";
import type { StoreBackend } from "./errors.js";

/**
 * What the stores tell an observer, without the caller's help: each write's outcome on
 * `node:diagnostics_channel` (published only while someone subscribes), and each call, each SQL
 * statement and each S3 request as an OpenTelemetry span through `@opentelemetry/api` (a no-op until
 * an application registers an SDK). Nothing here decides anything: an observer's failure or absence
 * never changes what a call does.
 */

/** The channel the stores publish each write's outcome on (README, "Observing the stores"). */
export const STORE_CHANNELS = { write: "fenced:store:write" } as const;

/** How a call ended: `ok`, the code of the FencedError it threw, or `error` for any other failure. */
type StoreOutcome = Outcome;

/** A fence as a call presented it: what an observer is told of it (never more than the caller gave). */
interface FenceSeen {
  readonly resource: string;
  readonly token: bigint;
  readonly holder?: string | null | undefined;
}

/** Published on fenced:store:write once a write (put, delete, update, transfer, putAll, register, transaction) has ended. */
export interface StoreWriteMessage {
  readonly store: StoreBackend;
  readonly operation: string;
  /** The key written (absent for putAll, register and transaction). */
  readonly key?: string | undefined;
  /** The fences the write presented, in the order given. */
  readonly fences: readonly FenceSeen[];
  readonly outcome: StoreOutcome;
  /** The version written, when the write resolved with one. */
  readonly version?: string | undefined;
  /** What the write threw (absent when it succeeded). */
  readonly error?: unknown;
  readonly durationMs: number;
}

/** One call into a store, as its span and its message name it. */
export interface StoreCall {
  readonly store: StoreBackend;
  readonly operation: string;
  readonly key?: string | undefined;
  readonly fences?: readonly FenceSeen[] | undefined;
}

/** The operations that write: their outcome is published. */
const WRITES: ReadonlySet<string> = new Set(["put", "delete", "update", "transfer", "putAll", "register", "transaction"]);

const writes = channel(STORE_CHANNELS.write);
const tracer = trace.getTracer("@fenced/store");

function callAttributes(call: StoreCall): Attributes {
  // Built field by field, not spread: every call builds it, a span recording or not (a sampler reads it at the start).
  const attributes: Attributes = { "fenced.store": call.store, "fenced.operation": call.operation };
  if (call.key !== undefined) attributes["fenced.key"] = call.key;
  const fences = call.fences ?? [];
  const first = fences[0];
  if (first !== undefined) {
    attributes["fenced.resource"] = first.resource;
    attributes["fenced.token"] = first.token.toString();
  }
  if (fences.length > 1) {
    attributes["fenced.resources"] = fences.map((f) => f.resource);
    attributes["fenced.tokens"] = fences.map((f) => f.token.toString());
  }
  return attributes;
}

/** The version a write resolved with (its WriteResult), if any. */
function versionOf(result: unknown): string | undefined {
  const version = typeof result === "object" && result !== null ? (result as { version?: unknown }).version : undefined;
  return typeof version === "string" ? version : undefined;
}

/** A failed span: its outcome, and ERROR status with the error's message (no stack: refusals are expected). */
function failed(span: Span, attributes: Attributes, err: unknown): void {
  if (!span.isRecording()) return;
  span.setAttributes(attributes);
  span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

/**
 * One store call being observed: its span `fenced.store.<operation>`, started now, and `context`,
 * in which that span is the active one (what runs in it — its statements and requests — are its
 * children). `ended` ends the span when the call's promise settles, and publishes a write's end on
 * fenced:store:write; it passes the outcome on unchanged. Nothing of it is entered on the call's way
 * down: a store runs its work in `context` itself (`context.with`), so a write's path from the
 * store's method to its request holds only the store's own functions.
 */
export interface ObservedCall {
  readonly context: Context;
  ended<T>(settles: Promise<T>): Promise<T>;
}

export function observeCall(call: StoreCall): ObservedCall {
  const publish = WRITES.has(call.operation) && writes.hasSubscribers;
  const span = tracer.startSpan(`fenced.store.${call.operation}`, { attributes: callAttributes(call) });
  const started = performance.now();
  const ok = <T>(result: T): T => {
    if (span.isRecording()) {
      const version = versionOf(result);
      span.setAttributes({ "fenced.outcome": "ok", ...(version === undefined ? {} : { "fenced.version": version }) });
    }
    if (publish) writes.publish(message(call, "ok", started, { version: versionOf(result) }));
    span.end();
    return result;
  };
  const failure = (err: unknown): never => {
    const outcome = outcomeOf(err);
    failed(span, { "fenced.outcome": outcome }, err);
    if (publish) writes.publish(message(call, outcome, started, { error: err }));
    span.end();
    throw err;
  };
  const active = trace.setSpan(context.active(), span);
  // The end is published in the span's context too: a subscriber (a logger adding trace ids) sees the call's span.
  return { context: active, ended: (settles) => context.with(active, () => settles.then(ok, failure)) };
}

/** Runs one store call as its observed span (observeCall), `run` within it. */
export function observedCall<T>(call: StoreCall, run: () => Promise<T>): Promise<T> {
  const observed = observeCall(call);
  // A run that throws before its first await ends the span like one that rejects.
  return observed.ended(context.with(observed.context, async () => run()));
}

function message(
  call: StoreCall,
  outcome: StoreOutcome,
  started: number,
  more: { readonly version?: string | undefined; readonly error?: unknown },
): StoreWriteMessage {
  return { ...call, fences: call.fences ?? [], outcome, ...more, durationMs: performance.now() - started };
}

/** The statement's name as its span names it: the store's statement (`fenced:<name>:<digest>`), else the SQL's first word. */
function statementName(config: { readonly name?: string | undefined; readonly text: string }): string {
  const named = config.name?.split(":")[1];
  return named ?? config.text.trimStart().split(/\s/, 1)[0] ?? "query";
}

/** One SQL statement sent to PostgreSQL, as a client span `postgresql <name>` with its text (parameters are never recorded). */
export function observedStatement<T>(
  config: { readonly name?: string | undefined; readonly text: string },
  run: () => Promise<T>,
): Promise<T> {
  return tracer.startActiveSpan(
    `postgresql ${statementName(config)}`,
    { kind: SpanKind.CLIENT, attributes: { "db.system.name": "postgresql", "db.query.text": config.text } },
    async (span) => {
      try {
        return await run();
      } catch (err) {
        const code = (err as { code?: unknown } | null)?.code;
        failed(span, { "error.type": typeof code === "string" ? code : err instanceof Error ? err.name : "error" }, err);
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** A command as the AWS SDK v3 sends it: its class names the operation, its input the bucket and key, or the table. */
interface AwsCommand {
  readonly input?: { readonly Bucket?: unknown; readonly Key?: unknown; readonly TableName?: unknown };
}

interface Sender {
  send(command: AwsCommand, options?: unknown): Promise<unknown>;
}

/** The AWS services the stores send to, as a span names them. */
type AwsService = "S3" | "DynamoDB";

function awsAttributes(service: AwsService, command: AwsCommand, method: string): Attributes {
  const { Bucket, Key, TableName } = command.input ?? {};
  return {
    "rpc.system": "aws-api",
    "rpc.service": service,
    "rpc.method": method,
    ...(service === "S3" && typeof Bucket === "string" ? { "aws.s3.bucket": Bucket } : {}),
    ...(service === "S3" && typeof Key === "string" ? { "aws.s3.key": Key } : {}),
    ...(service === "DynamoDB" && typeof TableName === "string" ? { "aws.dynamodb.table_names": [TableName] } : {}),
  };
}

/** The HTTP status of an SDK answer or error (`$metadata.httpStatusCode`), if it has one. */
function httpStatus(outcome: unknown): number | undefined {
  const metadata = (outcome as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata;
  return typeof metadata?.httpStatusCode === "number" ? metadata.httpStatusCode : undefined;
}

/**
 * The client a FencedS3 or a FencedDynamo sends through: the caller's, every request of it a client
 * span `<Service>.<Operation>` (`S3.PutObject`, `DynamoDB.PutItem`: one per send(), the SDK's own
 * retries inside it). Everything else is the caller's client itself (its prototype), which is left
 * unchanged.
 */
export function tracedAwsClient<Client extends Sender>(client: Client, service: AwsService): Client {
  const send = (command: AwsCommand, options?: unknown): Promise<unknown> => {
    const method = command.constructor.name.replace(/Command$/, "");
    const attributes = awsAttributes(service, command, method);
    return tracer.startActiveSpan(`${service}.${method}`, { kind: SpanKind.CLIENT, attributes }, async (span) => {
      try {
        const answer = await client.send(command, options);
        const status = httpStatus(answer);
        if (status !== undefined && span.isRecording()) span.setAttribute("http.response.status_code", status);
        return answer;
      } catch (err) {
        const status = httpStatus(err);
        failed(
          span,
          {
            "error.type": err instanceof Error ? err.name : "error",
            ...(status === undefined ? {} : { "http.response.status_code": status }),
          },
          err,
        );
        throw err;
      } finally {
        span.end();
      }
    });
  };
  return Object.create(client, { send: { value: send } }) as Client;
}
