import { hash, timingSafeEqual } from "node:crypto";
import type { Request } from "express";
import { z } from "zod";
import { HttpProblem } from "../problems/problem.js";

/**
 * An API key and what it may touch. `resources` and `keys` are prefixes ("" = everything; end a
 * prefix with "/" to mean a folder: "orders" also matches "orders-archive"). A write needs both its
 * key and its fence's resource in scope; a lease needs its resource in scope.
 */
export const apiKeySchema = z
  .strictObject({
    id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/, "id: 1 to 64 of A-Z a-z 0-9 . _ -"),
    /** The secret itself (at least 16 characters of the bearer-token alphabet) … */
    key: z
      .string()
      .regex(/^[A-Za-z0-9._~+/-]{16,256}=*$/, "key: 16 to 256 characters of A-Z a-z 0-9 . _ ~ + / - (RFC 6750 b64token)")
      .optional(),
    /** … or its SHA-256 in hex, so that a config file need not hold the secret. */
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, "sha256: 64 lowercase hex digits")
      .optional(),
    resources: z.array(z.string().max(512)).min(1),
    keys: z.array(z.string().max(512)).min(1),
    /** Reads only: writes and leases answer 403. */
    readOnly: z.boolean().default(false),
    /**
     * May write with a plain Fencing-Token / Fencing-Resource / Fencing-Holder instead of a signed
     * Fencing-Credential: a service that runs the lock itself and is trusted to present only fences its
     * lock issued. Any other key can write only with a credential the gateway (or the shared secret) minted.
     */
    trustedLockClient: z.boolean().default(false),
  })
  .refine((k) => (k.key === undefined) !== (k.sha256 === undefined), { message: "give exactly one of key and sha256" });

export type ApiKeyConfig = z.input<typeof apiKeySchema>;

export interface Principal {
  readonly id: string;
  readonly resources: readonly string[];
  readonly keys: readonly string[];
  readonly readOnly: boolean;
  readonly trustedLockClient: boolean;
}

const REALM = 'Bearer realm="fenced-gateway"';
const BEARER = /^Bearer +([A-Za-z0-9._~+/-]+=*) *$/i;

/**
 * A text's SHA-256, hashed to hex and decoded into a Buffer from Node's pool: a digest asked for as a
 * Buffer gets a memory block of its own, allocated, tracked and later swept by the garbage collector
 * (1.2 µs a digest, against 0.4 µs this way, on Node 24). Every request's key is hashed.
 */
function sha256(text: string): Buffer {
  return Buffer.from(hash("sha256", text, "hex"), "hex");
}

/**
 * The API keys' list rule, for the gateway's configuration and its constructor alike: no two entries
 * share an id (it names the key in logs and metrics) or a secret (a bearer key names one principal).
 */
export function distinctApiKeys(keys: readonly z.infer<typeof apiKeySchema>[], ctx: z.RefinementCtx): void {
  const ids = new Map<string, number>();
  const secrets = new Map<string, number>();
  keys.forEach((k, i) => {
    const id = ids.get(k.id);
    if (id === undefined) ids.set(k.id, i);
    else
      ctx.addIssue({
        code: "custom",
        path: [i, "id"],
        message: `duplicate id ${JSON.stringify(k.id)}, apiKeys[${id}]'s too: give each key an id of its own`,
      });
    const digest = k.sha256 ?? sha256(k.key ?? "").toString("hex");
    const same = secrets.get(digest);
    if (same === undefined) secrets.set(digest, i);
    else ctx.addIssue({ code: "custom", path: [i], message: `duplicate secret: the same secret as apiKeys[${same}]` });
  });
}

export class ApiKeys {
  readonly #digests: Buffer[];
  readonly #principals: Principal[];

  constructor(configs: readonly ApiKeyConfig[]) {
    const parsed = z.array(apiKeySchema).min(1, "at least one API key is needed").superRefine(distinctApiKeys).parse(configs);
    this.#digests = [];
    this.#principals = [];
    for (const k of parsed) {
      this.#digests.push(k.sha256 !== undefined ? Buffer.from(k.sha256, "hex") : sha256(k.key ?? ""));
      this.#principals.push({
        id: k.id,
        resources: [...k.resources],
        keys: [...k.keys],
        readOnly: k.readOnly,
        trustedLockClient: k.trustedLockClient,
      });
    }
  }

  /**
   * The principal for the request's bearer key, or 401. Comparing SHA-256 digests makes every
   * comparison the same length, and timingSafeEqual against every configured key, without stopping
   * at a match, keeps the time independent of which key (if any) matched and of how much of it did.
   */
  authenticate(req: Request): Principal {
    const known = (req as Authenticated)[AUTHENTICATED];
    if (known !== undefined && known.by === this) return known.principal;
    const header = req.headers.authorization;
    if (header === undefined || header === "")
      throw new HttpProblem("unauthorized", "an API key is required: Authorization: Bearer <key>", {}, { "WWW-Authenticate": REALM });
    const presented = BEARER.exec(header)?.[1];
    const digest = sha256(presented ?? header);
    let match = -1;
    for (let i = 0; i < this.#digests.length; i++) {
      if (timingSafeEqual(digest, this.#digests[i] as Buffer) && match === -1) match = i;
    }
    const principal = presented === undefined ? undefined : this.#principals[match];
    if (principal === undefined) {
      throw new HttpProblem("unauthorized", "the API key is not valid", {}, { "WWW-Authenticate": `${REALM}, error="invalid_token"` });
    }
    (req as Authenticated)[AUTHENTICATED] = { by: this, principal };
    return principal;
  }
}

/**
 * A request already authenticated, and by whom: admission control asks before the route does, and a
 * second digest would cost the write about 2 µs. Kept on the request object itself (a symbol of this
 * module's, which no header can set), never by its header's text: the invariant is one answer per
 * request, whose Authorization header Node parsed once and the gateway never rewrites; the keys are
 * fixed for the instance's life, and the answer is kept with the ApiKeys that gave it. A refusal is
 * not kept (each ask refuses again). A property, not a WeakMap entry: an entry of a WeakMap keyed by
 * every request cost its insertion and the collector's work on it, about 0.5 µs a request.
 */
const AUTHENTICATED = Symbol("fenced.authenticated");
interface Authenticated {
  [AUTHENTICATED]?: { readonly by: ApiKeys; readonly principal: Principal };
}

function inScope(prefixes: readonly string[], name: string): boolean {
  return prefixes.some((p) => name.startsWith(p));
}

export function requireKey(principal: Principal, key: string): void {
  if (!inScope(principal.keys, key))
    throw new HttpProblem("forbidden", `API key ${principal.id} may not access key ${JSON.stringify(key)}`);
}

export function requireResource(principal: Principal, resource: string): void {
  if (!inScope(principal.resources, resource))
    throw new HttpProblem("forbidden", `API key ${principal.id} may not use resource ${JSON.stringify(resource)}`);
}

export function requireWrite(principal: Principal): void {
  if (principal.readOnly) throw new HttpProblem("forbidden", `API key ${principal.id} is read-only`);
}
