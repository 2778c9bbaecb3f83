import type { Logger } from "pino";
import type { z } from "zod";
import type { FencedStore, ObjectStore, RecordStore, StoredRecord } from "@fenced/store";
import { OBJECT_VERSION, RECORD_VERSION } from "@fenced/store/internal";
import type { StoreCheck } from "./check.js";

/**
 * What a store registers to be served by the gateway (one store per family: createGateway takes one
 * store's options per family, `records` and `objects`, and each registration knows its own options
 * by their shape, `accepts`; a configuration names one store's section per family): which family
 * of routes it serves, its name outside the process, its configuration, how the gateway prepares it,
 * and its driver (`load()`), which makes, checks and sweeps it through the store's SDK.
 * The gateway's routes, readiness, problems, fences, lease grants, start checks, sweep and API
 * document loop over the registry (registry.ts); everything a store says of itself is here.
 */

/** The gateway's two families of routes, and the store contract each serves. */
export interface FamilyStores {
  /**
   * /v1/records: JSON values, and several written at once where the store can (putAll: a store
   * without a transaction, DynamoDB's, has none, and POST /v1/records answers that it cannot).
   */
  readonly records: FencedStore<unknown, StoredRecord> & Partial<Pick<RecordStore, "putAll">>;
  /** /v1/objects: bytes, streamed. */
  readonly objects: ObjectStore;
}
export type Family = keyof FamilyStores;

/** A version pattern's alternatives, without its anchors. */
const unanchored = (pattern: RegExp): string => pattern.source.replace(/^\^/, "").replace(/\$$/, "");

/**
 * The version each family's answers carry and its If-Match takes, whichever store serves it (a
 * version is opaque to clients; this is only its syntax): a record's is PostgreSQL's (a decimal from
 * its sequence) or DynamoDB's (a manifest's writeId, 32 hex digits); an object's, either store's
 * writeId. A store refuses the other's form (400) as a version it never issued.
 */
export const FAMILY_VERSIONS: Readonly<Record<Family, RegExp>> = {
  records: new RegExp(`^(?:${unanchored(RECORD_VERSION)}|${unanchored(OBJECT_VERSION)})$`),
  objects: OBJECT_VERSION,
};

/** A field of a section's input, so that a setting naming no field does not compile; any text for a registration of any section. */
type SectionField<Section extends z.ZodType> = [Extract<keyof z.input<Section>, string>] extends [never]
  ? string
  : Extract<keyof z.input<Section>, string>;

/**
 * A field of a store's section that can also be given by environment variable or flag: settings.ts
 * puts it in its table as `<store name>.<field>`, and config.ts reads it from there.
 */
interface SectionSetting<Field extends string> {
  /** The field of the section (`bucket`). */
  readonly field: Field;
  readonly variable: string;
  /** Its flag, as commander declares it (`--s3-bucket <bucket>`); absent for secrets, which never go on a command line. */
  readonly flag?: string;
  /** How its text is read: as is, or a number. */
  readonly read: "text" | "number";
}

/** What a store's options are made with from the configuration. */
interface OpenContext {
  readonly storeTimeoutMs: number;
  readonly logger: Logger;
  /** What closes what the store opened (a pool, a client), in the order opened: the gateway runs them at its stop. */
  readonly closers: (() => Promise<unknown>)[];
}

/** What a store's start work may do (createGateway's prepare()). */
export interface Prepare {
  readonly migrate?: boolean | undefined;
  readonly verify?: boolean | undefined;
}

/** What `fenced-gateway sweep` asks of a store, and what it answers: its part of the report and a line for stderr. */
export interface SweepRequest {
  readonly minAgeMs: number;
  readonly dryRun: boolean;
  readonly signal: AbortSignal;
  readonly storeTimeoutMs: number;
  /** One progress line on stderr. */
  readonly line: (text: string) => void;
}
/** Its part of the report on stdout (it wrote its own lines on stderr). */
type SweepDone = object;

/** A store's check or answer, as the start checks word a refusal of it. */
type CheckWords = Pick<StoreCheck, "state" | "problem" | "code" | "detail">;

/**
 * One store. `Options` is what createGateway takes for its family (a pool, a client and a bucket),
 * `Section` its section of the configuration, `Store` the store it makes (of its family's
 * contract). Its hooks are methods, so that a registration of any family and options is a
 * StoreRegistration: the gateway hands each hook only what that registration's own hooks, and its
 * driver's, made (fromSection's options, create's store).
 */
export interface StoreDefinition<
  F extends Family,
  Name extends string,
  Section extends z.ZodType,
  Options,
  Store extends FamilyStores[F] = FamilyStores[F],
