import type { Request, Response } from "express";
import type { Fence } from "@fenced/fence";
import { requireKey, requireResource, requireWrite, type Principal } from "./auth.js";
import type { RouteContext } from "./context.js";
import { fenceFromHeaders, ifVersionFromHeaders, keyFromPath } from "./validation.js";

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

/** A write's fence (400/403) and optional If-Match precondition (400), checked before the store is called. */
export function writeOptions(req: Request, principal: Principal, key: string, versionPattern: RegExp): { fence: Fence; ifVersion?: string } {
  requireWrite(principal);
  const fence = fenceFromHeaders(req, key);
  requireResource(principal, fence.resource);
  const ifVersion = ifVersionFromHeaders(req, versionPattern);
  return ifVersion === undefined ? { fence } : { fence, ifVersion };
}
