/**
 * One completion, endpoint-agnostic: render the messages with the policy's own chat template
 * (tools included), generate token ids on the run's engine, record them in the episode's token
 * session, and parse the text into content and tool calls. Chat text never goes to an engine.
 *
 * @module
 */
import type {
  GenerateResult,
  GenerationConfig,
  InferenceEngine,
  TokenDelta,
} from '../engines/types.ts';
import type { ChatMessage, ChatTokenizer } from '../model/tokenizer.ts';
import { bridgeIds } from './bridge.ts';
import type { CompletionRequest } from './chat-request.ts';
import {
  ChoiceStream,
  type CompletionChoice,
  type StreamSink,
  toolCallId,
} from './choice-stream.ts';
import { GatewayError } from './errors.ts';
import type { Bridge, TokenSession } from './token-session.ts';
import { firstCallOnly, forcedOpening, oneCallStop } from './tool-choice.ts';
import { parseCompletion, type ToolCallParser } from './tool-parsers.ts';

/** The engine calls a gateway makes. */
export type GatewayEngine = Pick<
  InferenceEngine,
  'generate' | 'generateN' | 'getVersion' | 'maxTopLogprobs'
> &
  Partial<Pick<InferenceEngine, 'kind'>>;

/** What completions are generated with. */
export interface CompletionContext {
  engine: GatewayEngine;
  tokenizer: ChatTokenizer;
  parser: ToolCallParser;
  /** Prompt + completion cap in tokens. */
  contextLength: number;
  /** Completion cap, and the default when a request names none. */
  maxNewTokens: number;
  /**
   * Sampling that wins over the request's (training: the run's temperature and top-p, so the
   * recorded behaviour logprobs are of the distribution the trainer scores).
   */
  fixedSampling?: { temperature: number; topP: number };
  /** Bridge mode (`bridge.ts`): continue a trajectory the re-rendered prompt no longer extends. @default true */
  bridge?: boolean;
}

/** The outcome of one request. */
export interface CompletionResult {
  promptTokens: number;
  completionTokens: number;
  choices: CompletionChoice[];
  /** Time spent waiting for the engine. */
  engineMs: number;
}

/**
 * Renders, generates, records and parses one request. `signal` aborts when the client goes away
 * (a timeout, an abort): its trajectory is released at once, and the completion, which the agent
 * never saw, is kept as aborted, not trained on. `retry` (an SDK's `x-stainless-retry-count` > 0)
 * supersedes earlier attempts of the same prompt (`TokenSession.begin`). With a `sink`, each
 * choice's content and tool calls are sent to it as they are generated.
 */
