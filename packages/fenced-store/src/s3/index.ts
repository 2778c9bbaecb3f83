// "@fenced/store/s3": needs the `@aws-sdk/client-s3` peer dependency.
export { FencedS3, type FencedS3Options, type S3Body, type S3Bytes, type S3DeleteOptions, type S3Object, type S3PutResult, type S3RegisterOptions, type S3TransferOptions, type S3UpdateOptions, type S3VerifyResult, type S3WriteOptions } from "./s3.js";
export { assertContentType } from "./s3-body.js";
