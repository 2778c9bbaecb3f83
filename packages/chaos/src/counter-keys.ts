import type { Fence } from "@fenced/fence";

/** The fence of the initial empty document: below every token the lock hands out. */
export const INITIAL = (resource: string): Fence => ({ resource, token: 0n });

/** Plain (unfenced) objects, items and blobs live beside the fenced store's prefix, never inside it. */
export function plainKey(key: string): string {
  return `plain/${key}.json`;
}
