/**
 * The TF.js causal LM (Llama, Mistral, Qwen2 and Qwen3 equations), its tokenizers, checkpoints and training blocks.
 *
 * @example
 * import { loadModel, forwardLogprobs } from './model/index.ts';
 * const { model, tokenizer } = await loadModel('model/pretrained/rtjob-tiny-math');
 * const { logprobs } = await forwardLogprobs(model, [tokenizer!.encode('<|user|>What is 2+3?')]);
 *
 * @module
 */
import { fileURLToPath } from 'node:url';

export type { BackendName } from './backend.ts';
export type { LlamaConfig, ModelFamily, RopeScaling, SaveDtype } from './config.ts';
export type { ForwardOptions, ForwardOutput, LayerKV, TensorSource } from './llama.ts';
export type { PackedBatch } from './batches.ts';
export type { TrainingMemory, TrainingMemoryOptions } from './memory.ts';
export type { CheckpointWeights, LoadedModel, SaveModelOptions } from './checkpoint.ts';
export type { ChatMessage, ChatTemplateOptions, ChatToolCall } from './tokenizer.ts';
export type { LrScheduleOptions, LrScheduler } from './lr-schedule.ts';
export type { SequenceLogprobs } from './sequence-logprobs.ts';
export type { PaddedBatch, StepStats, TokenStats, TrainerOptions } from './training.ts';
export type { SamplingParams } from './sampling.ts';

export { initBackend, tf } from './backend.ts';
export {
  ConfigError,
  configJson,
  modelFamilies,
  parameterShapes,
  resolveConfig,
  ropeInvFreq,
} from './config.ts';
export { CausalLM, checkSequenceLength, checkTensors, valueHeadName } from './llama.ts';
export {
  defaultMaxShardBytes,
  loadModel,
  readCheckpointWeights,
  readConfig,
  readWeights,
  saveModel,
} from './checkpoint.ts';
export {
  parseSafetensors,
  readSafetensorsFile,
  SafetensorsError,
  serializeSafetensors,
  toBf16,
} from './safetensors.ts';
export { ChatTokenizer, loadTokenizer } from './tokenizer.ts';
export { builtinTokenizerFiles, builtinChatTemplate, tinyMathConfig } from './builtin.ts';
export { BatchKVCache, decodeStep, prefill, recomputeLastLogits } from './kv-cache.ts';
export { sampleToken, seededRandom } from './sampling.ts';
export { learningRate, LR_SCHEDULERS } from './lr-schedule.ts';
export { maskedNllLoss, ModelTrainer, padBatch, tokenStats } from './training.ts';
export { forwardLogprobs } from './sequence-logprobs.ts';
export { packBatch } from './batches.ts';
export { parameterCount, trainingMemory } from './memory.ts';
/** The shipped warm-start checkpoint (HF format). */
export const tinyMathModelDir = fileURLToPath(
  new URL('./pretrained/rtjob-tiny-math/', import.meta.url),
);
