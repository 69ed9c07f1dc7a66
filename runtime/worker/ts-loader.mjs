// @ts-check
/**
 * `node --import <this file>`: registers rtjob's cached TypeScript hooks (`ts-hooks.mjs`) for a
 * worker process, in place of tsx, and maps stack traces back to the TypeScript source.
 *
 * @module
 */
import { register } from 'node:module';

process.setSourceMapsEnabled(true);
register('./ts-hooks.mjs', import.meta.url);
