/**
 * What a hand-written training loop takes from the trainer's side (`rtjob/train`): the built-in
 * arithmetic dataset and the seeded prompt sampler `train_ppo` draws its batches with. The roles
 * themselves are `rtjob/roles`; experience and advantages are `rtjob/algorithms`.
 *
 * @example
 * import { PromptSampler, builtinDataset } from 'rtjob/train';
 * const data = new PromptSampler(builtinDataset('arith')!, { input: 'prompt', label: 'solution' }, 1);
 * const items = data.next(16); // PromptItem[], each for Rollout.runGroup
 *
 * @module
 */
export { type ArithOptions, type ArithRecord, arithDataset, builtinDataset } from './data/arith.ts';
export { type DataPosition, PromptSampler, type PromptRecord } from './ppo/data.ts';

// What the CLI takes of the drivers (`test/conventions/layering.test.ts`: it imports nothing
// else of `train/`): `rtjob submit`'s check of a train_ppo command line, `rtjob serve
// --engine-url`'s URL list, `rtjob metrics --plot`'s curves, and `rtjob eval`'s program.
export {
  badEngineUrl,
  engineUrls,
  FlagError,
  parseTrainPpoArgs,
  parseTrainPpoFlags,
  type ParsedTrainPpoArgs,
  type TrainPpoOptions,
} from './ppo/flags.ts';
export { checkTrainPpoKeys, checkTrainPpoPaths } from './ppo/paths.ts';
export { gpuProblem } from './ppo/gpu-check.ts';
export { resolveCheckpointFlags } from './checkpoint-flags.ts';
export { writeCurves } from './ppo/curves.ts';
/** `rtjob eval`'s program (`eval-agent.ts`), loaded on demand: it brings the gateway and engines. */
export const evalAgent = (): Promise<typeof import('./eval-agent.ts')> => import('./eval-agent.ts');
