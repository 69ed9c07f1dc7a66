/**
 * `rtjob serve --pretrain DIR`: an OpenAI-compatible endpoint for a checkpoint (the shipped one,
 * a policy `train_ppo` saved, or a Hugging Face Hub id), so any OpenAI client can chat with or evaluate it. Loopback and
 * a key by default.
 *
 * @module
 */
import { fileURLToPath } from 'node:url';
import {
  defaultEngineKind,
  engineSpec,
  ggufEngineNames,
  offeredEngineKinds,
  offeredEngineNames,
  type OfferedEngineKind,
} from '../../engines/registry.ts';
import { serveModel } from '../../gateway/serve.ts';
import { serveRewardModel } from '../../roles/reward-server.ts';
import { badEngineUrl, engineUrls, resolveCheckpointFlags } from '../../train/index.ts';
import { readEnv } from '../../ops/index.ts';
import { onLauncherExit } from '../launcher-exit.ts';
import { CliError } from '../client.ts';

/** Flags of `rtjob serve`, as commander hands them over. */
export interface ServeFlags {
  pretrain?: string;
  rewardModel?: string;
  host: string;
  port: string;
  apiKey?: string;
  model?: string;
  toolCallParser: string;
  maxTokens?: string;
  engine: string;
  engineUrl?: string;
  rolloutDtype?: string;
  llamacppGpu?: string;
  lora?: string;
}

/** The flags that name a checkpoint: a Hub id is fetched to its snapshot first. */
const servedCheckpoints = { pretrain: '--pretrain', lora: '--lora', rewardModel: '--reward-model' };

const shipped = fileURLToPath(new URL('../../model/pretrained/rtjob-tiny-math', import.meta.url));

/** Serves until SIGINT or SIGTERM. */
export async function serveCommand(given: ServeFlags): Promise<void> {
  const f = await resolveCheckpointFlags(given, servedCheckpoints).catch((err: Error) => {
    throw new CliError(err.message, 2);
  });
  const port = Number(f.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new CliError(`--port: expected 0-65535, got '${f.port}'`, 2);
  if (f.rewardModel !== undefined) return serveRewardCommand(f, port);
  const maxTokens = f.maxTokens === undefined ? undefined : Number(f.maxTokens);
  if (maxTokens !== undefined && (!Number.isInteger(maxTokens) || maxTokens < 1)) {
    throw new CliError(`--max-tokens: expected an integer >= 1, got '${f.maxTokens}'`, 2);
  }
  if (!(offeredEngineKinds as string[]).includes(f.engine))
    throw new CliError(`--engine: expected ${offeredEngineNames()}, got '${f.engine}'`, 2);
  const engine = f.engine as OfferedEngineKind;
  const gguf = engineSpec(engine).gguf;
  const rolloutDtype = f.rolloutDtype ?? 'f32';
  if (!['f32', 'f16', 'bf16', 'q8_0'].includes(rolloutDtype))
    throw new CliError(
      `--rollout-dtype: expected f32, f16, bf16 or q8_0, got '${rolloutDtype}'`,
      2,
    );
  const gpu = f.llamacppGpu ?? 'off';
  if (!['off', 'auto', 'cuda', 'vulkan'].includes(gpu))
    throw new CliError(`--llamacpp-gpu: expected off, auto, cuda or vulkan, got '${gpu}'`, 2);
  if (gpu !== 'off' && !gguf)
    throw new CliError(`--llamacpp-gpu applies to ${ggufEngineNames()} only`, 2);
  const urls = engineUrls(f);
  const bad = badEngineUrl(urls);
  if (bad !== undefined) throw new CliError(`--engine-url: '${bad}' is not an http(s) URL`, 2);
  let served;
  try {
    served = await serveModel({
      pretrain: f.pretrain ?? shipped,
      host: f.host,
      port,
      toolCallParser: f.toolCallParser,
      engine,
      ...(gguf
        ? {
            rolloutDtype: rolloutDtype as 'f32' | 'f16' | 'bf16' | 'q8_0',
            llamacppGpu: gpu === 'off' ? false : (gpu as 'auto' | 'cuda' | 'vulkan'),
          }
        : {}),
      ...(urls.length ? { engineUrls: urls } : {}),
      ...((f.apiKey ?? readEnv('RTJOB_SERVE_API_KEY'))
        ? { apiKey: f.apiKey ?? readEnv('RTJOB_SERVE_API_KEY') }
        : {}),
      ...(f.model ? { model: f.model } : {}),
      ...(f.lora ? { lora: f.lora } : {}),
      ...(maxTokens !== undefined ? { maxTokens } : {}),
    });
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  const { gateway, apiKey } = served;
  process.stdout.write(
    `serving ${gateway.model} at ${gateway.baseURL}\n` +
      `api key: ${apiKey}\n` +
      `  new OpenAI({ baseURL: '${gateway.baseURL}', apiKey: '<key>' }).chat.completions.create({ model: '${gateway.model}', messages })\n` +
      // Anthropic's SDK appends /v1/messages to its baseURL itself.
      `  new Anthropic({ baseURL: '${gateway.baseURL.replace(/\/v1$/, '')}', apiKey: '<key>' }).messages.create({ model: '${gateway.model}', max_tokens: 256, messages })\n`,
  );
  await untilStopped();
  await served.close();
}

/** Resolves on SIGINT, SIGTERM or the launcher's exit. */
async function untilStopped(): Promise<void> {
  let cancel = () => {};
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
    cancel = onLauncherExit(resolve);
  });
  cancel();
}

/** `rtjob serve --reward-model DIR`: `roles/reward-server.ts` until SIGINT or SIGTERM. */
async function serveRewardCommand(f: ServeFlags, port: number): Promise<void> {
  const generation = ['pretrain', 'lora', 'engineUrl', 'model', 'maxTokens'] as const;
  const clash = generation.find((k) => f[k] !== undefined);
  if (clash !== undefined || f.engine !== defaultEngineKind)
    throw new CliError(
      `--reward-model serves a reward model, not a policy: drop --${kebab(clash ?? 'engine')}`,
      2,
    );
  const apiKey = f.apiKey ?? readEnv('RTJOB_SERVE_API_KEY');
  let served;
  try {
    served = await serveRewardModel({
      rewardModel: f.rewardModel!,
      host: f.host,
      port,
      ...(apiKey ? { apiKey } : {}),
    });
  } catch (err) {
    throw new CliError((err as Error).message, 2);
  }
  process.stdout.write(
    `serving reward model ${f.rewardModel} at ${served.url}\n` +
      `api key: ${served.apiKey}\n` +
      `  RTJOB_REMOTE_RM_API_KEY=<key> rtjob submit -- train_ppo --remote-rm-url ${served.url}\n` +
      `  curl -H 'authorization: Bearer <key>' -d '{"query": ["..."]}' ${served.url}\n`,
  );
  await untilStopped();
  await served.close();
}

function kebab(k: string): string {
  return k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}
