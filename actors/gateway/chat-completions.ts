/**
 * `POST /v1/chat/completions`: the documented response shapes, whole or streamed as
 * `chat.completion.chunk` events (role, content, tool-call deltas, finish reason, optional usage,
 * `[DONE]`). The engines return whole completions, so a stream starts once generation is done.
 *
 * @module
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { ChatTokenizer } from '../model/tokenizer.ts';
import type { ChatRequest } from './chat-request.ts';
import type { CompletionChoice, CompletionResult } from './completion.ts';
import { endSse, sendSse, startSse } from './sse.ts';

/** OpenAI's `usage` of a chat completion. */
export function chatUsage(r: CompletionResult) {
  return {
    prompt_tokens: r.promptTokens,
    completion_tokens: r.completionTokens,
    total_tokens: r.promptTokens + r.completionTokens,
  };
}

function toolCallsOf(c: CompletionChoice) {
  return c.toolCalls.map((t) => ({
    id: t.id,
    type: 'function' as const,
    function: { name: t.name, arguments: t.arguments },
  }));
}

function logprobsOf(tok: ChatTokenizer, c: CompletionChoice) {
  return {
    content: c.ids.map((id, i) => {
      const token = tok.decode([id], { skipSpecialTokens: false });
      // Only the sampled token is known; engines do not return alternatives.
      return {
        token,
        logprob: c.logprobs[i] ?? 0,
        bytes: [...Buffer.from(token)],
        top_logprobs: [],
      };
    }),
  };
}

/** The whole `chat.completion` object. */
export function chatCompletionBody(
  req: ChatRequest,
  r: CompletionResult,
  tok: ChatTokenizer,
  model: string,
): Record<string, unknown> {
  return {
    id: `chatcmpl-${randomBytes(12).toString('hex')}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    system_fingerprint: null,
    choices: r.choices.map((c) => ({
      index: c.index,
      message: {
        role: 'assistant',
        content: c.content,
        refusal: null,
        ...(c.toolCalls.length ? { tool_calls: toolCallsOf(c) } : {}),
      },
      logprobs: req.sampling.logprobs ? logprobsOf(tok, c) : null,
      finish_reason: c.finishReason,
    })),
    usage: chatUsage(r),
  };
}

/** Streams `r` as chunks, then `[DONE]`. */
export function streamChatCompletion(
  res: ServerResponse,
  req: ChatRequest,
  r: CompletionResult,
  tok: ChatTokenizer,
  model: string,
): void {
  const base = {
    id: `chatcmpl-${randomBytes(12).toString('hex')}`,
    object: 'chat.completion.chunk',
    created: Math.floor(Date.now() / 1000),
    model,
    system_fingerprint: null,
  };
  const usage = req.includeUsage ? { usage: null } : {};
  const chunk = (index: number, delta: unknown, extra: Record<string, unknown> = {}) =>
    sendSse(res, {
      ...base,
      choices: [{ index, delta, logprobs: null, finish_reason: null, ...extra }],
      ...usage,
    });
  startSse(res);
  for (const c of r.choices) {
    chunk(c.index, { role: 'assistant', content: '', refusal: null });
    if (c.content !== null) {
      chunk(
        c.index,
        { content: c.content },
        req.sampling.logprobs ? { logprobs: logprobsOf(tok, c) } : {},
      );
    }
    c.toolCalls.forEach((t, k) => {
      chunk(c.index, {
        tool_calls: [
          { index: k, id: t.id, type: 'function', function: { name: t.name, arguments: '' } },
        ],
      });
      chunk(c.index, { tool_calls: [{ index: k, function: { arguments: t.arguments } }] });
    });
    chunk(c.index, {}, { finish_reason: c.finishReason });
  }
  if (req.includeUsage) sendSse(res, { ...base, choices: [], usage: chatUsage(r) });
  endSse(res);
}
