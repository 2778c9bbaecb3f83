import type { Readable } from "node:stream";
import type { CheckedFence, Fence, FenceSet } from "./fence.js";

/*
 * The store contract: what every fenced store promises, whatever it keeps its keys in. FencedPostgres
 * (records: JSON values) and FencedS3 (objects: bytes) implement it; the conformance suite
 * (conformance/) runs the same cases against each, and a new store joins it with a Subject (how to
 * open it on fresh state and read back what it keeps) and one line.
 *
 * The rules (PROTOCOL.md, "What the storage guarantees"), each decided atomically with the write:
 *   ratchet     a token lower than the highest accepted for the fence's resource is refused (StaleTokenError)
 *   holder      an equal token is accepted only from the holder that presented it first
 *   owner       a key belongs to the resource that created it, or received it by transfer();
 *               a write under another resource is refused (ResourceMismatchError), a tombstone keeps the owner
 *   ifVersion   a write with ifVersion lands only on that version (VersionMismatchError)
 * A refused call changes nothing. A write that breaks two rules is refused by one of them; which one
 * is not part of the contract (PostgreSQL checks the ratchet first, S3 the owner). Every failure is a FencedError whose `applied` says whether
 * anything of it may have taken effect: "no" (refused, or unavailable: StoreUnavailableError),
 * "unknown" (the answer to a write was lost: OutcomeUnknownError). Bad arguments are an
 * InvalidArgumentError before any I/O; a fence of a lease known to have ended is refused with the
 * lease's own error, `applied: "no"`; an aborted signal ends the call with its reason.
 *
 * Two families of stores build on it, as the gateway serves them: records (JSON values, several
 * written at once: RecordStore, FencedPostgres) and objects (bytes, streamed: ObjectStore, FencedS3).
 * What only one store can do stays on that store, outside the contract: PostgreSQL's transaction()
 * and migrate(), S3's getBytes(), update() and sweep().
 */

/** What a write answers. */
export interface WriteResult {
  /** Opaque; pass it back as ifVersion. Unique per write of the key, tombstones and transfers included; never reused. */
  readonly version: string;
  /** The token the write was accepted under (for transfer(), the to-fence's). */
  readonly token: bigint;
}

/** What a read says of the key's current version, beside its value. */
export interface StoredVersion {
  readonly version: string;
  /** Token of the write that produced this version. */
  readonly token: bigint;
  /** The key's owner: the resource that created it, or that it was transferred to. */
  readonly resource: string;
  /** Holder of the fence of that write; null for a fence without a holder. */
  readonly holder: string | null;
}

/**
 * An operation's abort signal (pass the lease's: a lost lease stops the call). The call then throws
 * `signal.reason`; a write whose commit (PostgreSQL) or manifest PUT (S3) was already sent may or
 * may not have landed (read the key to know). PROTOCOL.md, "Aborts", says what an abort can still stop.
 */
export interface SignalOptions {
  readonly signal?: AbortSignal | undefined;
}

export interface WriteOptions extends SignalOptions {
  /**
   * The lease's fence. Refused (StaleTokenError) unless its token is above the highest accepted for
   * fence.resource, or equal to it and presented by the same holder; refused (ResourceMismatchError)
   * if the key belongs to another resource. A lease that knows it ended (released, expired) is
   * refused before any I/O with a LeaseLostError saying `applied: "no"`, the lease's own as its cause.
   */
  readonly fence: Fence;
  /**
   * Write only if the key is still at this version (from get, put or transfer; a delete's too where
   * the store declares ifVersionMatchesTombstone); else VersionMismatchError.
   */
  readonly ifVersion?: string | undefined;
}

export interface TransferOptions extends SignalOptions {
  /** A fence of the key's current owner, admitted by that resource's ratchet. */
  readonly from: Fence;
  /** A fence of the new owner (another resource), admitted by its ratchet too. Both are raised. */
  readonly to: Fence;
  /** Transfer only if the key is still at this version. */
  readonly ifVersion?: string | undefined;
}

