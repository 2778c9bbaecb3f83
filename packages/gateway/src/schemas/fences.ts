import { z } from "zod";
import { HttpProblem } from "../problems/problem.js";
import { byStore } from "../stores/registry.js";
import { holderString, resourceSchema, tokenString } from "../vocabulary/fields.js";

/**
 * GET /v1/fences/{resource}: the resource in the path, and the answer — each configured store's
 * fence for it, as the store's ratchet holds it.
 */

const storeFence = z
  .strictObject({
    token: tokenString.describe("The highest token the store has admitted for the resource (a decimal string)"),
    holder: holderString
      .nullable()
      .describe("The holder that presented it: the store admits an equal token only from this holder (null: a fence without one)"),
  })
  .nullable()
  .describe("The store's fence for the resource; null when nothing was ever written or registered under it there");

/** 200 of GET /v1/fences/{resource}. */
export const fenceAnswerSchema = z
  .strictObject({
    resource: resourceSchema,
    stores: z
      .strictObject(byStore((store) => storeFence.optional().describe(store.fenceDescription)))
      .describe("One entry per store this gateway is configured with"),
  })
  .describe("The resource's fence in each store: what every write under the resource is checked against");
export type FenceAnswer = z.input<typeof fenceAnswerSchema>;

function invalid(message: string): HttpProblem {
  return new HttpProblem("invalid", `resource: ${message}`, { errors: [{ path: "resource", message }] });
}

/**
 * The resource is the raw path after the route's prefix, percent-decoded once, `/` included (a
 * resource often names a folder of keys: `orders/42`); @fenced/fence's resource rule then applies.
 */
export function resourceFromPath(rawPath: string): string {
  let resource: string;
  try {
    resource = decodeURIComponent(rawPath.startsWith("/") ? rawPath.slice(1) : rawPath);
  } catch {
    throw invalid("not valid percent-encoded UTF-8");
  }
  const checked = resourceSchema.safeParse(resource);
  if (!checked.success) throw invalid(checked.error.issues[0]?.message ?? "malformed");
  return resource;
}
