import { context } from "@opentelemetry/api";
import type { WriteResult } from "../contract.js";
import type { StoreBackend } from "../errors.js";
import { assertResource, type CheckedFence, type Fence, type FenceSet } from "../fence.js";
import { observeCall, observedCall } from "../observe.js";
import { liveFence, oneOrMoreFences, optionsObject } from "../options.js";
import { Deadline } from "../deadline.js";
import { withinDeadline } from "./failures.js";
import type { StoreIo } from "./io.js";
import { NeverWrittenError, type Content, type Intent } from "./intent.js";
import { checkVersion, liveSignal, signalOptions, transferOptions } from "./options.js";
import { writeManifest } from "./write.js";

/**
 * The calls every store of the algorithm makes the same way over its StoreIo: register, fence,
 * transfer, a put or delete of content already checked, and the deadline and typed failure around
 * each. A store (../dynamodb/store.ts, ../azure-blob/store.ts) checks what is its own (a value's
 * kind and size, a body) and hands the rest here; each call is its observed span (../observe.ts).
 */

/** A write's options once checked: the fence copied, so a caller mutating it mid-write changes nothing. */
export interface CheckedWrite {
  readonly fence: CheckedFence;
  readonly ifVersion: string | undefined;
  readonly signal: AbortSignal | undefined;
}

/** `{ fence, ifVersion?, signal? }`, and the raw options for a store's own (contentType, …). */
export function checkedWrite(options: unknown): CheckedWrite & { readonly raw: Record<string, unknown> } {
  const raw = optionsObject(options, "{ fence, ... }");
  return { fence: liveFence(raw.fence, "options.fence"), ifVersion: checkVersion(raw.ifVersion), signal: liveSignal(raw.signal), raw };
}

export class CasCalls {
  constructor(
    private readonly io: StoreIo,
    private readonly store: StoreBackend,
  ) {}

  /** Raises each resource's fence record (writes no key); StaleTokenError if one does not admit it. */
  async register(fence: Fence | FenceSet, options: unknown): Promise<void> {
    const fences = oneOrMoreFences(fence);
    const { signal } = signalOptions(options);
    const sent = fences.map(() => ({ open: false }));
    const open = { get open() { return sent.some((one) => one.open); } }; // prettier-ignore
    await this.call("register", undefined, signal, (deadline) => this.io.raiseFences(fences, deadline.signal, sent), open, fences);
  }

  /** The resource's fence record as it is now: the highest token registered or written with, and its holder. */
  async fence(resource: string, options: unknown): Promise<CheckedFence | undefined> {
    assertResource(resource);
    const { signal } = signalOptions(options);
    const found = await this.call("fence", undefined, signal, (deadline) => this.io.readFence(resource, deadline.signal));
    return found === null ? undefined : { resource, token: found.highest.token, holder: found.highest.holder };
  }

  /**
   * One manifest write that requires the key to belong to from.resource, admits both fences (raising
   * both fence records), and records `to` as the writer and to.resource as the owner; the content is
   * unchanged, the version new. Undefined if the key was never written (with ifVersion, a
   * VersionMismatchError instead).
   */
  async transfer(key: string, options: unknown): Promise<WriteResult | undefined> {
    const o = transferOptions(options);
    return observedCall({ store: this.store, operation: "transfer", key, fences: [o.from, o.to] }, async () => {
      const deadline = new Deadline(this.io.options.timeoutMs, o.signal);
      try {
        return await writeManifest(this.io, {
          key,
          owner: o.from.resource,
          fences: [o.from, o.to],
          writer: o.to,
          ifVersion: o.ifVersion ?? { exists: true },
          content: { kind: "carry" },
          contentType: undefined,
          operation: "transfer",
          deadline,
          signal: deadline.signal,
          endDeadline: false,
        });
      } catch (err) {
        if (err instanceof NeverWrittenError) return undefined;
        throw err;
      } finally {
        deadline.end(true);
      }
    });
  }

  /** A put or delete whose every input was checked before this call: the deadline starts here. */
  write(operation: "put" | "delete", key: string, o: CheckedWrite, content: Content, contentType?: string): Promise<WriteResult> {
    const deadline = new Deadline(this.io.options.timeoutMs, o.signal);
    const intent: Intent = {
      key,
      owner: o.fence.resource,
      fences: [o.fence],
      writer: o.fence,
      ifVersion: o.ifVersion,
      content,
      contentType,
      operation,
      deadline,
      signal: deadline.signal,
      endDeadline: true,
    };
    // The write runs in the call's span, entered straight from here.
    const call = observeCall({ store: this.store, operation, key, fences: [o.fence] });
    return call.ended(context.with(call.context, writeManifest, undefined, this.io, intent));
  }

  /** Runs one call within its deadline, its failure typed (./failures.ts). */
  call<T>(
    operation: string,
    key: string | undefined,
    signal: AbortSignal | undefined,
    work: (deadline: Deadline) => Promise<T>,
    sent: { readonly open: boolean } = { open: false },
    fences?: readonly CheckedFence[],
  ): Promise<T> {
    return observedCall({ store: this.store, operation, key, fences }, () =>
      withinDeadline(this.io.options.timeoutMs, signal, { operation, key }, this.io.failures, work, sent),
    );
  }
}