export async function complete(
  ctx: CompletionContext,
  req: CompletionRequest,
  session?: TokenSession,
  signal?: AbortSignal,
  sink?: StreamSink,
  o: { retry?: boolean } = {},
): Promise<CompletionResult> {
  const opening = forcedOpening(ctx.tokenizer, ctx.parser, req.tools, req.toolChoice);
  const tools = req.toolChoice === 'none' ? undefined : req.tools;
  const rendered = renderPrompt(ctx.tokenizer, req, opening);
  const next = {
    messages: req.messages,
    tools,
    templateVars: req.templateVars,
    opening,
    enabled: ctx.bridge !== false,
  };
  const bridge: Bridge = (ids, turn) => bridgeIds(ctx.tokenizer, ids, turn, next);
  const claim = session?.begin(rendered, bridge, o);
  // The client went away: its trajectory is free for its next request (a retry) at once.
  const onAbort = (): void => session!.abort(claim!);
  if (claim) {
    if (signal?.aborted) onAbort();
    else signal?.addEventListener('abort', onAbort, { once: true });
  }
  const promptIds = claim?.promptIds ?? rendered;
  const room = ctx.contextLength - promptIds.length;
  if (room <= 0) {
    if (claim) session!.release(claim);
    throw new GatewayError(
      400,
      'context_length_exceeded',
      `This model's maximum context length is ${ctx.contextLength} tokens; the messages resulted in ${promptIds.length} tokens, leaving no room for a completion.`,
      'messages',
    );
  }
  const s = req.sampling;
  if (s.topLogprobs > 0 && s.topLogprobs > (ctx.engine.maxTopLogprobs ?? 0)) {
    if (claim) session!.release(claim);
    const kind = ctx.engine.kind ?? 'inference';
    throw new GatewayError(
      400,
      'invalid_request',
      ctx.engine.maxTopLogprobs
        ? `top_logprobs: the ${kind} engine returns at most ${ctx.engine.maxTopLogprobs} alternatives`
        : `top_logprobs: the ${kind} engine returns no alternatives to the sampled token; omit top_logprobs (logprobs alone works)`,
      'top_logprobs',
    );
  }
  const temperature = ctx.fixedSampling?.temperature ?? s.temperature ?? 1;
  // One call per turn: the engine stops at the first call's closing marker; the client's own stop
  // strings stay apart, since only theirs are cut from the answer.
  const callStop = oneCallStop(ctx.parser, req);
  const stop = callStop !== undefined ? [...s.stop, callStop] : s.stop;
  const gconfig: GenerationConfig = {
    maxNewTokens: Math.min(s.maxTokens ?? ctx.maxNewTokens, ctx.maxNewTokens, room),
    temperature,
    topP: ctx.fixedSampling?.topP ?? s.topP ?? 1,
    ...(s.topK !== undefined && !ctx.fixedSampling ? { topK: s.topK } : {}),
    ...(temperature === 0 ? { greedy: true } : {}),
    ...(stop.length ? { stop } : {}),
    ...(s.seed !== undefined ? { seed: s.seed } : {}),
    ...(s.topLogprobs > 0 ? { topLogprobs: s.topLogprobs } : {}),
  };
  const maxStopChars = Math.max(0, ...s.stop.map((x) => x.length));
  const streams = sink
    ? Array.from(
        { length: s.n },
        (_, i) =>
          new ChoiceStream(
            i,
            ctx.tokenizer,
            req.toolChoice === 'none' ? undefined : ctx.parser,
            sink,
            maxStopChars,
            opening,
            callStop !== undefined,
          ),
      )
    : undefined;
  const onTokens = streams
    ? (d: TokenDelta) => streams[d.sample]?.push(d.tokens, d.logprobs, d.top)
    : undefined;
  const t0 = performance.now();
  let outputs: GenerateResult[];
  try {
    outputs = await generate(ctx.engine, promptIds, gconfig, s.n, onTokens);
  } catch (err) {
    if (claim) session!.release(claim);
    const why = err instanceof Error ? err.message : String(err);
    throw new GatewayError(500, 'engine_error', `generation failed: ${why}`);
  }
  const engineMs = performance.now() - t0;
  // An engine may generate past the stop (one that spans a re-sent segment): cut it here, before
  // anything is recorded, so the trajectory holds exactly the one call the client sees.
  if (callStop !== undefined)
    outputs = outputs.map((o) => firstCallOnly(ctx.tokenizer, ctx.parser, opening, o));
  const choices = outputs.map((out, index) => choiceOf(ctx, req, out, index, opening));
  signal?.removeEventListener('abort', onAbort);
  if (claim) {
    const first = outputs[0]!;
    const last = first.outputTokens[first.outputTokens.length - 1];
    session!.record(claim, outputs, {
      messages: req.messages,
      tools,
      templateVars: req.templateVars,
      answer: choices[0]!,
      endsWithEos: first.stopReason === 'stop' && last === ctx.tokenizer.eosTokenId,
    });
  }
  streams?.forEach((st, i) => st.finish(choices[i]!));
  return {
    promptTokens: promptIds.length,
    completionTokens: outputs.reduce((n, o) => n + o.outputTokens.length, 0),
    choices,
    engineMs,
  };
}

/**
 * The prompt's token ids: the chat template with `tools` (none for `tool_choice: "none"`), then
 * the forced `opening` of a call (`tool-choice.ts`), tokenized together by the policy's tokenizer.
 */