> {
  readonly family: F;
  /** Its name outside the process: its readiness check, its fence in GET /v1/fences, a problem's `backend`, its configuration section. */
  readonly name: Name;
  /** How an operator names it: "PostgreSQL". */
  readonly title: string;
  /** Its entry in GET /v1/fences' answer, as the API document describes it. */
  readonly fenceDescription: string;
  readonly config: {
    /** Its section of the configuration. */
    readonly section: Section;
    /** The fields of its section that can also be given by environment variable or flag. */
    readonly settings: readonly SectionSetting<SectionField<Section>>[];
    /** The field without which its section means nothing (`what` it names, for an operator); one of `settings`, with a flag. */
    readonly enabledBy: { readonly field: SectionField<Section>; readonly what: string };
    /** The fields of its section `fenced-gateway sweep` reads ("": all of them). */
    readonly sweepFields: readonly string[];
  };
  /** Whether createGateway's options for its family are this store's (a pool, a bucket, a table, a container). */
  accepts(options: object): options is Options & object;
  /**
   * Its driver: what reaches the backend through its SDK. Loaded only for a store the bin serves or
   * sweeps, since an SDK is tens of MB of code (createGateway, the embedding API, loads every one).
   */
  load(): Promise<StoreDriver<Section, Options, Store>>;
  /** Its pool of connections, if it has one: /metrics reports it (fenced_gateway_<name>_pool), and admission floors its family's limit at its size. */
  pool?(options: Options): StorePool | undefined;
  /** What an objects store takes of a body, where it says (BodyLimits); absent: the gateway's own limits. */
  bodyLimits?(options: Options, store: Store): BodyLimits;
  /** The start work: `call` times each call into the store as a request's are (metrics.time). */
  prepare(store: Store, prepare: Prepare, call: (operation: string, work: () => Promise<unknown>) => Promise<unknown>): Promise<void>;
  /** The backend's own code in an error no store classifies (an SQLSTATE, an S3 error code); undefined: not the backend's. */
  backendCode(err: unknown): string | undefined;
  /** Why a failed start check refuses the start, for an operator; undefined: not refused (the start's own work repairs it). */
  startRefusal(check: CheckWords, timeoutMs: number): string | undefined;
  /** What to do when the backend refused the start's `operation` with its own `code`. */
  backendFix(code: string, operation: string): string;
  /**
   * Why nothing is ever left behind for `fenced-gateway sweep` to delete (PostgreSQL: one
   * transaction), which it answers without loading the driver; undefined: its driver sweeps (S3's
   * orphaned bodies). drivers.test.ts holds that exactly one of the two says what the sweep does.
   */
  readonly nothingToSweep?: string;
}

/**
 * What a store's SDK does for the gateway: make its options from a configured section, the store
 * from its options, and check or sweep it. A module of its own per store (`<store>-driver.ts`), which
 * its registration's `load()` imports, and `drivers.ts` too, for createGateway.
 */
export interface StoreDriver<Section extends z.ZodType, Options, Store> {
  /** createGateway's options for its family, from its configured section. */
  fromSection(section: z.output<Section>, context: OpenContext): Promise<Options>;
  /** The store, each call bounded by `storeTimeoutMs`. */
  create(options: Options, storeTimeoutMs: number): Store;
  /** Readiness: read-only, within `timeoutMs`. */
  check(store: Store, options: Options, timeoutMs: number): Promise<StoreCheck>;
  /** `fenced-gateway sweep`'s part for this store; only a store that can leave something behind has one (nothingToSweep). */
  sweep?(section: z.output<Section>, request: SweepRequest): Promise<SweepDone>;
}

/**
 * A store's pool of connections, as pg's Pool shows it. A pool-like object of the user's may have
 * none of it: what it lacks is not reported.
 */
export interface StorePool {
  readonly totalCount: number;
  readonly idleCount: number;
  readonly waitingCount: number;
  /** Its connections at most (pg's Pool: 10 when not given). */
  readonly options?: { readonly max?: number | undefined } | undefined;
}

/** What an objects store takes of a body (StoreDefinition.bodyLimits). */
export interface BodyLimits {
  /** The largest body it can write: the gateway's objectBytes is capped at it, so a larger body is a 413 before any I/O. */
  readonly maxBodyBytes?: number | undefined;
  /** Bodies of known length up to this size are read whole, for the store to keep inside its manifest (default 64 KiB). */
  readonly inlineBytes?: number | undefined;
}

/** A registration of any family and options: what the gateway's loops take (each hook gets only what its own registration made). */
export type StoreRegistration = StoreDefinition<Family, string, z.ZodType, unknown>;

/** A driver of any registration: what createGateway is given, one per store it may serve. */
export type AnyStoreDriver = StoreDriver<z.ZodType, unknown, FamilyStores[Family]>;

/** A store's driver could not be loaded: its SDK, a dependency of the gateway, is missing or broken in this install. */
export class DriverLoadError extends Error {
  override readonly name = "DriverLoadError";
  constructor(store: string, cause: unknown) {
    super(
      `the ${store} store's SDK could not be loaded: reinstall the gateway (${cause instanceof Error ? cause.message : String(cause)})`,
      { cause },
    );
  }
}
