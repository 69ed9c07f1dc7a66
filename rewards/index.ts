/**
 * Reward helpers for agents: math answer checking (`import { gsm8kReward, extractAnswer, mathEqual } from 'rtjob/rewards'`),
 * remote reward models and LLM judges (`judge`).
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
export { JudgeError, RemoteRewardError } from './errors.ts';
export { Judge, judge, judgeDefaults, parseGrade } from './judge.ts';
export type { JudgeInput, JudgeOptions, JudgeVerdict } from './judge.ts';
