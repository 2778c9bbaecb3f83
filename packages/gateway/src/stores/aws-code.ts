/** What the stores on AWS's SDK (S3, DynamoDB) pass on of a failed request: its code, for the backend-error problem and its log line. */

/** The name of the AWS SDK's error when its credentials provider (chain) could not produce credentials. */
export const CREDENTIALS_PROVIDER_ERROR = "CredentialsProviderError";

/**
 * A failure of an AWS SDK client (the S3 and DynamoDB stores pass it on unchanged: they type only
 * connection-level failures): every error that went through its middleware carries `$metadata`
 * (service exceptions, an answer it could not parse, a TLS or socket error the store did not type),
 * and a credentials provider that failed throws CredentialsProviderError before any request is sent.
 * The code: the service's error code (S3's, DynamoDB's), else the HTTP status, else the error's name or system code.
 */
export function awsCode(outer: unknown): string | undefined {
  if (typeof outer !== "object" || outer === null) return undefined;
  // An error that carries the SDK's as `original` is read as that one.
  const original = (outer as { original?: unknown }).original;
  const err = typeof original === "object" && original !== null ? original : outer;
  const { name, Code, code, $metadata } = err as { name?: unknown; Code?: unknown; code?: unknown; $metadata?: unknown };
  if (name === CREDENTIALS_PROVIDER_ERROR) return CREDENTIALS_PROVIDER_ERROR;
  if (typeof $metadata !== "object" || $metadata === null) return undefined;
  if (typeof Code === "string") return Code;
  const status = ($metadata as { httpStatusCode?: unknown }).httpStatusCode;
  if (typeof code === "string") return code;
  if (typeof status === "number") return `HTTP ${status}`;
  return typeof name === "string" ? name : "unknown";
}
