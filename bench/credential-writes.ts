// The credential writes gateway-layers.bench.ts and gateway-node-flags.ts send, as gateway.bench.ts's:
// client w of `concurrency` writes record cred/w under the credential of a lease on cred-writer/w,
// with a service API key that may write anything. `gatewayEnv` configures a gateway process to accept
// both (server-process.ts's gatewayArgs, to write them to PostgreSQL), `gatewayKeys` a gateway made in
// process (gateway-overhead.bench.ts); `writesTo` opens one keep-alive connection per client and
// returns the write as an Op.
import { randomBytes } from "node:crypto";
import { Pool } from "undici";
import { mintFenceCredential, type CredentialKey } from "@fenced/fence/credentials";
import type { Op } from "./measure.js";

const SERVICE_KEY = "service-key-0123456789abcdef";

export interface CredentialWrites {
  /** The gateway's API-key and fence-key environment. */
  gatewayEnv: Record<string, string>;
  /** The same for a gateway made in process (createGateway's options). */
  gatewayKeys: { apiKeys: { id: string; key: string; resources: string[]; keys: string[] }[]; fenceKeys: CredentialKey[] };
  /** The Authorization header every write sends: what an anchor server checks. */
  authorization: string;
  /** A pool of `concurrency` connections to the gateway on `port`, and the write; `what` names it in errors. */
  writesTo(port: number, what: string): { pool: Pool; op: Op };
}

export function credentialWrites(concurrency: number): CredentialWrites {
  const fenceKey: CredentialKey = { id: "bench", secret: randomBytes(32) };
  const credentials = Array.from({ length: concurrency }, (_, w) =>
    mintFenceCredential({ resource: `cred-writer/${w}`, token: 1n, holder: `bench-${w}` }, fenceKey, {
      expiresAt: Date.now() + 86_400_000,
    }),
  );
  const apiKeys = [{ id: "service", key: SERVICE_KEY, resources: [""], keys: [""] }];
  return {
    gatewayEnv: {
      FENCED_GATEWAY_API_KEYS: JSON.stringify(apiKeys),
      FENCED_GATEWAY_FENCE_KEYS: JSON.stringify([{ id: fenceKey.id, secret: Buffer.from(fenceKey.secret).toString("base64") }]),
    },
    gatewayKeys: { apiKeys, fenceKeys: [fenceKey] },
    authorization: `Bearer ${SERVICE_KEY}`,
    writesTo(port, what) {
      const pool = new Pool(`http://127.0.0.1:${port}`, { connections: concurrency, pipelining: 1 });
      const op: Op = async (w, i) => {
        const res = await pool.request({
          method: "PUT",
          path: `/v1/records/cred/${w}`,
          headers: {
            authorization: `Bearer ${SERVICE_KEY}`,
            "fencing-credential": credentials[w] as string,
            "content-type": "application/json",
          },
          body: JSON.stringify({ writer: w, seq: i, note: "invoice total updated" }),
        });
        await res.body.dump();
        if (res.statusCode !== 200) throw new Error(`${what} answered ${res.statusCode}`);
      };
      return { pool, op };
    },
  };
}
