import { Router, type Request, type Response } from "express";
import { FAMILY_VERSIONS, type FamilyStores } from "../stores/registration.js";
import type { StoreName } from "../stores/registry.js";
import { answerWrite, authorizeKey, authorizeWrites, fencesFromCredentials, writeOptions } from "./access.js";
import { requireKey } from "../auth/api-keys.js";
import { clientGone } from "../http/client-gone.js";
import { jsonBody, markAccepted, markWrite, keyMethods, methodNotAllowed, sendJson, type RouteContext } from "./context.js";
import { recordWritesSchema, type RecordWritesAnswer } from "../schemas/record-writes.js";
import { HttpProblem } from "../problems/problem.js";
import { encodeHeaderText, etag } from "../schemas/validation.js";

/**
 * /v1/records/{key}: JSON records in the records family's store (and POST /v1/records: several of them at once). The checks run in a fixed order — credentials
 * (401), key (400), key scope (403), fence (400/403), precondition (400), body (415/413/400) — and
 * all of them before the store is called, so a refused request never reaches the backend. The
 * store then decides the ratchet (409) and the version (412) atomically with the write.
 */
export function recordsRouter(ctx: RouteContext, store: FamilyStores["records"], backend: StoreName): Router {
  const router = Router({ caseSensitive: true, strict: true });
  const readBody = jsonBody(ctx.limits.recordBytes);

  const get = async (req: Request, res: Response): Promise<void> => {
    const { key } = authorizeKey(ctx, req, res);
    const record = await ctx.metrics.time("records", "get", () => store.get(key, { signal: clientGone(res) }));
    if (record === undefined) throw new HttpProblem("notFound", `no record under ${JSON.stringify(key)}`);
    res.setHeader("ETag", etag(record.version));
    res.setHeader("Fencing-Token", record.token.toString());
    res.setHeader("Fencing-Resource", encodeHeaderText(record.resource));
    // The holder of the lease that wrote this version (public): absent for a fence without one.
    if (record.holder !== null) res.setHeader("Fencing-Holder", record.holder);
    res.json(record.value);
  };

  const put = async (req: Request, res: Response): Promise<void> => {
    markWrite(res, "records", "put");
    const { principal, key } = authorizeKey(ctx, req, res);
    const options = writeOptions(ctx, req, res, principal, key, FAMILY_VERSIONS.records);
    // What JSON.parse gives may still be what jsonb refuses (U+0000, a lone surrogate) or nest too
    // deep: the store's own check refuses it (InvalidArgumentError, 400) before any I/O.
    const value = await readBody(req, res);
    const result = await ctx.metrics.time("records", "put", () => store.put(key, value, options));
    answerWrite(res, result, 200);
  };

  const remove = async (req: Request, res: Response): Promise<void> => {
    markWrite(res, "records", "delete");
    const { principal, key } = authorizeKey(ctx, req, res);
    const options = writeOptions(ctx, req, res, principal, key, FAMILY_VERSIONS.records);
    // A tombstone: the key's ratchet and owner survive the delete (PROTOCOL.md, "Postgres").
    const result = await ctx.metrics.time("records", "delete", () => store.delete(key, options));
    answerWrite(res, result, 204);
  };

  const putAll = putAllHandler(ctx, store, backend, readBody);

  // The path itself (no key, no trailing slash) is the writes of several records: POST only.
  router.all("/", (req, res, next) => {
    if ((req.originalUrl.split("?")[0] ?? "").endsWith("/")) {
      next();
      return;
    }
    if (req.method !== "POST") methodNotAllowed(res, "POST");
    return putAll(req, res);
  });
  router.use(keyMethods({ get, put, remove }));
  return router;
}

/**
 * POST /v1/records: several records in one transaction, each under the fence of the resource it
 * names. The checks run in this order, all before the store is called: credentials (401), a key
 * that may write (403), no fence or precondition header (400), body (415/413/400, each key's syntax
 * included), each key's scope (403), each credential (400/403) and its resource's scope (403), each
 * write's resource among the credentials' (400). The store then checks each value (400) before any
 * I/O, raises and checks every fence's ratchet (409), each key's owner (409) and version (412): one
 * refusal, nothing written.
 */
function putAllHandler(
  ctx: RouteContext,
  store: FamilyStores["records"],
  backend: StoreName,
  readBody: ReturnType<typeof jsonBody>,
): (req: Request, res: Response) => Promise<void> {
  return async (req, res) => {
    markWrite(res, "records", "put_all");
    const principal = authorizeWrites(ctx, req, res);
    const body = recordWritesSchema.parse(await readBody(req, res));
    for (const { key } of body.writes) requireKey(principal, key);
    const fences = fencesFromCredentials(ctx, principal, body.fences);
    const resources = fences.map((f) => f.resource);
    // Each value is checked by the store (what jsonb refuses: U+0000, lone surrogates, nesting too
    // deep), before any I/O, and answered as `writes.<i>.value` (problems/fenced-errors.ts).
    const writes = body.writes.map(({ key, value, resource, ifVersion }, i) => ({
      key,
      value,
      resource: resourceOf(resource, resources, i),
      ...(ifVersion === undefined ? {} : { ifVersion }),
    }));
    const { putAll } = store;
    // Checked after every check of the request's own: a bad request is answered as on any store.
    if (putAll === undefined)
      throw new HttpProblem("notSupported", "this gateway's records store has no transaction: write each record on its own", {
        backend,
      });
    const signal = clientGone(res);
    const results = await ctx.metrics.time("records", "put_all", () => putAll.call(store, writes, { fences, signal }));
    markAccepted(res);
    const answer: RecordWritesAnswer = {
      writes: results.map((r, i) => {
        const { key, resource } = writes[i] as (typeof writes)[number];
        return { key, resource, version: r.version, token: r.token.toString() };
      }),
    };
    sendJson(res, 200, answer);
  };
}

/**
 * The resource a write of several is under: the one it names, or the only credential's (a write is
 * under one fence, which it must be able to say); 400 when that is not one of the credentials'.
 */
function resourceOf(named: string | undefined, resources: readonly string[], i: number): string {
  const under = named ?? (resources.length === 1 ? resources[0] : undefined);
  if (under !== undefined && resources.includes(under)) return under;
  const message = under === undefined ? "required with several fences" : `${JSON.stringify(under)} is not a resource of \`fences\``;
  throw new HttpProblem("invalid", `writes.${i}.resource: ${message}`, { errors: [{ path: `writes.${i}.resource`, message }] });
}
