import { Router, type Request, type Response } from "express";
import type { CheckedFence } from "@fenced/fence/internal";
import type { FencedPostgres } from "@fenced/store/postgres";
import type { FencedS3 } from "@fenced/store/s3";
import { requireResource } from "../auth/api-keys.js";
import { methodNotAllowed, type RouteContext } from "../http/context.js";
import { clientGone } from "../http/client-gone.js";
import { resourceFromPath, type FenceAnswer } from "../schemas/fences.js";

/** The stores whose fences the route reads: those the gateway is configured with. */
export interface FenceStores {
  readonly records?: FencedPostgres | undefined;
  readonly objects?: FencedS3 | undefined;
}

/**
 * /v1/fences/{resource}: the resource's fence in each configured store — the highest token it has
 * admitted and that token's holder, what every write under the resource is checked against. For an
 * operator or a client that wants to know where a resource stands (a token that went backwards after
 * the lock lost counters; a fence raised by hand). A read: any API key whose `resources` cover the
 * resource may ask, read-only keys too. The checks run as for the other routes — credentials (401),
 * resource (400), its scope (403) — before any store is asked.
 */
export function fencesRouter(ctx: RouteContext, stores: FenceStores): Router {
  const router = Router({ caseSensitive: true, strict: true });
  router.use(async (req: Request, res: Response) => {
    if (req.method !== "GET" && req.method !== "HEAD") methodNotAllowed(res, "GET, HEAD");
    const principal = ctx.auth.authenticate(req);
    res.locals.principal = principal.id;
    const resource = resourceFromPath(req.path);
    requireResource(principal, resource);
    const signal = clientGone(res);
    const { records, objects } = stores;
    // Both stores at once; a failure of either is the answer (problems/problem.ts classifies it).
    const [postgres, s3] = await Promise.all([
      records === undefined ? undefined : ctx.metrics.time("records", "fence", () => records.fence(resource, { signal })),
      objects === undefined ? undefined : ctx.metrics.time("objects", "fence", () => objects.fence(resource, { signal })),
    ]);
    const answer: FenceAnswer = {
      resource,
      stores: {
        ...(records !== undefined && { postgres: wire(postgres) }),
        ...(objects !== undefined && { s3: wire(s3) }),
      },
    };
    res.json(answer);
  });
  return router;
}

/** Tokens travel as decimal strings (a JSON number would round a 64-bit token); null: nothing recorded. */
function wire(fence: CheckedFence | undefined): { token: string; holder: string | null } | null {
  return fence === undefined ? null : { token: fence.token.toString(), holder: fence.holder };
}
