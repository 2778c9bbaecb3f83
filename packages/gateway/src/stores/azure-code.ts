/** What the Azure Blob store passes on of a failed request: its code, for the readiness check and the backend-error problem. */

/** Azure's error answer, as its SDK's RestError carries it (by shape: the caller's SDK copy may not be this module's). */
export function restError(err: unknown): { code: string | undefined; status: number | undefined } | undefined {
  if (typeof err !== "object" || err === null || (err as { name?: unknown }).name !== "RestError") return undefined;
  const { code, statusCode } = err as { code?: unknown; statusCode?: unknown };
  return { code: typeof code === "string" ? code : undefined, status: typeof statusCode === "number" ? statusCode : undefined };
}
