#!/usr/bin/env node
// The `rtjob` command. In the installed package this file is `dist/cli/bin.js` and runs the
// compiled CLI beside it. In the checkout it runs the TypeScript sources, whether it is reached as
// `cli/bin.js` (next to `main.ts`) or as the `dist/cli/bin.js` that `npm install` builds there
// (npm links the package's `bin` to it, so `npx rtjob` in the checkout runs what you edit):
// Node 20 cannot run TypeScript by itself, so it registers tsx's loader in this process (child
// processes get it through `--import tsx`).
import { existsSync } from 'node:fs';

const source = [
  new URL('./main.ts', import.meta.url),
  new URL('../../cli/main.ts', import.meta.url),
].find((url) => existsSync(url));
if (source) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import('./main.js');
}
