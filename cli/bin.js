#!/usr/bin/env node
// The `rtjob` command. In the installed package this file is `dist/cli/bin.js` and runs the
// compiled CLI beside it. In the checkout (`cli/bin.js`, next to `main.ts`) it runs the TypeScript
// sources: Node 20 cannot run TypeScript by itself, so it registers tsx's loader in this process
// (child processes get it through `--import tsx`).
import { existsSync } from 'node:fs';

const source = new URL('./main.ts', import.meta.url);
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  await import(source.href);
} else {
  await import('./main.js');
}
