/**
 * Shape checks for values read off the wire: small combinators that say what a value must be
 * (with limits: string lengths, array sizes, numeric ranges, finite numbers) and infer the
 * TypeScript type they accept, so a schema and the type it guards cannot drift.
 *
 * Checks return the first problem as a short path-qualified reason (`options.resources.CPU: not a
 * finite number`) or `undefined`; they never throw and allocate nothing on success, so they can
 * run on every actor call.
 *
 * Hand-written rather than zod: a call frame is checked in well under a microsecond, and the
 * reasons are the one-line errors the protocol returns.
 *
 * @example
 * const point = obj({ x: num(), y: num({ min: 0 }) });
 * type Point = Infer<typeof point>; // { x: number; y: number }
 * point.check({ x: 1, y: -1 }, 'p'); // 'p.y: below 0'
 *
 * @module
 */

/** What a schema accepts, as data: lets tests generate valid and broken instances (fuzzing). */
export type SchemaSpec =
  | { readonly kind: 'any' | 'bool' }
  | { readonly kind: 'str'; readonly min: number; readonly max: number; readonly pattern?: RegExp }
  | { readonly kind: 'num' | 'int'; readonly min: number; readonly max: number }
  | { readonly kind: 'bytes'; readonly max: number }
  | { readonly kind: 'lit'; readonly values: readonly unknown[] }
  | { readonly kind: 'opt' | 'nullable'; readonly of: Schema<unknown> }
  | {
      readonly kind: 'arr';
      readonly of: Schema<unknown>;
      readonly min: number;
      readonly max: number;
    }
  | { readonly kind: 'record'; readonly of: Schema<unknown>; readonly maxKeys: number }
  | { readonly kind: 'obj'; readonly shape: Readonly<Record<string, Schema<unknown>>> }
  | { readonly kind: 'oneOf'; readonly options: readonly Schema<unknown>[] }
  | { readonly kind: 'custom'; readonly what: string };

/** A check for values of type `T`. */
export interface Schema<T> {
  readonly spec: SchemaSpec;
  /** Why `v` is not a `T` (prefixed with `path`), or `undefined` when it is. */
  check(v: unknown, path: string): string | undefined;
  /** Phantom: the accepted type, for `Infer`. */
  readonly _type?: T;
  /** Set by `opt`: the key may be absent. */
  readonly optional?: true;
}

/** The type a schema accepts. */
export type Infer<S> = S extends Schema<infer T> ? T : never;

/** `v`'s kind in words, for reasons. */
function kind(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (v instanceof Uint8Array) return 'bytes';
  return typeof v === 'object' ? 'an object' : `a ${typeof v}`;
}

const at = (path: string, why: string) => `${path}: ${why}`;

/** Any value (payloads the receiver interprets itself: call arguments, reply values). */
export function any(): Schema<unknown> {
  return { spec: { kind: 'any' }, check: () => undefined };
}

/** A string of at most `max` characters (default 1024), optionally matching `pattern`. */
export function str(o: { max?: number; min?: number; pattern?: RegExp } = {}): Schema<string> {
  const max = o.max ?? 1024;
  const min = o.min ?? 0;
  return {
    spec: { kind: 'str', min, max, pattern: o.pattern },
    check(v, path) {
      if (typeof v !== 'string') return at(path, `expected a string, got ${kind(v)}`);
      if (v.length > max) return at(path, `longer than ${max} characters`);
      if (v.length < min) return at(path, min === 1 ? 'empty' : `shorter than ${min} characters`);
      if (o.pattern && !o.pattern.test(v)) return at(path, `does not match ${o.pattern}`);
      return undefined;
    },
  };
}

/** A finite number in `[min, max]`. */
export function num(o: { min?: number; max?: number } = {}): Schema<number> {
  const min = o.min ?? -Number.MAX_VALUE;
  const max = o.max ?? Number.MAX_VALUE;
  return {
    spec: { kind: 'num', min, max },
    check(v, path) {
      if (typeof v !== 'number' || !Number.isFinite(v))
        return at(path, `expected a finite number, got ${kind(v)}`);
      if (v < min) return at(path, `below ${min}`);
      if (v > max) return at(path, `above ${max}`);
      return undefined;
    },
  };
}

/** An integer in `[min, max]` (default: 0 to 2^53 − 1). */
export function int(o: { min?: number; max?: number } = {}): Schema<number> {
  const min = o.min ?? 0;
  const max = o.max ?? Number.MAX_SAFE_INTEGER;
  return {
    spec: { kind: 'int', min, max },
    check(v, path) {
      if (typeof v !== 'number' || !Number.isInteger(v))
        return at(path, `expected an integer, got ${kind(v)}`);
      if (v < min) return at(path, `below ${min}`);
      if (v > max) return at(path, `above ${max}`);
      return undefined;
    },
  };
}

export function bool(): Schema<boolean> {
  return {
    spec: { kind: 'bool' },
    check: (v, path) =>
      typeof v === 'boolean' ? undefined : at(path, `expected a boolean, got ${kind(v)}`),
  };
}

/** Bytes (`Uint8Array` or `Buffer`) of at most `max` bytes. */
export function bytes(max: number): Schema<Uint8Array> {
  return {
    spec: { kind: 'bytes', max },
    check(v, path) {
      if (!(v instanceof Uint8Array)) return at(path, `expected bytes, got ${kind(v)}`);
      if (v.byteLength > max) return at(path, `more than ${max} bytes`);
      return undefined;
    },
  };
}

