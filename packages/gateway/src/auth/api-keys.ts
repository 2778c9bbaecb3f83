import { hash } from "node:crypto";
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

/** A text's SHA-256, in lowercase hex: what a key is known by (its `sha256` in the configuration). */
function sha256(text: string): string {
  return hash("sha256", text, "hex");
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
    const digest = k.sha256 ?? sha256(k.key ?? "");
    const same = secrets.get(digest);
    if (same === undefined) secrets.set(digest, i);
    else ctx.addIssue({ code: "custom", path: [i], message: `duplicate secret: the same secret as apiKeys[${same}]` });
  });
}

export class ApiKeys {
  /** Each principal by its key's SHA-256 (hex). */
  readonly #byDigest = new Map<string, Principal>();

  constructor(configs: readonly ApiKeyConfig[]) {
    const parsed = z.array(apiKeySchema).min(1, "at least one API key is needed").superRefine(distinctApiKeys).parse(configs);
    for (const k of parsed)
      this.#byDigest.set(k.sha256 ?? sha256(k.key ?? ""), {
        id: k.id,
        resources: [...k.resources],
        keys: [...k.keys],
        readOnly: k.readOnly,
        trustedLockClient: k.trustedLockClient,
      });
  }

  /**
   * The principal for the request's bearer key, or 401. The key is looked up by its SHA-256, in one
   * step whatever the number of keys. The lookup's time may depend on how much of a configured key's
   * digest the presented key's digest shares, but a client cannot choose its digest, so it cannot
   * find a configured one piece by piece; and a digest does not authenticate (a request must present
   * a key that hashes to it). The digests are unsalted, so each key must be random (README).
   */
  authenticate(req: Request): Principal {
    const known = (req as Authenticated)[AUTHENTICATED];
    if (known !== undefined && known.by === this) return known.principal;
    const header = req.headers.authorization;
    if (header === undefined || header === "")
      throw new HttpProblem("unauthorized", "an API key is required: Authorization: Bearer <key>", {}, { "WWW-Authenticate": REALM });
    const presented = BEARER.exec(header)?.[1];
    const principal = presented === undefined ? undefined : this.#byDigest.get(sha256(presented));
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
