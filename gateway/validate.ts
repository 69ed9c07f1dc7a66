/**
 * Field checks for request bodies: each names the field it rejects (`messages[2].role`), so a
 * client sees exactly what to fix in a 400.
 *
 * @module
 */
import { badField } from './errors.ts';

/** A JSON object, as a record. */
export type Json = Record<string, unknown>;

/** `v` as an object, or a 400 naming `param`. */
export function object(v: unknown, param: string): Json {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) {
    throw badField(param, `expected an object, got ${kindOf(v)}`);
  }
  return v as Json;
}

/** `v` as an array, or a 400. */
export function array(v: unknown, param: string): unknown[] {
  if (!Array.isArray(v)) throw badField(param, `expected an array, got ${kindOf(v)}`);
  return v;
}

/** `v` as a string, or a 400. */
export function string(v: unknown, param: string): string {
  if (typeof v !== 'string') throw badField(param, `expected a string, got ${kindOf(v)}`);
  return v;
}

/** `v` as a finite number in `[min, max]`, or a 400. */
export function number(v: unknown, param: string, min = -Infinity, max = Infinity): number {
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw badField(param, `expected a number, got ${kindOf(v)}`);
  }
  if (v < min || v > max) throw badField(param, `must be between ${min} and ${max}, got ${v}`);
  return v;
}

/** `v` as an integer >= `min`, or a 400. */
export function integer(v: unknown, param: string, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) {
    throw badField(param, `expected an integer, got ${kindOf(v)}`);
  }
  if (v < min || v > max)
    throw badField(param, `must be an integer between ${min} and ${max}, got ${v}`);
  return v;
}

/** `v` as a boolean, or a 400. */
export function boolean(v: unknown, param: string): boolean {
  if (typeof v !== 'boolean') throw badField(param, `expected a boolean, got ${kindOf(v)}`);
  return v;
}

/** Applies `check` unless `v` is undefined or null (OpenAI treats null as absent). */
export function optional<T>(v: unknown, check: (v: unknown) => T): T | undefined {
  return v === undefined || v === null ? undefined : check(v);
}

function kindOf(v: unknown): string {
  if (v === null) return 'null';
  if (v === undefined) return 'nothing';
  if (Array.isArray(v)) return 'an array';
  return typeof v === 'object' ? 'an object' : `${typeof v} ${JSON.stringify(v)?.slice(0, 40)}`;
}
