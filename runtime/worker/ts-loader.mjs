// @ts-check
/**
 * `node --import <this file>`: makes a worker process run TypeScript in place of tsx, through
 * `ts-transform.mjs`'s on-disk cache. ES modules go through module hooks (`ts-hooks.mjs`, on
 * Node's loader thread); `require()` of a TypeScript file (Node 20's CommonJS loader does not
 * consult those hooks) goes through a CommonJS extension handler here. Stack traces are mapped
 * back to the TypeScript source.
 *
 * @module
 */
import { readFileSync } from 'node:fs';
import Module, { register } from 'node:module';
import { transformCached } from './ts-transform.mjs';

process.setSourceMapsEnabled(true);
register('./ts-hooks.mjs', import.meta.url);

/** @type {Record<string, (module: { _compile(code: string, filename: string): void }, filename: string) => void>} */
const extensions = /** @type {any} */ (Module)._extensions;
for (const ext of ['.ts', '.cts', '.mts', '.tsx']) {
  extensions[ext] = (module, filename) => {
    module._compile(transformCached(filename, readFileSync(filename, 'utf8'), 'cjs'), filename);
  };
}
