import { Router, type Request, type Response } from "express";
import type { FencedPostgres } from "@fenced/store/postgres";
import { assertJsonValue, RECORD_VERSION } from "@fenced/store";
import { answerWrite, authorizeKey, writeOptions } from "./access.js";
import { jsonBody, markWrite, keyMethods, type RouteContext } from "../http/context.js";
import { HttpProblem } from "../problems/problem.js";
import { encodeHeaderText, etag } from "../schemas/validation.js";

/**
 * /v1/records/{key}: JSON records in FencedPostgres. The checks run in a fixed order — credentials
 * (401), key (400), key scope (403), fence (400/403), precondition (400), body (415/413/400) — and
 * all of them before the store is called, so a refused request never reaches Postgres. The store
 * then decides the ratchet (409) and the version (412) inside its transaction.
 */
export function recordsRouter(ctx: RouteContext, store: FencedPostgres): Router {
  const router = Router({ caseSensitive: true, strict: true });
  const readBody = jsonBody(ctx.limits.recordBytes);

  const get = async (req: Request, res: Response): Promise<void> => {
    const { key } = authorizeKey(ctx, req, res);
    const record = await ctx.metrics.time("records", "get", () => store.get(key));
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
    const options = writeOptions(ctx, req, res, principal, key, RECORD_VERSION);
    const value = await readBody(req, res);
    // JSON.parse output can still hold what jsonb refuses (U+0000, lone surrogates) or nest too deep.
    assertJsonValue(value);
    const result = await ctx.metrics.time("records", "put", () => store.put(key, value, options));
    answerWrite(res, result, 200);
  };

  const remove = async (req: Request, res: Response): Promise<void> => {
    markWrite(res, "records", "delete");
    const { principal, key } = authorizeKey(ctx, req, res);
    const options = writeOptions(ctx, req, res, principal, key, RECORD_VERSION);
    // A tombstone: the key's ratchet and owner survive the delete (PROTOCOL.md, "Postgres").
    const result = await ctx.metrics.time("records", "delete", () => store.delete(key, options));
    answerWrite(res, result, 204);
  };

  router.use(keyMethods({ get, put, remove }));
  return router;
}
