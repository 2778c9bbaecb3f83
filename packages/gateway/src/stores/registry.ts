import type { z } from "zod";
import { postgresRecords } from "./postgres.js";
import { DriverLoadError, type AnyStoreDriver, type Family, type StoreDefinition, type StoreRegistration } from "./registration.js";
import { s3Objects } from "./s3.js";
import { dynamoRecords } from "./dynamodb.js";
import { azureBlobObjects } from "./azure-blob.js";

/*
 * The stores the gateway can serve, one registration each (registration.ts says what one provides).
 * Everything in the gateway that concerns a store — its routes' family, readiness, problems, fences,
 * lease grants, start checks, sweep, configuration and the API document — loops over this list.
 * Adding a store: its registration (its flags and variables too) and its driver beside these, its
 * line here and in drivers.ts.
 *
 *   check.ts        a store's readiness check, as every driver makes it (within a deadline)
 *   registration.ts what a store registers, and the two families of routes; what its driver does
 *   postgres.ts     the records family on PostgreSQL
 *   s3.ts           the objects family on S3; s3-sweep.ts, its sweep's lines
 *   dynamodb.ts     the records family on DynamoDB (no putAll: no transaction is used)
 *   azure-blob.ts   the objects family on Azure Blob
 *   <store>-driver.ts  each store's driver: its SDK, loaded only when the store is served or swept
 *   drivers.ts      every driver at once, for createGateway
 *   aws-code.ts     the code of an AWS SDK client's failure (S3, DynamoDB); azure-code.ts, Azure's
 */
const REGISTERED = [postgresRecords, s3Objects, dynamoRecords, azureBlobObjects] as const;

export const STORES: readonly StoreRegistration[] = REGISTERED;

/** Each registered store's driver, by its name, as its registration's `load()` types it. */
export type DriverOfEach = { readonly [S in (typeof REGISTERED)[number] as S["name"]]: Awaited<ReturnType<S["load"]>> };

/**
 * What createGateway takes for `family`: the options of any registered store of that family (each
 * registration's `Options`, which its own module describes), told apart by their shape (`accepts`).
 */
export type FamilyOptions<F extends Family> =
  Extract<(typeof REGISTERED)[number], { readonly family: F }> extends infer S
    ? S extends StoreDefinition<F, string, z.ZodType, infer Options>
      ? Options
      : never
    : never;

/** A registered store's name, as the wire spells it (readiness checks, fence answers, problems, configuration sections). */
export type StoreName = (typeof REGISTERED)[number]["name"];

/** Every store's name, in registry order: what an answer's `backend` may say. */
export const STORE_NAMES = REGISTERED.map((store) => store.name) as [StoreName, ...StoreName[]];

/** The store registered under `name`. */
export function storeNamed(name: string): StoreRegistration | undefined {
  return STORES.find((store) => store.name === name);
}

/** A zod shape of one entry per store, keyed by its name, in registry order: answers that say something of each store. */
export function byStore<T extends z.ZodType>(entry: (store: StoreRegistration) => T): { [N in StoreName]: T } {
  return Object.fromEntries(STORES.map((store) => [store.name, entry(store)])) as { [N in StoreName]: T };
}

/** The configuration's store sections, each optional, keyed by the store's name. */
export const STORE_SECTIONS = Object.fromEntries(REGISTERED.map((store) => [store.name, store.config.section.optional()])) as {
  [S in (typeof REGISTERED)[number] as S["name"]]: z.ZodOptional<S["config"]["section"]>;
};

/** The drivers of the stores a gateway serves, by store name: createGateway's, or those the bin loaded. */
export type StoreDrivers = { readonly [N in StoreName]?: AnyStoreDriver };

/** A store's driver, for the bin and its sweep; a driver that cannot be loaded (its SDK missing from the install) as DriverLoadError. */
export function loadDriver(store: StoreRegistration): Promise<AnyStoreDriver> {
  return store.load().catch((err: unknown) => {
    throw new DriverLoadError(store.title, err);
  });
}
