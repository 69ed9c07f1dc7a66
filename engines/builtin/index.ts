/**
 * The builtin TF.js inference engine.
 *
 * @module
 */
export type { BuiltinEngineOptions } from './engine.ts';
export { BuiltinEngine } from './engine.ts';
