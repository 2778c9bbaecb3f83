// Names this entry exported in 0.1.0 that now live in one place only; each goes in 0.3.0.
import { InvalidArgumentError as FenceInvalidArgumentError } from "@fenced/fence";

/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/lock` in 0.3.0. */
export const InvalidArgumentError = FenceInvalidArgumentError;
/** @deprecated Import `InvalidArgumentError` from `@fenced/fence` (the same class); removed from `@fenced/lock` in 0.3.0. */
export type InvalidArgumentError = FenceInvalidArgumentError;
