/**
 * The TF.js causal LM (Llama/Qwen2 equations), its tokenizers, checkpoints and training blocks.
 *
 * @example
 * import { loadModel, forwardLogprobs } from './actors/model/index.ts';
 * const { model, tokenizer } = await loadModel('actors/model/pretrained/rtjob-tiny-math');
 * const { logprobs } = forwardLogprobs(model, [tokenizer!.encode('<|user|>What is 2+3?')]);
 *
 * @module
 */
import { fileURLToPath } from 'node:url';

export type { BackendName } from './backend.ts';
export type { LlamaConfig } from './config.ts';
export type { ForwardOptions, ForwardOutput, LayerKV } from './llama.ts';
export type { LoadedModel, SaveModelOptions } from './checkpoint.ts';
export type { ChatMessage, ChatTemplateOptions } from './tokenizer.ts';
export type { LrScheduleOptions, PaddedBatch, SequenceLogprobs, StepStats, TokenStats, TrainerOptions } from './training.ts';
export type { SamplingParams } from './sampling.ts';

export { initBackend, tf } from './backend.ts';
export { parameterShapes, resolveConfig } from './config.ts';
export { CausalLM, valueHeadName } from './llama.ts';
export { loadModel, readConfig, readWeights, saveModel } from './checkpoint.ts';
export { parseSafetensors, SafetensorsError, serializeSafetensors } from './safetensors.ts';
export { ChatTokenizer, loadTokenizer } from './tokenizer.ts';
export { builtinTokenizerFiles, builtinChatTemplate, tinyMathConfig } from './builtin.ts';
export { BatchKVCache, decodeStep, prefill, recomputeLastLogits } from './kv-cache.ts';
export { sampleToken, seededRandom } from './sampling.ts';
export { forwardLogprobs, learningRate, maskedNllLoss, ModelTrainer, padBatch, tokenStats } from './training.ts';
/** The shipped warm-start checkpoint (HF format). */
export const tinyMathModelDir = fileURLToPath(new URL('./pretrained/rtjob-tiny-math/', import.meta.url));
