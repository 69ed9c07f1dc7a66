#!/usr/bin/env node
// The `rtjob` command. Node 20 cannot run TypeScript by itself, so register tsx's loader in this
// process (child processes get it through `--import tsx`) and hand over to the real CLI.
import { register } from 'tsx/esm/api';

register();
await import('./main.ts');
