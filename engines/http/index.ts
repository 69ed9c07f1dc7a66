/**
 * Shared pieces of the HTTP engines: errors, the server pool, the remote engine core.
 *
 * @module
 */
export type { EngineErrorCode } from './errors.ts';
export type { ServerEvent, ServerStatus, ServerPoolOptions, ServerLease } from './server-pool.ts';
export type {
  EngineProtocol,
  RemoteEngineOptions,
  ResolvedGenerationConfig,
  SampleOutput,
  ServerCall,
} from './remote-engine.ts';
export { EngineError, isEngineError } from './errors.ts';
export { httpCall } from './http-call.ts';
export { ServerPool, serverPoolDefaults } from './server-pool.ts';
export { RemoteEngine, remoteEngineDefaults, resolveGenerationConfig } from './remote-engine.ts';
