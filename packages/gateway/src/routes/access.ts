import type { Request, Response } from "express";
import type { Fence } from "@fenced/fence";
import { requireKey, requireResource, requireWrite, type Principal } from "../auth/api-keys.js";
import { HttpProblem } from "../problems/problem.js";
import { markAccepted, sendJson, type RouteContext } from "./context.js";
import { clientGone } from "../http/client-gone.js";
import { etag, fenceFromHeaders, ifVersionFromHeaders, keyFromPath } from "../schemas/validation.js";

/**
 * The checks every /v1/records and /v1/objects request starts with, in the order that decides which
 * error a request with several defects gets: credentials (401), key (400), key scope (403).
 */
export function authorizeKey(ctx: RouteContext, req: Request, res: Response): { principal: Principal; key: string } {
  const principal = ctx.auth.authenticate(req);
  res.locals.principal = principal.id;
  const key = keyFromPath(req.path);
  requireKey(principal, key);
  return { principal, key };
}

/**
 * A write's fence (400/403) and optional If-Match precondition (400), checked before the store is
 * called. The fence comes from a signed Fencing-Credential and from nothing else; only an API key
 * configured as a trusted lock client may name its own token, resource and holder in plain headers.
 */
export function writeOptions(
  ctx: RouteContext,
  req: Request,
  res: Response,
  principal: Principal,
  key: string,
  versionPattern: RegExp,
): { fence: Fence; ifVersion?: string; signal: AbortSignal } {
  requireWrite(principal);
  const fence = fenceOf(ctx, req, principal, key);
  requireResource(principal, fence.resource);
  const ifVersion = ifVersionFromHeaders(req, versionPattern);
  const signal = clientGone(res);
  return ifVersion === undefined ? { fence, signal } : { fence, ifVersion, signal };
}

const PLAIN_FENCE_HEADERS = ["fencing-token", "fencing-resource", "fencing-holder"] as const;

function fenceOf(ctx: RouteContext, req: Request, principal: Principal, key: string): Fence {
  const credential = req.headers["fencing-credential"];
  if (credential === undefined) {
    if (!principal.trustedLockClient) {
      throw new HttpProblem(
        "credentialRequired",
        `API key ${principal.id} writes with the Fencing-Credential its lease came with (POST /v1/leases); plain Fencing-Token headers are accepted only from trusted lock clients`,
      );
    }
    return fenceFromHeaders(req, key);
  }
  // The credential is the whole fence: a header beside it would be ignored, so it is refused instead.
  const beside = PLAIN_FENCE_HEADERS.find((h) => req.headers[h] !== undefined);
  if (beside !== undefined)
    throw new HttpProblem("invalid", `${beside}: not allowed with Fencing-Credential, which carries the whole fence`, {
      errors: [{ path: beside, message: "not allowed with Fencing-Credential" }],
    });
  if (ctx.credentials === undefined)
    throw new HttpProblem("invalidCredential", "this gateway has no fence keys configured and accepts no credentials", {
      reason: "unknown-key",
    });
  if (Array.isArray(credential))
    throw new HttpProblem("invalid", "Fencing-Credential: one credential per request", {
      errors: [{ path: "Fencing-Credential", message: "repeated" }],
    });
  return ctx.credentials.verify(credential);
}

/** What a write of several records refuses in its headers: its fences and versions travel in its body. */
const BODY_ONLY_HEADERS = [
  ["fencing-credential", "the credentials travel in the body's `fences`"],
  ["fencing-token", "the credentials travel in the body's `fences`"],
  ["fencing-resource", "each write names its resource in the body"],
  ["fencing-holder", "the credentials travel in the body's `fences`"],
  ["if-match", "each write's precondition is its `ifVersion` in the body"],
  ["if-none-match", "each write's precondition is its `ifVersion` in the body"],
  ["if-unmodified-since", "each write's precondition is its `ifVersion` in the body"],
  ["if-modified-since", "each write's precondition is its `ifVersion` in the body"],
] as const;

/**
 * The first checks of a write of several records (POST /v1/records), before its body is read: the
 * API key (401), a key that may write (403), and no fence or precondition header, which the route
 * would otherwise ignore (400).
 */
export function authorizeWrites(ctx: RouteContext, req: Request, res: Response): Principal {
  const principal = ctx.auth.authenticate(req);
  res.locals.principal = principal.id;
  requireWrite(principal);
  for (const [header, why] of BODY_ONLY_HEADERS)
    if (req.headers[header] !== undefined)
      throw new HttpProblem("invalid", `${header}: not taken by a write of several records: ${why}`, {
        errors: [{ path: header, message: why }],
      });
  return principal;
}

/**
 * The fences of a write of several records, from the credentials in its body (`fences`), in their
 * order: each verified as a Fencing-Credential is (400, 403), its resource in the API key's scope
 * (403), one credential per resource (400: which of two would a write naming it be under?).
 */
export function fencesFromCredentials(ctx: RouteContext, principal: Principal, credentials: readonly string[]): Fence[] {
  const verifier = ctx.credentials;
  if (verifier === undefined)
    throw new HttpProblem("invalidCredential", "this gateway has no fence keys configured and accepts no credentials", {
      reason: "unknown-key",
    });
  const byResource = new Map<string, number>();
  return credentials.map((credential, i) => {
    const fence = verifier.verify(credential, `fences.${i}`);
    requireResource(principal, fence.resource);
    const earlier = byResource.get(fence.resource);
    if (earlier !== undefined) {
      const message = `a second credential for ${JSON.stringify(fence.resource)} (fences.${earlier} is one): one per resource`;
      throw new HttpProblem("invalid", `fences.${i}: ${message}`, { errors: [{ path: `fences.${i}`, message }] });
    }
    byResource.set(fence.resource, i);
    return fence;
  });
}

/**
 * The answer to a write the store accepted (records and objects alike): counted as accepted first, so
 * that a client hanging up now does not undo it in the metrics; the new version as ETag and the
 * token that wrote it; then the JSON answer of a put (200) or the empty one of a delete (204).
 */
export function answerWrite(res: Response, result: { readonly version: string; readonly token: bigint }, status: 200 | 204): void {
  markAccepted(res);
  res.setHeader("ETag", etag(result.version));
  res.setHeader("Fencing-Token", result.token.toString());
  if (status === 200) sendJson(res, 200, { version: result.version, token: result.token.toString() });
  else res.status(204).end();
}
