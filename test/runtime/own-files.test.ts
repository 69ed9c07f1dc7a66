// The package's own modules by path: the `.ts` sources in the checkout, the compiled `.js` beside
// a compiled caller in the installed package (dist/ mirrors the tree).
import { test } from 'uvu';
import * as assert from 'uvu/assert';

import { compiled, ownModule, packageRoot } from '../../runtime/own-files.ts';

test('a .ts caller gets the .ts source, a compiled .js caller the .js beside it', () => {
  assert.is(
    ownModule('../worker/main.ts', 'file:///p/runtime/node/agent.ts').href,
    'file:///p/runtime/worker/main.ts',
  );
  assert.is(
    ownModule('../worker/main.ts', 'file:///p/dist/runtime/node/agent.js').href,
    'file:///p/dist/runtime/worker/main.js',
  );
  assert.is(
    ownModule('../worker/ts-loader.mjs', 'file:///p/dist/runtime/node/agent.js').href,
    'file:///p/dist/runtime/worker/ts-loader.mjs',
    'other files keep their names',
  );
});

test('in the checkout, the package root is the checkout', () => {
  assert.is(compiled, false);
  assert.ok(packageRoot.endsWith('/'));
  assert.is(new URL('package.json', `file://${packageRoot}`).protocol, 'file:');
});

test.run();
