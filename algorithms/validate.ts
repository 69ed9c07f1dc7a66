/**
 * Input checks shared by the pure functions: finite numbers, matching lengths.
 *
 * @module
 */
import { AlgorithmError } from './errors.ts';

/** Any array-like of numbers: `number[]`, `Float32Array`, `Int32Array`, ... */
export type Numbers = ArrayLike<number>;

/** Throws `NON_FINITE_INPUT` naming `field` and the index when any value is NaN or ±Infinity. */
export function assertFinite(values: Numbers, field: string): void {
  for (let i = 0; i < values.length; i++) {
    const v = values[i] as number;
    if (!Number.isFinite(v)) {
      throw new AlgorithmError(
        'NON_FINITE_INPUT',
        `${field}[${i}] is ${v}; every value must be a finite number`,
        { field, index: i },
      );
    }
  }
}

/** Throws `SHAPE_MISMATCH` unless `values.length === expected`. */
export function assertLength(values: { length: number }, expected: number, field: string): void {
  if (values.length !== expected) {
    throw new AlgorithmError(
      'SHAPE_MISMATCH',
      `${field} has length ${values.length}, expected ${expected}`,
      { field },
    );
  }
}

/** Throws `SHAPE_MISMATCH` unless both lists hold the same number of rows. */
export function assertSameRows(
  a: { length: number },
  b: { length: number },
  fieldA: string,
  fieldB: string,
): void {
  if (a.length !== b.length) {
    throw new AlgorithmError(
      'SHAPE_MISMATCH',
      `${fieldA} has ${a.length} rows but ${fieldB} has ${b.length}`,
      { field: fieldB },
    );
  }
}

/** Sum of `values[i] * mask[i]` and the mask count, in double precision. */
export function maskedSum(values: Numbers, mask: Numbers): { sum: number; count: number } {
  let sum = 0;
  let count = 0;
  for (let i = 0; i < values.length; i++) {
    const m = mask[i] as number;
    if (m !== 0) {
      sum += (values[i] as number) * m;
      count += m;
    }
  }
  return { sum, count };
}

/** Copies `o` without its `undefined` fields, so spreading it over defaults keeps them. */
export function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o))
    if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
