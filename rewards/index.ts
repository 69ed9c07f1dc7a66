/**
 * Math answer checking for agents: `import { gsm8kReward, extractAnswer, mathEqual } from 'rtjob/rewards'`.
 *
 * @module
 */
export type { ExtractAnswerOptions } from './extract-answer.ts';
export type { Gsm8kMode, Gsm8kRewardOptions } from './gsm8k.ts';

export { extractAnswer } from './extract-answer.ts';
export { gsm8kReward, verlExtract, verlGoldAnswer } from './gsm8k.ts';
export { evaluateNumeric } from './latex-eval.ts';
export { isClose, mathEqual, parseDigits } from './math-equal.ts';
export { stripString, UNIT_TEXTS } from './strip-string.ts';
export { convertWordNumber } from './word-numbers.ts';
export { RemoteRewardClient, remoteRewardDefaults } from './remote.ts';
export type { RemoteReward, RemoteRewardOptions, RewardQuery } from './remote.ts';
export { RemoteRewardError } from './errors.ts';
