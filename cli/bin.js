#!/usr/bin/env node
// The `rtjob` command. In the installed package this file is `dist/cli/bin.js` and runs the
// compiled CLI beside it. In the checkout it runs the TypeScript sources, whether it is reached as
// `cli/bin.js` (next to `main.ts`) or as the `dist/cli/bin.js` that `npm install` builds there
// (npm links the package's `bin` to it, so `npx rtjob` in the checkout runs what you edit):
// Node 20 cannot run TypeScript by itself, so it registers tsx's loader in this process (child
// processes get it through `--import tsx`).
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// cli/main.ts beside this file, or, from the checkout's dist/cli/, two folders up.
const source = [join(here, 'main.ts'), join(here, '..', '..', 'cli', 'main.ts')].find(existsSync);
if (source) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(source).href);
} else {
  await import('./main.js');
}
