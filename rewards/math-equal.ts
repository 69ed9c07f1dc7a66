/**
 * AReaL's `math_equal`: case-insensitive string equality, then numeric equality with the
 * percentage quirk (a prediction equals the reference if it is close to ref/100, ref or ref·100),
 * then bracket/tuple/equation handling, then a numeric evaluation standing in for sympy.
 *
 * @module
 */
import { evaluateNumeric } from './latex-eval.ts';

/** Python `float()` on a string (after comma removal); undefined when Python would raise. */
export function pythonFloat(x: string): number | undefined {
  const t = x.trim();
  if (/^[+-]?(inf|infinity)$/i.test(t)) return t.startsWith('-') ? -Infinity : Infinity;
  if (/^[+-]?nan$/i.test(t)) return NaN;
  const digits = '\\d(?:_?\\d)*';
  const re = new RegExp(
    `^[+-]?(?:${digits}(?:\\.(?:${digits})?)?|\\.${digits})(?:[eE][+-]?${digits})?$`,
  );
  if (!re.test(t)) return undefined;
  return Number(t.replace(/_/g, ''));
}

/** `parse_digits`: commas removed, `float()`, or a trailing `%`/`\%` divides by 100. */
export function parseDigits(num: string): number | undefined {
  const s = num.split(',').join('');
  const v = pythonFloat(s);
  if (v !== undefined) return v;
  if (s.endsWith('%')) {
    let t = s.slice(0, -1);
    if (t.endsWith('\\')) t = t.slice(0, -1);
    const p = pythonFloat(t);
    if (p !== undefined) return p / 100;
  }
  return undefined;
}

/** Python `math.isclose(a, b, rel_tol)`. */
export function isClose(a: number, b: number, relTol = 1e-4): boolean {
  if (a === b) return true;
  if (!Number.isFinite(a) || !Number.isFinite(b)) return false;
  return Math.abs(a - b) <= relTol * Math.max(Math.abs(a), Math.abs(b));
}

function choiceClean(pred: string): string {
  let p = pred
    .replace(/^\n+|\n+$/g, '')
    .replace(/\.+$/, '')
    .replace(/\/+$/, '')
    .replace(/^ +| +$/g, '')
    .replace(/^:+/, '');
  const m = p.toUpperCase().match(/\b(A|B|C|D|E)\b/g);
  p = m && m.length > 0 ? (m[m.length - 1] as string) : p.trim().replace(/^\.+|\.+$/g, '');
  return p.replace(/\.+$/, '').replace(/\/+$/, '');
}

function stripChars(s: string, chars: string): string {
  let a = 0;
  let b = s.length;
  while (a < b && chars.includes(s[a] as string)) a++;
  while (b > a && chars.includes(s[b - 1] as string)) b--;
  return s.slice(a, b);
}

function symbolicEqual(a: string, b: string): boolean {
  if (a === b) return true;
  const x = evaluateNumeric(a);
  const y = evaluateNumeric(b);
  return x !== undefined && y !== undefined && isClose(x, y);
}

/**
 * Whether a predicted answer equals the reference, both already normalised by `extractAnswer`.
 * Never throws.
 *
 * @example
 * mathEqual('72', '72.0')          // true
 * mathEqual('0.72', '72')          // true  (the reference's ±percent quirk)
 * mathEqual('\\frac{144}{2}', '72') // true
 */
export function mathEqual(
  prediction: unknown,
  reference: unknown,
  includePercentage = true,
): boolean {
  if (typeof prediction !== 'string' || typeof reference !== 'string') return false;
  try {
    return mathEqualInner(prediction, reference, includePercentage, 0);
  } catch {
    return false;
  }
}

function mathEqualInner(
  prediction: string,
  reference: string,
  pct: boolean,
  depth: number,
): boolean {
  if (depth > 8) return false;
  if (prediction.trim().toLowerCase() === reference.trim().toLowerCase()) return true;
  if (['A', 'B', 'C', 'D', 'E'].includes(reference) && choiceClean(prediction) === reference)
    return true;
  const p = parseDigits(prediction);
  const r = parseDigits(reference);
  if (p !== undefined && r !== undefined) {
    const candidates = pct ? [r / 100, r, r * 100] : [r];
    return candidates.some((c) => isClose(p, c));
  }
  if (!prediction) return false;
  const ref = reference.trim();
  const pred = prediction.trim();
  let predStr = pred;
  let refStr = ref;
  if (
    (pred.startsWith('[') && pred.endsWith(']') && !ref.startsWith('(')) ||
    (pred.startsWith('(') && pred.endsWith(')') && !ref.startsWith('['))
  ) {
    predStr = stripChars(predStr, '[]()');
    refStr = stripChars(refStr, '[]()');
  }
  for (const ch of ['{', '}', '(', ')']) {
    refStr = refStr.split(ch).join('');
    predStr = predStr.split(ch).join('');
  }
  if (predStr.toLowerCase() === refStr.toLowerCase()) return true;
  const tuple = /^(\(|\[).+(\)|\])/;
  if (tuple.test(pred) && tuple.test(ref)) {
    const pp = pred.slice(1, -1).split(',');
    const rp = ref.slice(1, -1).split(',');
    if (
      pp.length === rp.length &&
      pp.every((x, i) => mathEqualInner(x, rp[i] as string, pct, depth + 1))
    )
      return true;
  }
  const count = (s: string) => s.split('=').length - 1;
  if (count(pred) === 1 && count(ref) === 1) {
    const [pl, pr] = pred.split('=') as [string, string];
    const [rl, rr] = ref.split('=') as [string, string];
    const pe = `${pl.trim()} - (${pr.trim()})`;
    const re = `${rl.trim()} - (${rr.trim()})`;
    if (symbolicEqual(pe, re) || symbolicEqual(`-(${pe})`, re)) return true;
  } else if (
    count(pred) === 1 &&
    (pred.split('=')[0] as string).trim().length <= 2 &&
    !ref.includes('=')
  ) {
    if (mathEqualInner(pred.split('=')[1] as string, reference, pct, depth + 1)) return true;
  } else if (
    count(ref) === 1 &&
    (ref.split('=')[0] as string).trim().length <= 2 &&
    !pred.includes('=')
  ) {
    if (mathEqualInner(prediction, ref.split('=')[1] as string, pct, depth + 1)) return true;
  }
  return symbolicEqual(pred, ref);
}
