/**
 * English number words → digits, a port of the `word2number` package's `word_to_num` that
 * AReaL's `strip_string` applies to a whole answer: every number word in the text is kept, every
 * other word ignored ("five apples" → "5"); text with no number word is returned unchanged.
 *
 * @module
 */
import { RewardParseError } from './errors.ts';

const SMALL: Record<string, number> = {
  zero: 0,
  one: 1,
  two: 2,
  three: 3,
  four: 4,
  five: 5,
  six: 6,
  seven: 7,
  eight: 8,
  nine: 9,
  ten: 10,
  eleven: 11,
  twelve: 12,
  thirteen: 13,
  fourteen: 14,
  fifteen: 15,
  sixteen: 16,
  seventeen: 17,
  eighteen: 18,
  nineteen: 19,
  twenty: 20,
  thirty: 30,
  forty: 40,
  fifty: 50,
  sixty: 60,
  seventy: 70,
  eighty: 80,
  ninety: 90,
  hundred: 100,
  thousand: 1000,
  million: 1000000,
  billion: 1000000000,
};
const DECIMAL_WORDS = [
  'zero',
  'one',
  'two',
  'three',
  'four',
  'five',
  'six',
  'seven',
  'eight',
  'nine',
];

function isNumberWord(w: string): boolean {
  return w === 'point' || Object.prototype.hasOwnProperty.call(SMALL, w);
}

function formation(words: string[]): number {
  const n = words.map((w) => SMALL[w] as number);
  if (n.length === 0) throw new RewardParseError('empty number group');
  if (n.length === 4)
    return (n[0] as number) * (n[1] as number) + (n[2] as number) + (n[3] as number);
  if (n.length === 3) return (n[0] as number) * (n[1] as number) + (n[2] as number);
  if (n.length === 2)
    return n.includes(100)
      ? (n[0] as number) * (n[1] as number)
      : (n[0] as number) + (n[1] as number);
  return n[0] as number;
}

/** `word_to_num`: returns the number as Python would print it, or throws when there is none. */
function wordToNum(sentence: string): string {
  const s = sentence.replace(/-/g, ' ').toLowerCase();
  if (/^\p{Nd}+$/u.test(s)) return String(Number(s));
  const clean = s.trim().split(/\s+/).filter(isNumberWord);
  if (clean.length === 0) throw new RewardParseError('no number words');
  const count = (w: string) => clean.filter((x) => x === w).length;
  if (count('thousand') > 1 || count('million') > 1 || count('billion') > 1 || count('point') > 1)
    throw new RewardParseError('redundant');
  let words = clean;
  let decimals: string[] = [];
  const p = clean.indexOf('point');
  if (p >= 0) {
    decimals = clean.slice(p + 1);
    words = clean.slice(0, p);
  }
  const bi = words.indexOf('billion');
  const mi = words.indexOf('million');
  const th = words.indexOf('thousand');
  if ((th > -1 && (th < mi || th < bi)) || (mi > -1 && mi < bi))
    throw new RewardParseError('malformed');
  let total = 0;
  if (words.length === 1) total += SMALL[words[0] as string] as number;
  else if (words.length > 1) {
    if (bi > -1) total += formation(words.slice(0, bi)) * 1e9;
    if (mi > -1) total += formation(words.slice(bi > -1 ? bi + 1 : 0, mi)) * 1e6;
    if (th > -1)
      total += formation(words.slice(mi > -1 ? mi + 1 : bi > -1 ? bi + 1 : 0, th)) * 1000;
    const last = words.length - 1;
    let hundreds = 0;
    if (th > -1 && th !== last) hundreds = formation(words.slice(th + 1));
    else if (mi > -1 && mi !== last) hundreds = formation(words.slice(mi + 1));
    else if (bi > -1 && bi !== last) hundreds = formation(words.slice(bi + 1));
    else if (th === -1 && mi === -1 && bi === -1) hundreds = formation(words);
    total += hundreds;
  }
  if (decimals.length > 0) {
    if (decimals.every((w) => DECIMAL_WORDS.includes(w))) {
      const frac = Number('0.' + decimals.map((w) => SMALL[w]).join(''));
      const v = total + frac;
      return Number.isInteger(v) ? `${v}.0` : String(v);
    }
  }
  return String(total);
}

/**
 * Replaces the whole text with the number its number words spell, when it has any.
 *
 * @example
 * convertWordNumber('twenty five') // '25'
 * convertWordNumber('3.5')         // '3.5' (unchanged: no number words)
 */
export function convertWordNumber(text: string): string {
  try {
    return wordToNum(text);
  } catch {
    return text;
  }
}