/** One of the given literal values. */
export function lit<const T extends readonly (string | number | boolean | null)[]>(
  ...values: T
): Schema<T[number]> {
  const set = new Set<unknown>(values);
  const list = values.map((x) => JSON.stringify(x)).join(' | ');
  return {
    spec: { kind: 'lit', values },
    check: (v, path) => (set.has(v) ? undefined : at(path, `expected ${list}`)),
  };
}

/** `s`, or the key may be absent (`undefined`). */
export function opt<T>(s: Schema<T>): Schema<T | undefined> & { readonly optional: true } {
  return {
    spec: { kind: 'opt', of: s },
    optional: true,
    check: (v, path) => (v === undefined ? undefined : s.check(v, path)),
  };
}

/** `s` or `null`. */
export function nullable<T>(s: Schema<T>): Schema<T | null> {
  return {
    spec: { kind: 'nullable', of: s },
    check: (v, path) => (v === null ? undefined : s.check(v, path)),
  };
}

/** An array of at most `max` items, each a `T`. */
export function arr<T>(item: Schema<T>, max: number, min = 0): Schema<T[]> {
  return {
    spec: { kind: 'arr', of: item, min, max },
    check(v, path) {
      if (!Array.isArray(v)) return at(path, `expected an array, got ${kind(v)}`);
      if (v.length > max) return at(path, `more than ${max} items`);
      if (v.length < min) return at(path, `fewer than ${min} items`);
      for (let i = 0; i < v.length; i++) {
        const bad = item.check(v[i], `${path}[${i}]`);
        if (bad) return bad;
      }
      return undefined;
    },
  };
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** An object whose keys are at most `maxKeys` strings of at most `keyMax` characters, values `T`. */
export function record<T>(
  value: Schema<T>,
  maxKeys: number,
  keyMax = 256,
): Schema<Record<string, T>> {
  return {
    spec: { kind: 'record', of: value, maxKeys },
    check(v, path) {
      if (!isPlainObject(v)) return at(path, `expected an object, got ${kind(v)}`);
      let n = 0;
      for (const k in v) {
        if (++n > maxKeys) return at(path, `more than ${maxKeys} keys`);
        if (k.length > keyMax) return at(path, `a key is longer than ${keyMax} characters`);
        const bad = value.check(v[k], `${path}.${k}`);
        if (bad) return bad;
      }
      return undefined;
    },
  };
}

type Shape = Record<string, Schema<unknown>>;
type OptionalKeys<S extends Shape> = {
  [K in keyof S]: S[K] extends { optional: true } ? K : never;
}[keyof S];
type Flatten<T> = { [K in keyof T]: T[K] };
/** The object type a shape accepts (optional keys for `opt` fields). */
export type ObjOf<S extends Shape> = Flatten<
  { [K in Exclude<keyof S, OptionalKeys<S>>]: Infer<S[K]> } & {
    [K in OptionalKeys<S>]?: Infer<S[K]>;
  }
>;

/** An object with these keys (others are ignored; they reach no handler's types). */
export function obj<S extends Shape>(shape: S): Schema<ObjOf<S>> & { readonly shape: S } {
  const entries = Object.entries(shape);
  return {
    shape,
    spec: { kind: 'obj', shape },
    check(v, path) {
      if (!isPlainObject(v)) return at(path, `expected an object, got ${kind(v)}`);
      for (let i = 0; i < entries.length; i++) {
        const [k, s] = entries[i]!;
        const bad = s.check(v[k], path === '' ? k : `${path}.${k}`);
        if (bad) return bad;
      }
      return undefined;
    },
  };
}

/** The first of `options` that accepts the value (reason: the last one's). */
export function oneOf<const S extends readonly Schema<unknown>[]>(
  ...options: S
): Schema<Infer<S[number]>> {
  return {
    spec: { kind: 'oneOf', options },
    check(v, path) {
      let last: string | undefined;
      for (const s of options) {
        last = s.check(v, path);
        if (last === undefined) return undefined;
      }
      return last;
    },
  };
}

/**
 * A type the combinators cannot say (e.g. a union owned by another module), checked by `test`;
 * the caller vouches that `test` admits only `T`s.
 */
export function custom<T>(what: string, test: (v: unknown) => boolean): Schema<T> {
  return {
    spec: { kind: 'custom', what },
    check: (v, path) => (test(v) ? undefined : at(path, `expected ${what}`)),
  };
}

/**
 * For compile-time checks that a schema and a hand-written type agree: `readonly` dropped at
 * every level (assignability ignores it on properties but not on arrays).
 */
export type DeepMutable<T> = T extends Uint8Array
  ? T
  : T extends readonly (infer U)[]
    ? DeepMutable<U>[]
    : T extends object
      ? { -readonly [K in keyof T]: DeepMutable<T[K]> }
      : T;

/** `true` when `A` and `B` are assignable both ways (ignoring `readonly`). */
export type SameShape<A, B> = [DeepMutable<A>] extends [DeepMutable<B>]
  ? [DeepMutable<B>] extends [DeepMutable<A>]
    ? true
    : false
  : false;
