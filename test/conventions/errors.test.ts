import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { grep, sourceFiles } from './source-files.ts';

// One error convention: every error class extends RtjobError (runtime/errors.ts), which carries
// a stable `code` and keeps it, with the error's fields, across the wire.
test('no error class but RtjobError extends Error directly', () => {
  const files = sourceFiles({ withFixtures: false }).filter((f) => f.path !== 'runtime/errors.ts');
  const hits = grep(files, /class\s+\w+(<[^>]*>)?\s+extends\s+(Error|TypeError|RangeError)\b/);
  assert.equal(hits, [], `extend RtjobError from runtime/errors.ts instead:\n${hits.join('\n')}`);
});

test.run();
