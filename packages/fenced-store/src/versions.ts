/**
 * The versions the stores issue, as they travel (ifVersion, answers, ETags): one definition each,
 * for the stores' validation and for anything that checks a version on the wire (the gateway).
 */

/** A PostgreSQL record version: a positive int8 from the store's sequence, in decimal. */
export const RECORD_VERSION = /^[1-9][0-9]{0,18}$/;

/** An S3 object version (a manifest's writeId), and every id the S3 store names: 128 random bits as 32 lowercase hex digits. */
export const OBJECT_VERSION = /^[0-9a-f]{32}$/;
