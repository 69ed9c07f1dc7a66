/**
 * The process `rtjob eval` starts: `train/eval-agent.ts` under the flags a worker runs with
 * (rtjob's TypeScript loader), so a `.ts` agent file loads here exactly as it does in training.
 *
 * Usage (internal): node --import <rtjob's TypeScript loader> cli/eval-main.ts <rtjob eval's arguments>
 *
 * @module
 */
import { runIfMain } from '../train/driver-flags.ts';
import { evalAgentHelp, main } from '../train/eval-agent.ts';

runIfMain(
  import.meta.url,
  'rtjob eval',
  (argv) => main(argv, 'rtjob eval'),
  () => evalAgentHelp('rtjob eval'),
);
