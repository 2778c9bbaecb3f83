/**
 * Redis key names for a resource. Both keys share the hash tag `{fenced:<resource>}`: Redis Cluster
 * hashes the text between the first '{' and the next '}', which here always starts with "fenced:",
 * so it is never empty and is identical for the two keys even when the resource itself contains braces.
 */
export interface ResourceKeys {
  readonly lease: string;
  readonly counter: string;
}

export function resourceKeys(resource: string): ResourceKeys {
  const tag = `{fenced:${resource}}`;
  return { lease: `${tag}:lease`, counter: `${tag}:token` };
}
