/**
 * AReaL's (Qwen2.5-Math's) `strip_string`: normalises an extracted answer so that equal answers
 * compare equal as strings — units, dollar signs, `\text{}`, percent signs, trailing `.0`, word
 * numbers and fraction spellings are removed or rewritten, in the reference's order.
 *
 * @module
 */
import { convertWordNumber } from './word-numbers.ts';

/** Unit words removed from answers (each also with a trailing "s"), in the reference's order. */
const BASE_UNITS = [
  'east',
  'degree',
  'mph',
  'kmph',
  'ft',
  'm sqaure',
  ' m east',
  'sq m',
  'deg',
  'mile',
  'q .',
  'monkey',
  'prime',
  'ratio',
  'profit of rs',
  'rd',
  'o',
  'gm',
  'p . m',
  'lb',
  'tile',
  'per',
  'dm',
  'lt',
  'gain',
  'ab',
  'way',
  'west',
  'a .',
  'b .',
  'c .',
  'd .',
  'e .',
  'f .',
  'g .',
  'h .',
  't',
  'a',
  'h',
  'no change',
  'men',
  'soldier',
  'pie',
  'bc',
  'excess',
  'st',
  'inches',
  'noon',
  'percent',
  'by',
  'gal',
  'kmh',
  'c',
  'acre',
  'rise',
  'a . m',
  'th',
  'π r 2',
  'sq',
  'mark',
  'l',
  'toy',
  'coin',
  'sq . m',
  'gallon',
  '° f',
  'profit',
  'minw',
  'yr',
  'women',
  'feet',
  'am',
  'pm',
  'hr',
  'cu cm',
  'square',
  'v â € ™',
  'are',
  'rupee',
  'rounds',
  'cubic',
  'cc',
  'mtr',
  's',
  'ohm',
  'number',
  'kmph',
  'day',
  'hour',
  'minute',
  'min',
  'second',
  'man',
  'woman',
  'sec',
  'cube',
  'mt',
  'sq inch',
  'mp',
  '∏ cm ³',
  'hectare',
  'more',
  'sec',
  'unit',
  'cu . m',
  'cm 2',
  'rs .',
  'rs',
  'kg',
  'g',
  'month',
  'km',
  'm',
  'cm',
  'mm',
  'apple',
  'liter',
  'loss',
  'yard',
  'pure',
  'year',
  'increase',
  'decrease',
  'd',
  'less',
  'Surface',
  'litre',
  'pi sq m',
  's .',
  'metre',
  'meter',
  'inch',
];
export const UNIT_TEXTS: readonly string[] = [...BASE_UNITS, ...BASE_UNITS.map((u) => u + 's')];

// Python's \W on str patterns is Unicode-aware; JS's is ASCII-only even with /u.
const NON_WORD = '[^\\p{L}\\p{N}_]';
// The unit texts are used as regex source, unescaped, exactly as the reference does ("q ." matches "q x").
const UNIT_PATTERNS = UNIT_TEXTS.map((u) => new RegExp(`(^|${NON_WORD})${u}($|${NON_WORD})`, 'gu'));

function fixFracs(s: string): string {
  const parts = s.split('\\frac');
  let out = parts[0] as string;
  for (const sub of parts.slice(1)) {
    out += '\\frac';
    if (sub.length > 0 && sub[0] === '{') out += sub;
    else {
      if (sub.length < 2) return s;
      const a = sub[0] as string;
      const b = sub[1] as string;
      if (b !== '{') out += `{${a}}{${b}}` + sub.slice(2);
      else out += `{${a}}${b}` + sub.slice(2);
    }
  }
  return out;
}

/** Python `int(x)` on a string: optional sign, digits (underscores between), surrounding spaces. */
function pyInt(x: string): number | undefined {
  const t = x.trim();
  if (!/^[+-]?\d+(_\d+)*$/.test(t)) return undefined;
  return Number(t.replace(/_/g, ''));
}

function fixSlash(s: string): string {
  const parts = s.split('/');
  if (parts.length !== 2) return s;
  let [a, b] = parts as [string, string];
  if (!a.includes('sqrt')) {
    const v = pyInt(a);
    if (v === undefined) return s;
    a = String(v);
  }
  if (!b.includes('sqrt')) {
    const v = pyInt(b);
    if (v === undefined) return s;
    b = String(v);
  }
  if (s !== `${a}/${b}`) return s;
  return `\\frac{${a}}{${b}}`;
}

/**
 * Normalises an answer string the way AReaL's `strip_string` does.
 *
 * @example
 * stripString('\\$1,000.00')       // '1,000'
 * stripString('\\dfrac{1}{2}')     // '\\frac{1}{2}'
 * stripString('12 apples')         // '12'
 */
export function stripString(input: string, skipUnit = false): string {
  let s = String(input).trim();
  s = s.replace(/\n/g, '');
  s = s.replace(/\.+$/, '');
  s = s.split('\\!').join('');
  s = s.replace(/\\begin\{array\}\{.*?\}/g, '\\begin{pmatrix}');
  s = s.replace(/\\end\{array\}/g, '\\end{pmatrix}');
  s = s.split('bmatrix').join('pmatrix');
  s = s.split('tfrac').join('frac').split('dfrac').join('frac');
  s = s.split('\\neq').join('\\ne').split('\\leq').join('\\le').split('\\geq').join('\\ge');
  s = s.split('\\left').join('').split('\\right').join('');
  s = s.split('\\{').join('{').split('\\}').join('}');
  const noText = s.replace(/\\text\{.*?\}$/, '').trim();
  if (noText !== '' && noText !== s) s = noText;
  if (!skipUnit) {
    for (let pass = 0; pass < 2; pass++) {
      for (const re of UNIT_PATTERNS) {
        const t = s.replace(re, '$1$2');
        if (t !== '') s = t;
      }
    }
  }
  s = s.split('^{\\circ}').join('').split('^\\circ').join('');
  s = s.split('\\$').join('').split('$').join('');
  s = s.split('\\(').join('').split('\\)').join('');
  s = convertWordNumber(s);
  s = s.replace(/\\text\{(.*?)\}/g, '$1');
  for (const key of ['x=', 'y=', 'z=', 'x\\in', 'y\\in', 'z\\in', 'x\\to', 'y\\to', 'z\\to'])
    s = s.split(key).join('');
  s = s.split('\\emptyset').join('{}');
  s = s.split('(-\\infty,\\infty)').join('\\mathbb{R}');
  s = s.split('\\%').join('').split('%').join('');
  s = s.split(' .').join(' 0.').split('{.').join('{0.');
  s = s.split('infinity').join('\\infty');
  if (!s.includes('\\infty')) s = s.split('inf').join('\\infty');
  s = s.split('+\\inity').join('\\infty');
  s = s.split('and').join('');
  s = s.split('\\mathbf').join('');
  s = s.replace(/\\mbox\{.*?\}/g, '');
  if (s.includes('j') && !s.includes('i')) s = s.split('j').join('i');
  s = s.replace(/(\d+)\.0*([^\d])/g, '$1$2');
  s = s.replace(/(\d+)\.0*$/, '$1');
  if (s.length === 0) return s;
  if (s[0] === '.') s = '0' + s;
  const eq = s.split('=');
  if (eq.length === 2 && (eq[0] as string).length <= 2) s = eq[1] as string;
  s = s.replace(/\\sqrt([\p{L}\p{N}_]+)/gu, '\\sqrt{$1}');
  s = s.split(' ').join('');
  s = fixFracs(s);
  s = fixSlash(s);
  return s;
}
