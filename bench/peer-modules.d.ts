// node-redlock's "exports" map hides its declarations from NodeNext resolution; its types are
// borrowed by path in lock.bench.ts, and the module itself is declared here.
declare module "redlock";
