/**
 * Instances of a schema for fuzzing: a valid one (`sample`) and one broken at a single random
 * place (`mutate`): a wrong type, a value past a limit, a missing required key, NaN or Infinity.
 */
import type { Schema } from '../../runtime/schema.ts';

export type Rand = () => number;

/** A seeded generator (LCG), so a failure can be replayed. */
export function seeded(seed: number): Rand {
  let s = seed;
  return () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x7fffffff;
  };
}

const pick = <T>(r: Rand, xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

/** A valid instance of `s` (small: short strings, few items). */
export function sample(s: Schema<unknown>, r: Rand): unknown {
  const sp = s.spec;
  switch (sp.kind) {
    case 'any':
      return pick(r, [1, 'x', null, [1, 2], { a: 1 }]);
    case 'bool':
      return r() < 0.5;
    case 'str': {
      if (sp.pattern) return 'a'.repeat(64); // the only patterned strings are sha256 hex digests
      const n = Math.min(sp.max, Math.max(sp.min, 8));
      return Array.from({ length: n }, () => pick(r, [...'abcdef0123'])).join('');
    }
    case 'int':
      return Math.max(sp.min, Math.min(sp.max, Math.floor(r() * 10)));
    case 'num':
      return Math.max(sp.min, Math.min(sp.max, r() * 10));
    case 'bytes':
      return new Uint8Array(Math.min(sp.max, 4));
    case 'lit':
      return pick(r, sp.values);
    case 'opt':
      return r() < 0.5 ? undefined : sample(sp.of, r);
    case 'nullable':
      return r() < 0.3 ? null : sample(sp.of, r);
    case 'arr':
      return Array.from({ length: Math.max(sp.min, Math.min(sp.max, Math.floor(r() * 3))) }, () =>
        sample(sp.of, r),
      );
    case 'record':
      return Object.fromEntries(
        Array.from({ length: Math.min(sp.maxKeys, 2) }, (_, i) => [`k${i}`, sample(sp.of, r)]),
      );
    case 'obj':
      return Object.fromEntries(
        Object.entries(sp.shape)
          .map(([k, v]) => [k, sample(v, r)] as const)
          .filter(([, v]) => v !== undefined),
      );
    case 'oneOf':
      return sample(pick(r, sp.options), r);
    case 'custom':
      return { name: 'Error', code: 'PROTOCOL', message: 'sampled' };
  }
}

/** A value `s` rejects (best effort: callers check with `s.check`). */
export function wrong(s: Schema<unknown>, r: Rand): unknown {
  const sp = s.spec;
  const junk = pick(r, [
    NaN,
    Infinity,
    -1,
    2 ** 60,
    'str',
    '',
    {},
    [],
    null,
    true,
    new Uint8Array(3),
    { nested: { deep: [1] } },
  ]);
  switch (sp.kind) {
    case 'str':
      return r() < 0.5 ? 'x'.repeat(sp.max + 1) : junk;
    case 'int':
    case 'num':
      return pick(r, [sp.max * 2 + 1, sp.min - 1, NaN, Infinity, 0.5, '1', junk]);
    case 'arr':
      return r() < 0.3 ? Array.from({ length: Math.min(sp.max + 1, 200_000) }, () => 0) : junk;
    case 'opt':
    case 'nullable':
      return wrong(sp.of, r);
    default:
      return junk;
  }
}

/** `v` (a valid object of `s`) with one key, at any depth, broken or removed. */
export function mutate(v: unknown, s: Schema<unknown>, r: Rand): unknown {
  const sp = s.spec;
  if (sp.kind === 'obj' && typeof v === 'object' && v !== null) {
    const keys = Object.keys(sp.shape).filter((k) => k !== 'type' && k !== 'rid');
    if (keys.length === 0) return wrong(s, r);
    const k = pick(r, keys);
    const sub = sp.shape[k]!;
    const out = { ...(v as Record<string, unknown>) };
    const roll = r();
    if (roll < 0.15 && sub.spec.kind !== 'opt') delete out[k];
    else if (
      roll < 0.5 &&
      (sub.spec.kind === 'obj' || (sub.spec.kind === 'opt' && sub.spec.of.spec.kind === 'obj'))
    ) {
      const inner = sub.spec.kind === 'opt' ? sub.spec.of : sub;
      out[k] = mutate(out[k] ?? sample(inner, r), inner, r);
    } else out[k] = wrong(sub, r);
    return out;
  }
  return wrong(s, r);
}
