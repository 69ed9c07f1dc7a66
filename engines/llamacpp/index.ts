export type { LlamaCppEngineOptions, LlamaCppWeightSync } from './engine.ts';
export { LlamaCppEngine } from './engine.ts';
export type { LlamaCppErrorCode } from './errors.ts';
export { LlamaCppError } from './errors.ts';
