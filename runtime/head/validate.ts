/**
 * Shape checks for requests that change head state. A peer that passes the token can still send
 * nonsense; it gets an `InvalidArgumentError` reply and the head's state stays clean.
 *
 * @module
 */
import { InvalidArgumentError } from '../errors.ts';
import type { CreateActor, CreatePlacementGroup, ResourceMap } from '../protocol.ts';

const strategies = new Set(['PACK', 'SPREAD', 'STRICT_PACK', 'STRICT_SPREAD']);

function fail(what: string): never {
  throw new InvalidArgumentError(`invalid request: ${what}`);
}

function isInt(v: unknown, min: number): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= min;
}

/** Checks a resource map: finite non-negative numbers under string keys. */
export function checkResources(r: unknown, what: string): asserts r is ResourceMap {
  if (typeof r !== 'object' || r === null || Array.isArray(r)) fail(`${what} must be an object`);
  for (const [k, v] of Object.entries(r)) {
    if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) fail(`${what}.${k} must be a number ≥ 0`);
  }
}

export function checkCreateActor(m: CreateActor): void {
  const s = m.spec as unknown as Record<string, unknown> | undefined;
  if (!s || typeof s.moduleUrl !== 'string' || typeof s.exportName !== 'string') fail('spec');
  if (s.kind !== 'actor' && s.kind !== 'tasks') fail('spec.kind');
  if (!(m.ctorArgs instanceof Uint8Array)) fail('ctorArgs must be bytes');
  const o = m.options as unknown as Record<string, unknown> | undefined;
  if (!o || typeof o !== 'object') fail('options');
  checkResources(o.resources, 'options.resources');
  if (o.name !== undefined && o.name !== null && typeof o.name !== 'string') fail('options.name');
  if (typeof o.detached !== 'boolean') fail('options.detached');
  if (!isInt(o.maxRestarts, -1) || !isInt(o.maxTaskRetries, -1)) fail('options.maxRestarts/maxTaskRetries');
  if (!isInt(o.maxConcurrency, 1)) fail('options.maxConcurrency');
  if (!isInt(o.bundleIndex, -1)) fail('options.bundleIndex');
  if (o.placementGroupId !== undefined && o.placementGroupId !== null && typeof o.placementGroupId !== 'string') {
    fail('options.placementGroupId');
  }
  const st = o.schedulingStrategy as unknown;
  const okStrategy =
    st === 'DEFAULT' ||
    st === 'SPREAD' ||
    (typeof st === 'object' && st !== null && (st as { type?: unknown }).type === 'node' &&
      typeof (st as { nodeId?: unknown }).nodeId === 'string');
  if (!okStrategy) fail('options.schedulingStrategy');
  if (o.env !== undefined && o.env !== null) {
    if (typeof o.env !== 'object') fail('options.env');
    for (const v of Object.values(o.env)) if (typeof v !== 'string') fail('options.env values must be strings');
  }
}

export function checkCreatePlacementGroup(m: CreatePlacementGroup): void {
  if (!Array.isArray(m.bundles) || m.bundles.length === 0) fail('a placement group needs at least one bundle');
  m.bundles.forEach((b, i) => checkResources(b, `bundles[${i}]`));
  if (!strategies.has(m.strategy)) fail(`strategy '${String(m.strategy)}'`);
  if (typeof m.detached !== 'boolean') fail('detached');
}