export function renderPrompt(
  tokenizer: ChatTokenizer,
  req: Pick<CompletionRequest, 'messages' | 'tools' | 'toolChoice' | 'templateVars'>,
  opening = '',
): number[] {
  let text: string;
  const tools = req.toolChoice === 'none' ? undefined : req.tools;
  try {
    text = tokenizer.applyChatTemplate(req.messages as unknown as ChatMessage[], {
      addGenerationPrompt: true,
      ...(tools?.length ? { tools } : {}),
      ...(req.templateVars ? { extra: req.templateVars } : {}),
    });
  } catch (err) {
    // A template's raise_exception (roles must alternate, ...) is the request's fault.
    const why = err instanceof Error ? err.message : String(err);
    throw new GatewayError(
      400,
      'invalid_request',
      `the chat template rejected the messages: ${why}`,
      'messages',
    );
  }
  return tokenizer.encode(text + opening);
}

/**
 * `n` samples of `promptIds`. A sample cut off by a weight update (`abort`, partial rollouts) is
 * continued on the new weights from where it stopped, so every token keeps the version that made it.
 */
async function generate(
  engine: GatewayEngine,
  promptIds: number[],
  gconfig: GenerationConfig,
  n: number,
  onTokens: ((d: TokenDelta) => void) | undefined,
): Promise<GenerateResult[]> {
  const tell = onTokens ? { onTokens } : {};
  const first =
    n === 1
      ? [await engine.generate({ inputIds: promptIds, gconfig, ...tell })]
      : await engine.generateN({ inputIds: promptIds, gconfig: { ...gconfig, n }, ...tell });
  return Promise.all(
    first.map(async (out, sample) => {
      const budget = gconfig.maxNewTokens ?? 256;
      while (out.stopReason === 'abort' && out.outputTokens.length < budget) {
        const more = await engine.generate({
          inputIds: [...promptIds, ...out.outputTokens],
          gconfig: { ...gconfig, maxNewTokens: budget - out.outputTokens.length },
          ...(onTokens ? { onTokens: (d: TokenDelta) => onTokens({ ...d, sample }) } : {}),
        });
        out = {
          outputTokens: [...out.outputTokens, ...more.outputTokens],
          outputLogprobs: [...out.outputLogprobs, ...more.outputLogprobs],
          outputVersions: [...out.outputVersions, ...more.outputVersions],
          ...(out.outputTopLogprobs
            ? { outputTopLogprobs: [...out.outputTopLogprobs, ...(more.outputTopLogprobs ?? [])] }
            : {}),
          stopReason: more.stopReason,
        };
      }
      return out.stopReason === 'abort' ? { ...out, stopReason: 'length' as const } : out;
    }),
  );
}

function choiceOf(
  ctx: CompletionContext,
  req: CompletionRequest,
  out: GenerateResult,
  index: number,
  opening: string,
): CompletionChoice {
  const ids = out.outputTokens;
  // The closing special token (eos) is not part of the message; other text is kept verbatim so a
  // parser sees tool-call markers even when the tokenizer marks them special.
  const last = ids[ids.length - 1];
  const body =
    last !== undefined && ctx.tokenizer.decode([last], { skipSpecialTokens: true }) === ''
      ? ids.slice(0, -1)
      : ids;
  // A forced call's opening came with the prompt but belongs to the message the parser reads.
  let text = opening + ctx.tokenizer.decode(body, { skipSpecialTokens: false });
  const found = req.sampling.stop.find((st) => text.endsWith(st));
  const stop = out.stopReason === 'stop' && found !== undefined ? found : null;
  if (stop !== null) text = text.slice(0, -stop.length);
  const parsed =
    req.toolChoice !== 'none'
      ? parseCompletion(ctx.parser, text)
      : { content: text === '' ? null : text, toolCalls: [] };
  const toolCalls = parsed.toolCalls.map((c) => ({ id: toolCallId(), ...c }));
  const finishReason =
    toolCalls.length > 0 ? 'tool_calls' : out.stopReason === 'length' ? 'length' : 'stop';
  return {
    index,
    ids,
    logprobs: out.outputLogprobs,
    versions: out.outputVersions,
    top: out.outputTopLogprobs,
    content: parsed.content,
    toolCalls,
    finishReason,
    stopSequence: stop,
  };
}
