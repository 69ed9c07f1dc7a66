import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { grep, isProduct, sourceFiles } from './source-files.ts';

// One error convention: every error class extends RtjobError (runtime/errors.ts), which carries
// a stable `code` and keeps it, with the error's fields, across the wire.
test('no error class but RtjobError extends Error directly', () => {
  const files = sourceFiles({ withFixtures: false }).filter((f) => f.path !== 'runtime/errors.ts');
  const hits = grep(files, /class\s+\w+(<[^>]*>)?\s+extends\s+(Error|TypeError|RangeError)\b/);
  assert.equal(hits, [], `extend RtjobError from runtime/errors.ts instead:\n${hits.join('\n')}`);
});

// …and every error thrown in the product is one of them, with a code: a bare `new Error` thrown
// inside an actor reaches its caller as a code-less `TASK`. Tests, fixtures, benchmarks, scripts
// and examples model user code and may throw what they like.
test('no bare Error, RangeError or TypeError is thrown in source', () => {
  const files = sourceFiles({ withFixtures: false }).filter((f) => isProduct(f.path));
  const hits = grep(files, /\bthrow\s+new\s+(Error|RangeError|TypeError)\s*\(/);
  assert.equal(hits, [], `throw an RtjobError subclass with a code instead:\n${hits.join('\n')}`);
});

// A literal `name` per class, not `constructor.name`, which a bundler may rename.
test('every error class in source names itself literally', () => {
  const missing: string[] = [];
  for (const f of sourceFiles({ withFixtures: false }).filter((x) => isProduct(x.path))) {
    for (const m of f.text.matchAll(
      /^(?:export )?(?:abstract )?class (\w+)(?:<.*>)? extends \w*Error\b.*\{\}?$/gm,
    )) {
      const name = m[1]!;
      if (name === 'RtjobError') continue;
      const body = f.text.slice(m.index + m[0].length, m.index + m[0].length + 200);
      if (!body.includes(`override get name(): string {\n    return '${name}';`))
        missing.push(`${f.path}: ${name}`);
    }
  }
  assert.equal(missing, [], `give these a literal name getter:\n${missing.join('\n')}`);
});

// Codes read alike, UPPER_SNAKE ('ACTOR_DIED', 'SERVER_EXITED'): callers in other processes
// match a code as a string, so one spelling keeps them guessable. One known exception:
// GatewayError's codes are OpenAI's wire codes ('model_not_found'), which clients match.
const wireOrLegacyCodes = new Set(['GatewayErrorCode']);
test('error codes are UPPER_SNAKE', () => {
  const lower: string[] = [];
  for (const f of sourceFiles({ withFixtures: false }).filter((x) => isProduct(x.path))) {
    const text = f.text.replace(/\/\*[\s\S]*?\*\//g, '');
    const unions = [
      ...text.matchAll(/^export type (\w+ErrorCode) =([^;]*);/gm),
      ...text.matchAll(/class (\w+) extends RtjobError<([^>]*)>/g),
    ];
    for (const [, name, union] of unions) {
      if (wireOrLegacyCodes.has(name!)) continue;
      for (const [, code] of union!.matchAll(/'([^']*)'/g))
        if (!/^[A-Z][A-Z0-9_]*$/.test(code!)) lower.push(`${f.path}: ${name} '${code}'`);
    }
  }
  assert.equal(lower, [], `spell these codes UPPER_SNAKE:\n${lower.join('\n')}`);
});

test.run();