/**
 * Where stores may differ, each a promise of its own that the conformance suite tests as declared.
 * Neither changes what a write is allowed to do under the rules above.
 */
export interface StoreCapabilities {
  /**
   * register() of several fences raises all of them or none: one refused, none is raised
   * (PostgreSQL: one statement). Without it (S3: one fence object each, no transaction over
   * objects), the others are raised as if registered alone — harmless: a raise only refuses older holders.
   */
  readonly atomicRegister: boolean;
  /**
   * ifVersion may name a tombstone's version (what delete() answered): "write only if the key is
   * still deleted as I left it" (S3: a tombstone is a manifest like any other). Without it
   * (PostgreSQL), ifVersion matches only a live record, and a tombstone's version is a VersionMismatchError.
   */
  readonly ifVersionMatchesTombstone: boolean;
}

/**
 * A fenced store. `Value` is what a write takes, `Read` what a read gives (StoredVersion and the value).
 * register() and fence() are the resource's ratchet on its own: raise it without writing a key
 * (fence-on-acquire), and read it (the highest token and its holder; undefined if never raised).
 * transfer() moves a key to another resource (undefined: the key was never written).
 * verify() proves the backend is set up to enforce the rules, or throws StoreSetupError.
 */
export interface FencedStore<Value, Read extends StoredVersion> {
  readonly capabilities: StoreCapabilities;
  verify(options?: SignalOptions): Promise<unknown>;
  register(fences: Fence | FenceSet, options?: SignalOptions): Promise<void>;
  fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined>;
  put(key: string, value: Value, options: WriteOptions): Promise<WriteResult>;
  delete(key: string, options: WriteOptions): Promise<WriteResult>;
  get(key: string, options?: SignalOptions): Promise<Read | undefined>;
  transfer(key: string, options: TransferOptions): Promise<WriteResult | undefined>;
}

/** One record of putAll(): written exactly as put(key, value, { fence, ifVersion }) under the fence of `resource`. */
export interface PutAllWrite {
  readonly key: string;
  readonly value: unknown;
  /**
   * The resource whose fence (in options.fences) the write is under: a new key becomes its, a key
   * owned by another resource is refused (ResourceMismatchError). May be left out only when there
   * is one fence; a resource that is not among the fences is an InvalidArgumentError.
   */
  readonly resource?: string | undefined;
  /** Write only if the record is still at this version; else VersionMismatchError. */
  readonly ifVersion?: string | undefined;
}

export interface PutAllOptions extends SignalOptions {
  /**
   * Every fence the writes are under: an array of fences, or a lease (of one resource or several).
   * Each is checked against its resource's ratchet and raised, all of them, whether or not a write
   * names it; one refused is a StaleTokenError and nothing is written.
   */
  readonly fences: FenceSet;
}

/** A record as a read gives it: its JSON value, and which write of which lease produced this version. */
export interface StoredRecord extends StoredVersion {
  readonly value: unknown;
}

/** The records family: JSON values, and several written at once, all or none (putAll). */
export interface RecordStore extends FencedStore<unknown, StoredRecord> {
  putAll(writes: readonly PutAllWrite[], options: PutAllOptions): Promise<WriteResult[]>;
}

/** What an object's put() may carry beside the contract's options. */
export interface ObjectWriteOptions extends WriteOptions {
  readonly contentType?: string | undefined;
  /** Length of a stream body, if known. */
  readonly contentLength?: number | undefined;
}

/** An object as a read gives it: its body an open stream (consume or destroy it), its size and content type where known. */
export interface StoredObject extends StoredVersion {
  readonly body: Readable;
  readonly size: number | undefined;
  readonly contentType: string | undefined;
}

/** The objects family: bytes in memory or a stream, read back as a stream. */
export interface ObjectStore extends FencedStore<string | Uint8Array | Readable, StoredObject> {
  put(key: string, body: string | Uint8Array | Readable, options: ObjectWriteOptions): Promise<WriteResult>;
}
