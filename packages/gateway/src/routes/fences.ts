import { Router, type Request, type Response } from "express";
import type { CheckedFence } from "@fenced/fence/internal";
import type { FencedStore, StoredVersion } from "@fenced/store";
import { requireResource } from "../auth/api-keys.js";
import { methodNotAllowed, type RouteContext } from "./context.js";
import { clientGone } from "../http/client-gone.js";
import { resourceFromPath, type FenceAnswer } from "../schemas/fences.js";

/** A store whose fences the route reads: each the gateway is configured with, by its name and family. */
export interface FenceStore {
  readonly name: string;
  readonly family: string;
  readonly store: FencedStore<never, StoredVersion>;
}

/**
 * /v1/fences/{resource}: the resource's fence in each configured store — the highest token it has
 * admitted and that token's holder, what every write under the resource is checked against. For an
 * operator or a client that wants to know where a resource stands (a token that went backwards after
 * the lock lost counters; a fence raised by hand). A read: any API key whose `resources` cover the
 * resource may ask, read-only keys too. The checks run as for the other routes — credentials (401),
 * resource (400), its scope (403) — before any store is asked.
 */
export function fencesRouter(ctx: RouteContext, stores: readonly FenceStore[]): Router {
  const router = Router({ caseSensitive: true, strict: true });
  router.use(async (req: Request, res: Response) => {
    if (req.method !== "GET" && req.method !== "HEAD") methodNotAllowed(res, "GET, HEAD");
    const principal = ctx.auth.authenticate(req);
    res.locals.principal = principal.id;
    const resource = resourceFromPath(req.path);
    requireResource(principal, resource);
    const signal = clientGone(res);
    // Every store at once; a failure of any is the answer (problems/problem.ts classifies it).
    const fences = await Promise.all(
      stores.map(async ({ name, family, store }) => [
        name,
        wire(await ctx.metrics.time(family, "fence", () => store.fence(resource, { signal }))),
      ]),
    );
    // Keyed by the names the answer's schema lists (stores/registry.ts): one entry per configured store.
    const answer: FenceAnswer = { resource, stores: Object.fromEntries(fences) as FenceAnswer["stores"] };
    res.json(answer);
  });
  return router;
}

/** Tokens travel as decimal strings (a JSON number would round a 64-bit token); null: nothing recorded. */
function wire(fence: CheckedFence | undefined): { token: string; holder: string | null } | null {
  return fence === undefined ? null : { token: fence.token.toString(), holder: fence.holder };
}
