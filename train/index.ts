/**
 * What a hand-written training loop takes from the trainer's side (`rtjob/train`): the built-in
 * arithmetic dataset and the seeded prompt sampler `train_ppo` draws its batches with. The roles
 * themselves are `rtjob/roles`; experience and advantages are `rtjob/algorithms`.
 *
 * @example
 * import { PromptSampler, builtinDataset } from 'rtjob/train';
 * const data = new PromptSampler(builtinDataset('arith')!, { input: 'prompt', label: 'solution' }, 1);
 * const items = data.next(16); // PromptItem[] for Rollout.runGroups
 *
 * @module
 */
export { type ArithOptions, type ArithRecord, arithDataset, builtinDataset } from './data/arith.ts';
export { type DataPosition, PromptSampler, type PromptRecord } from './ppo/data.ts';
