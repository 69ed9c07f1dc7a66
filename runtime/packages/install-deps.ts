/**
 * `node install-deps.js DIR [SUBMITTER_NODE_MODULES]`: gives an uploaded working dir its npm
 * dependencies before a job's driver starts in it (`package-deps.ts`); run by the driver's shell,
 * so the output is in the job's log.
 *
 * @module
 */
import { installDepsMain } from './package-deps.ts';

process.exitCode = await installDepsMain(process.argv.slice(2));
