export type { VllmEngineOptions, VllmReload } from './vllm-engine.ts';
export { VllmEngine, completionBody, vllmProtocol } from './vllm-engine.ts';
