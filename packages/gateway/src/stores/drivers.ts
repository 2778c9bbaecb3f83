import type { DriverOfEach } from "./registry.js";
import { postgresDriver } from "./postgres-driver.js";
import { s3Driver } from "./s3-driver.js";
import { dynamoDriver } from "./dynamodb-driver.js";
import { azureBlobDriver } from "./azure-blob-driver.js";

/**
 * Every store's driver, loaded at once: what createGateway, the embedding API, serves from, whichever
 * store its options name. The bin loads only the drivers of the stores its configuration names
 * (each registration's `load()`), so that it never holds an SDK it does not use. Each entry is typed,
 * and is, what its registration's `load()` resolves to (drivers.test.ts).
 */
export const EVERY_DRIVER: DriverOfEach = {
  postgres: postgresDriver,
  s3: s3Driver,
  dynamodb: dynamoDriver,
  "azure-blob": azureBlobDriver,
};
