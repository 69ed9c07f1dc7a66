/**
 * The model a `train_sft` run trains: loaded (the built-in tiny model, or `--pretrain` with its
 * tokenizer, with a LoRA adapter attached when asked) and saved at the end (the HF directory or
 * the PEFT adapter, and `training_summary.json`).
 *
 * @module
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tf } from '../model/backend.ts';
import { builtinTokenizerFiles, tinyMathConfig } from '../model/builtin.ts';
import { loadModel, saveModel } from '../model/checkpoint.ts';
import { resolveConfig } from '../model/config.ts';
import { CausalLM } from '../model/llama.ts';
import { writeLoraAdapter } from '../model/lora-adapter.ts';
import { attachLoraSpec } from '../model/lora-spec.ts';
import { ChatTokenizer } from '../model/tokenizer.ts';
import { FlagError } from './driver-flags.ts';
import type { SaveDtype } from '../model/config.ts';
import type { LoraSpec } from '../model/lora-spec.ts';

/** Writes the trained model (or its LoRA adapter) and `training_summary.json` to `--save-path`. */
export function saveSft(
  o: { savePath: string; saveDtype?: SaveDtype | undefined; useWandb?: string | undefined },
  model: CausalLM,
  saveFrom:
    | { tokenizerFiles: ReturnType<typeof builtinTokenizerFiles> }
    | { tokenizerFrom: string | undefined },
  result: object,
): void {
  if (model.lora) writeLoraAdapter(o.savePath, model.lora.exportAdapter());
  else
    saveModel(o.savePath, model, {
      ...saveFrom,
      generationConfig: {
        eos_token_id: model.config.eos_token_id,
        pad_token_id: model.config.pad_token_id,
        do_sample: true,
        temperature: 1.0,
        max_new_tokens: 48,
      },
      dtype: o.saveDtype,
    });
  writeFileSync(
    join(o.savePath, 'training_summary.json'),
    JSON.stringify(
      {
        ...result,
        options: {
          ...o,
          savePath: undefined,
          ckptPath: undefined,
          signal: undefined,
          onEval: undefined,
          metric: undefined,
          env: undefined,
          useWandb: o.useWandb && o.useWandb !== 'true' ? '(hidden)' : o.useWandb,
        },
      },
      null,
      2,
    ) + '\n',
  );
}

/** The model and tokenizer to fine-tune: the built-in tiny one, or `--pretrain` (with LoRA). */
export async function loadSftModel(
  o: {
    initBuiltin?: boolean | undefined;
    pretrain?: string | undefined;
    lora?: LoraSpec | undefined;
    gradientCheckpointing?: boolean | undefined;
  },
  seed: number,
  log: (s: string) => void,
): Promise<{
  model: CausalLM;
  tok: ChatTokenizer;
  tokFiles: ReturnType<typeof builtinTokenizerFiles> | undefined;
}> {
  let model: CausalLM;
  let tok: ChatTokenizer;
  let tokFiles: ReturnType<typeof builtinTokenizerFiles> | undefined;
  if (o.initBuiltin) {
    tokFiles = builtinTokenizerFiles();
    tok = new ChatTokenizer(tokFiles.tokenizerJson, tokFiles.tokenizerConfig);
    model = CausalLM.init(resolveConfig(tinyMathConfig()), { seed });
  } else {
    if (!o.pretrain)
      throw new FlagError(
        '--pretrain',
        'train_sft: --pretrain <dir> or --init-builtin is required',
      );
    const loaded = await loadModel(o.pretrain);
    if (!loaded.tokenizer)
      throw new FlagError('--pretrain', `train_sft: ${o.pretrain} has no tokenizer.json`);
    model = loaded.model;
    tok = loaded.tokenizer;
  }
  if (o.lora) {
    if (o.initBuiltin)
      throw new FlagError(
        '--lora-rank',
        'train_sft: LoRA needs a --pretrain base, not --init-builtin',
      );
    const l = attachLoraSpec(model, o.lora);
    log(
      `train_sft: LoRA rank ${l.config.r} alpha ${l.config.alpha} on ${l.config.targetModules.join(',')}: ${l.numParameters} trainable of ${model.numParameters}`,
    );
  }
  model.gradientCheckpointing = o.gradientCheckpointing ?? false;
  log(`train_sft: ${model.numParameters} parameters, backend ${tf.getBackend()}`);
  return { model, tok, tokFiles };
}
