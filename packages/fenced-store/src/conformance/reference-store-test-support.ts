import { InvalidArgumentError } from "@fenced/fence";
import type {
  FencedStore,
  SignalOptions,
  StoreCapabilities,
  StoredVersion,
  TransferOptions,
  WriteOptions,
  WriteResult,
} from "../contract.js";
import { ResourceMismatchError, StaleTokenError, StoreUnavailableError, VersionMismatchError } from "../errors.js";
import { admits, assertKey, assertResource, type CheckedFence, type Fence, type FenceSet } from "../fence.js";
import { checkSignal, liveFence, oneOrMoreFences, optionsObject, refuseAborted, signalOnly, transferFences } from "../options.js";
import type { Subject } from "./subject-test-support.js";

/*
 * The reference store: the store contract over two maps, in one process, in as few lines as the rules
 * take. It is what ARCHITECTURE.md's "Add a store" walks through, and it passes the conformance suite
 * (memory.test.ts). Each call is one synchronous step after its checks, so it needs no lock and no
 * compare-and-swap: what a real store gets from a transaction or a conditional write.
 */

interface Row extends StoredVersion {
  /** undefined: a tombstone, which keeps the key's owner. */
  readonly value: string | undefined;
}

type Highest = { readonly token: bigint; readonly holder: string | null };

class ReferenceStore implements FencedStore<string, StoredVersion & { readonly value: string }> {
  readonly capabilities: StoreCapabilities = Object.freeze({ atomicRegister: true, ifVersionMatchesTombstone: true });
  private readonly fences = new Map<string, Highest>();
  private readonly rows = new Map<string, Row>();
  private versions = 0;

  /** Calls that passed their checks and reached the maps (or, down, failed there). */
  tries = 0;

  /** down: every call that passes its checks fails as a backend refusing connections would. */
  constructor(private readonly down = false) {}

  async verify(options?: SignalOptions): Promise<void> {
    return this.step("verify", signalOnly(options), () => undefined);
  }

  async register(fences: Fence | FenceSet, options?: SignalOptions): Promise<void> {
    const checked = oneOrMoreFences(fences);
    return this.step("register", signalOnly(options), () => this.raise(checked));
  }

  async fence(resource: string, options?: SignalOptions): Promise<CheckedFence | undefined> {
    assertResource(resource);
    return this.step("fence", signalOnly(options), () => {
      const highest = this.fences.get(resource);
      return highest && { resource, ...highest };
    });
  }

  async put(key: string, value: string, options: WriteOptions): Promise<WriteResult> {
    if (typeof value !== "string") throw new InvalidArgumentError("value", "must be a string");
    return this.write("put", key, value, options);
  }

  async delete(key: string, options: WriteOptions): Promise<WriteResult> {
    return this.write("delete", key, undefined, options);
  }

  async get(key: string, options?: SignalOptions): Promise<(StoredVersion & { readonly value: string }) | undefined> {
    assertKey(key);
    return this.step("get", signalOnly(options), () => {
      const row = this.rows.get(key);
      return row?.value === undefined ? undefined : { ...row, value: row.value };
    });
  }

  async transfer(key: string, options: TransferOptions): Promise<WriteResult | undefined> {
    assertKey(key);
    const o = optionsObject(options, "{ from, to, ifVersion?, signal? }");
    const { from, to } = transferFences(o.from, o.to);
    const ifVersion = version(o.ifVersion);
    return this.step("transfer", checkSignal(o.signal), () => {
      const row = this.rows.get(key);
      // Never written: nothing to move, unless the caller expected a version of it.
      if (row === undefined && ifVersion !== undefined) throw new VersionMismatchError(key, ifVersion, undefined);
      if (row === undefined) return undefined;
      this.check(key, row, from, ifVersion);
      this.raise([from, to]);
      return this.land(key, row.value, to);
    });
  }

  private async write(operation: string, key: string, value: string | undefined, options: WriteOptions): Promise<WriteResult> {
    assertKey(key);
    const o = optionsObject(options, "{ fence, ifVersion?, signal? }");
    const fence = liveFence(o.fence, "options.fence");
    const ifVersion = version(o.ifVersion);
    return this.step(operation, checkSignal(o.signal), () => {
      this.check(key, this.rows.get(key), fence, ifVersion);
      this.raise([fence]);
      return this.land(key, value, fence);
    });
  }

  /** The rules, in PROTOCOL.md's order: the ratchet (and holder), the owner, then ifVersion. */
  private check(key: string, row: Row | undefined, fence: CheckedFence, ifVersion: string | undefined): void {
    this.admitted(fence);
    if (row !== undefined && row.resource !== fence.resource) throw new ResourceMismatchError(key, fence.resource, row.resource);
    if (ifVersion !== undefined && row?.version !== ifVersion)
      throw new VersionMismatchError(key, ifVersion, row?.value === undefined ? undefined : row.version);
  }

  private admitted(fence: CheckedFence): void {
    const highest = this.fences.get(fence.resource);
    if (highest !== undefined && !admits(highest, fence))
      throw new StaleTokenError(fence.resource, fence.token, highest.token, highest.holder);
  }

  /** Every fence admitted first, then every one raised: all or none. */
  private raise(fences: readonly CheckedFence[]): void {
    for (const one of fences) this.admitted(one);
    for (const one of fences) this.fences.set(one.resource, { token: one.token, holder: one.holder });
  }

  private land(key: string, value: string | undefined, fence: CheckedFence): WriteResult {
    const written: Row = { value, version: String(++this.versions), token: fence.token, resource: fence.resource, holder: fence.holder };
    this.rows.set(key, written);
    return { version: written.version, token: written.token };
  }

  /** One call after its checks: refused if aborted, failed if down, else `work` as one step. Every call is async: its refusals are rejections, never throws. */
  private step<T>(operation: string, signal: AbortSignal | undefined, work: () => T): Promise<T> {
    // A throw in the executor rejects the promise.
    return new Promise<T>((resolve) => {
      refuseAborted(signal);
      this.tries++;
      if (this.down) throw new StoreUnavailableError("reference", "refused", operation);
      resolve(work());
    });
  }

  /** Everything it keeps, for "nothing changed". */
  state(): unknown {
    return { fences: [...this.fences], rows: [...this.rows] };
  }
}

function version(ifVersion: unknown): string | undefined {
  if (ifVersion !== undefined && typeof ifVersion !== "string") throw new InvalidArgumentError("options.ifVersion", "must be a string");
  return ifVersion;
}

/** The reference store as the conformance suite takes it. */
export function referenceSubject(): Promise<Subject<string, StoredVersion & { readonly value: string }>> {
  return Promise.resolve({
    open() {
      const store = new ReferenceStore();
      // It remembers nothing but what it stores: the store itself is the one that remembers nothing.
      return Promise.resolve({ store, again: store, state: () => Promise.resolve(store.state()) });
    },
    unreachable() {
      const store = new ReferenceStore(true);
      return Promise.resolve({ store, tries: () => store.tries });
    },
    value: (text) => text,
    text: (read) => Promise.resolve(read.value),
    stop: () => Promise.resolve(),
  });
}
