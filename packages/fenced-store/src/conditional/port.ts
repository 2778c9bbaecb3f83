/**
 * The port every store of the object algorithm is built on (PROTOCOL.md, "S3", "The write"): a
 * record that is written only if it is absent, or still has the version (ETag) it was read at. The
 * algorithm — fence objects per resource, a compare-and-swapped manifest per key (cas/io.ts,
 * cas/write.ts) — sees only this; each backend is an adapter of it:
 *
 *   s3/conditional.ts     S3 objects: PUT with If-None-Match: * or If-Match, GET with If-None-Match (304)
 *   dynamodb/items.ts     DynamoDB items: PutItem with a ConditionExpression on the item's ETag attribute
 *   azure-blob/blobs.ts   Azure block blobs: Put Blob with If-None-Match: * or If-Match, Get Blob with If-None-Match (304)
 *
 * INVARIANT (each adapter's, checked on its real server by port-suite-test-support.ts): a write
 * with `ifNoneMatch` lands only where the record is absent, one with `ifMatch` only where it still
 * has that ETag; a refused write changes nothing; a record's ETag changes whenever its bytes do
 * (S3: their digest; DynamoDB: new with every write; Azure: new with every write), and the
 * algorithm never writes the same bytes twice (each fence and manifest carries a fresh writeId), so
 * an unchanged ETag means unchanged bytes; a write is sent at most once, never again by a client
 * SDK on its own.
 */

/** How a failed conditional write is to be understood. */
export type Failure =
  /** The condition did not hold (S3: 412, or AWS's 404 for If-Match on a missing key; DynamoDB: ConditionalCheckFailedException). */
  | "precondition"
  /** A concurrent conditional write of the same record (S3: 409 ConditionalRequestConflict; DynamoDB: TransactionConflictException); re-read and retry. */
  | "conflict"
  /**
   * 5xx, timeouts, resets, a 2xx whose answer then failed: the write may or may not have landed (and
   * radosgw answers the loser of a true race with 500). Only reading the record back can tell.
   */
  | "ambiguous"
  /**
   * Throttling, a request timeout, a clock skew: refused before it was applied (it did not land),
   * and worth another try after a pause. The caller retries, after a new fence read: the SDK would
   * send the same request again after its backoff, long after the fence read it was checked against.
   */
  | "throttled"
  /** Anything else (403, 400, a missing bucket or table): retrying cannot help. */
  | "fatal"
  /** No connection could be opened: the request never left this process, so it cannot land. */
  | "unsent";

export type Condition = { readonly ifNoneMatch: true } | { readonly ifMatch: string };

export type WriteOutcome =
  { readonly ok: true; readonly etag: string } | { readonly ok: false; readonly failure: Failure; readonly error: unknown };

/** A record as read: its ETag (bare, unquoted) and its bytes. */
export interface Stored {
  readonly etag: string;
  readonly body: Buffer;
}

/** What a conditional read found: the record still at the ETag sent, or as it is now (undefined: absent). */
export type Revalidated = { readonly unchanged: true } | { readonly unchanged: false; readonly object: Stored | undefined };

/**
 * Where backends differ beyond the primitive. What a backend lacks, its store does without: the
 * DynamoDB store writes every body inline (never content "object"), and the algorithm reads no key
 * back to clean up data objects it cannot have made; a record over maxRecordBytes is refused
 * (InvalidArgumentError) before it is sent.
 */
export interface PortCapabilities {
  /**
   * readIfChanged answers "unchanged" without the body (S3: a 304). False: it reads the whole
   * record and compares its ETag (DynamoDB has no conditional read): the same answer, one more
   * read's bytes.
   */
  readonly notModified: boolean;
  /**
   * A body may live in data objects of its own (uploads, server-side copies, multipart: S3). False:
   * every body is inline in its manifest, and a manifest is at most maxRecordBytes (DynamoDB).
   */
  readonly dataObjects: boolean;
  /** The largest record write() takes, in bytes (DynamoDB: an item of 400 KB, its attribute names included). */
  readonly maxRecordBytes: number;
}

/** The conditional primitive, one adapter per backend. Every request is bounded: by the signal given, or by the adapter's own timeout. */
export interface ConditionalPort {
  readonly capabilities: PortCapabilities;
  /** The record as it is now; undefined: absent. */
  read(key: string, signal?: AbortSignal): Promise<Stored | undefined>;
  /** The record unless it still has `etag` (sound only because ETags never repeat). */
  readIfChanged(key: string, etag: string, signal?: AbortSignal): Promise<Revalidated>;
  /** Never throws: the outcome says how a failure is to be understood. */
  write(key: string, body: Buffer, condition: Condition, signal?: AbortSignal): Promise<WriteOutcome>;
  /** Unconditional: only for records whose names are unique per write (data objects, probes). */
  remove(key: string, signal?: AbortSignal): Promise<void>;
  /**
   * A "precondition" came back although the record still had exactly the ETag sent: the backend did
   * not recognise this spelling of it (S3 backends disagree on quoting). True if the adapter now
   * spells it another way and the write is worth another try; false: it cannot help.
   */
  noteRefusedOwnEtag(): boolean;
}
