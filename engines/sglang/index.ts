export type { SglangEngineOptions } from './sglang-engine.ts';
export { SglangEngine, samplingParams, sglangProtocol } from './sglang-engine.ts';
