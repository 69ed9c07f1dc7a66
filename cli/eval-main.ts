/**
 * The process `rtjob eval` starts: `train/eval-agent.ts` under the flags a worker runs with
 * (rtjob's TypeScript loader), so a `.ts` agent file loads here exactly as it does in training.
 *
 * Usage (internal): node --import <rtjob's TypeScript loader> cli/eval-main.ts <rtjob eval's arguments>
 *
 * @module
 */
import { evalAgent } from '../train/index.ts';

(await evalAgent()).runEvalAgent(import.meta.url, 'rtjob eval');
