import type { CounterAccess, CounterWrite, WriteLease } from "./counter-store.js";
import type { GatewayClient, GatewayArea } from "./gateway-client.js";
import { parseDoc, type Backend, type CounterDoc, type Mode } from "./history.js";

/**
 * The counter documents through a gateway: `GET` for reads (the ETag is the version), `PUT` with the
 * lease's `Fencing-Credential` for writes, plus `If-Match: "<version read>"` in "full". Records in
 * PostgreSQL hold the document as JSON, objects in S3 as its JSON bytes: the same document the
 * library workers write, so the controller's setup and final read need no gateway. A pair's two
 * records go in one `POST /v1/records` (one transaction); S3 objects are written one by one.
 */
export class GatewayCounters implements CounterAccess {
  private readonly area: GatewayArea;
  /** Records only (PostgreSQL): `POST /v1/records`, several counters in one transaction under their resources' credentials. */
  readonly writeAll?: (writes: readonly CounterWrite[]) => Promise<void>;

  constructor(
    private readonly client: GatewayClient,
    backend: Backend,
    private readonly mode: Exclude<Mode, "unfenced">,
  ) {
    this.area = backend === "postgres" ? "records" : "objects";
    if (backend === "postgres") this.writeAll = (writes) => this.writeRecords(writes);
  }

  private async writeRecords(writes: readonly CounterWrite[]): Promise<void> {
    const fences = writes.map((w) => {
      if (w.credential === undefined) throw new Error("a write through the gateway needs the fence credential of a gateway lease");
      return w.credential;
    });
    await this.client.writeAll(
      fences,
      writes.map((w) => ({
        key: w.key,
        resource: w.fence.resource,
        value: { count: w.doc.count, log: [...w.doc.log] },
        ...(this.mode === "full" && w.version !== undefined ? { ifVersion: w.version } : {}),
      })),
    );
  }

  async read(key: string): Promise<{ doc: CounterDoc; version: string | undefined }> {
    const { body, version } = await this.client.read(this.area, key);
    return { doc: parseDoc(JSON.parse(body.toString("utf8"))), version };
  }

  async write(key: string, doc: CounterDoc, lease: WriteLease, version: string | undefined): Promise<void> {
    // Only the gateway's own credential writes: it carries the fence, and nothing else may name one.
    if (lease.credential === undefined) throw new Error("a write through the gateway needs the fence credential of a gateway lease");
    const value = { count: doc.count, log: [...doc.log] };
    await this.client.write(
      this.area,
      key,
      Buffer.from(JSON.stringify(value)),
      lease.credential,
      this.mode === "full" ? version : undefined,
    );
  }

  close(): Promise<void> {
    this.client.close();
    return Promise.resolve();
  }
}
