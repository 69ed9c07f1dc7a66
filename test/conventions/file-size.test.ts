// Files that read in one sitting: a source file over 600 lines says at its top why it is one file
// ("… on purpose: …" in its first comment), or it is split into its concepts.
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { isProduct, sourceFiles } from './source-files.ts';

test('every source file over 600 lines says at its top why', () => {
  const lines = (text: string): number => text.replace(/\n$/, '').split('\n').length;
  const long = sourceFiles({ withFixtures: false })
    .filter((f) => isProduct(f.path))
    .filter((f) => lines(f.text) > 600)
    .filter((f) => !/on purpose/.test(f.text.split('\n').slice(0, 40).join('\n')))
    .map((f) => `${f.path} (${lines(f.text)} lines)`);
  assert.equal(long, [], `split these, or say at the top why not:\n${long.join('\n')}`);
});

test.run();
