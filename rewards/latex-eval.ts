/**
 * A small evaluator for numeric LaTeX/plain expressions (`\frac{144}{2}`, `2\sqrt{4}`, `3^2`,
 * `\pi`), standing in for the sympy step of AReaL's `symbolic_equal`: two answers are equal when
 * both evaluate to numbers that are close. Anything with a free symbol evaluates to undefined.
 *
 * @module
 */
import { RewardParseError } from './errors.ts';

type Tok = { k: 'num'; v: number } | { k: 'op'; v: string } | { k: 'cmd'; v: string };

function tokenize(src: string): Tok[] | undefined {
  const toks: Tok[] = [];
  const s = src
    .replace(/\\cdot|\\times/g, '*')
    .replace(/\\div/g, '/')
    .replace(/\\left|\\right|\\,|\\;|\\!|\s+/g, '');
  let i = 0;
  while (i < s.length) {
    const c = s[i] as string;
    const num = /^(\d+\.?\d*|\.\d+)/.exec(s.slice(i));
    if (num) {
      toks.push({ k: 'num', v: Number(num[0]) });
      i += num[0].length;
    } else if (c === '\\') {
      const cmd = /^\\([a-zA-Z]+)/.exec(s.slice(i));
      if (!cmd) return undefined;
      toks.push({ k: 'cmd', v: cmd[1] as string });
      i += cmd[0].length;
    } else if ('+-*/^()[]{}'.includes(c)) {
      toks.push({ k: 'op', v: c === '{' ? '(' : c === '}' ? ')' : c });
      i++;
    } else if (c === 'π') {
      toks.push({ k: 'cmd', v: 'pi' });
      i++;
    } else {
      return undefined;
    }
  }
  return toks;
}

class Parser {
  private i = 0;
  constructor(private readonly toks: Tok[]) {}
  done(): boolean {
    return this.i >= this.toks.length;
  }
  private peek(): Tok | undefined {
    return this.toks[this.i];
  }
  private isOp(v: string): boolean {
    const t = this.peek();
    return t !== undefined && t.k === 'op' && t.v === v;
  }
  private expect(v: string): void {
    if (!this.isOp(v)) throw new RewardParseError(`expected ${v}`);
    this.i++;
  }
  expr(): number {
    let v = this.term();
    while (this.isOp('+') || this.isOp('-')) {
      const op = (this.toks[this.i++] as Tok).v;
      const r = this.term();
      v = op === '+' ? v + r : v - r;
    }
    return v;
  }
  private startsPrimary(): boolean {
    const t = this.peek();
    if (!t) return false;
    return t.k === 'num' || t.k === 'cmd' || (t.k === 'op' && t.v === '(');
  }
  private term(): number {
    let v = this.unary();
    for (;;) {
      if (this.isOp('*')) {
        this.i++;
        v *= this.unary();
      } else if (this.isOp('/')) {
        this.i++;
        v /= this.unary();
      } else if (this.startsPrimary()) {
        v *= this.power();
      } else return v;
    }
  }
  private unary(): number {
    if (this.isOp('-')) {
      this.i++;
      return -this.unary();
    }
    if (this.isOp('+')) {
      this.i++;
      return this.unary();
    }
    return this.power();
  }
  private power(): number {
    const base = this.primary();
    if (this.isOp('^')) {
      this.i++;
      return base ** this.unary();
    }
    return base;
  }
  private group(): number {
    const t = this.peek();
    if (t && t.k === 'num') {
      this.i++;
      return t.v;
    }
    this.expect('(');
    const v = this.expr();
    this.expect(')');
    return v;
  }
  private primary(): number {
    const t = this.peek();
    if (!t) throw new RewardParseError('unexpected end');
    if (t.k === 'num') {
      this.i++;
      return t.v;
    }
    if (t.k === 'op' && t.v === '(') return this.group();
    if (t.k === 'cmd') {
      this.i++;
      switch (t.v) {
        case 'frac':
          return this.group() / this.group();
        case 'sqrt': {
          let n = 2;
          if (this.isOp('[')) {
            this.i++;
            n = this.expr();
            this.expect(']');
          }
          return this.group() ** (1 / n);
        }
        case 'pi':
          return Math.PI;
        case 'infty':
          return Infinity;
        default:
          throw new RewardParseError(`unknown command ${t.v}`);
      }
    }
    throw new RewardParseError(`unexpected ${t.v}`);
  }
}

/**
 * The numeric value of `expr`, or undefined when it is not a closed numeric expression.
 *
 * @example
 * evaluateNumeric('\\frac{144}{2}') // 72
 * evaluateNumeric('x+1')            // undefined
 */
export function evaluateNumeric(expr: string): number | undefined {
  const toks = tokenize(expr);
  if (!toks || toks.length === 0) return undefined;
  try {
    const p = new Parser(toks);
    const v = p.expr();
    return p.done() && !Number.isNaN(v) ? v : undefined;
  } catch {
    return undefined;
  }
}
