/**
 * The tool-using math agent of `tool-agent.ts`, written with Anthropic's SDK instead: the Messages
 * API with a `calculator` tool, a loop that runs each `tool_use` block and answers with
 * `tool_result` blocks. It knows nothing of training: `train_ppo` points `baseURL` at its gateway,
 * which speaks the Messages API and records the exact tokens of every turn.
 *
 *   npx rtjob submit -- train_ppo --agent-func ./examples/tool-agent-anthropic.ts --pretrain model/pretrained/rtjob-tiny-tool
 */
import Anthropic from '@anthropic-ai/sdk';
import type {
  MessageParam,
  Tool,
  ToolResultBlockParam,
} from '@anthropic-ai/sdk/resources/messages';
import { gsm8kReward } from 'rtjob/rewards';
import { runCalculator } from './tool-agent.ts';

/** The tool as the model is offered it. */
export const calculator: Tool = {
  name: 'calculator',
  description: 'Evaluates an arithmetic expression with + - * / and parentheses.',
  input_schema: {
    type: 'object',
    properties: { expression: { type: 'string', description: 'e.g. 47+38' } },
    required: ['expression'],
  },
};

/** Model calls per episode: a tool call, then the answer (one more call allowed). */
const maxTurns = 3;

/** An answer cut off by the token limit: worse than a wrong one, so answers keep ending. */
const truncatedReward = -1;

/**
 * One episode: ask, run every tool call, ask again, until the model answers without calling a
 * tool; the answer is scored by the math reward against the gold `#### N`.
 */
export async function agent(
  sample: { prompt: string; label?: string },
  env: { baseURL: string; apiKey: string; model: string; signal?: AbortSignal },
) {
  const client = new Anthropic({ baseURL: env.baseURL, apiKey: env.apiKey });
  const messages: MessageParam[] = [{ role: 'user', content: sample.prompt }];
  let toolCalls = 0;
  let badCalls = 0;
  for (let turn = 1; turn <= maxTurns; turn++) {
    const res = await client.messages.create(
      // The gateway caps max_tokens at the run's --generate-max-len.
      { model: env.model, max_tokens: 1024, messages, tools: [calculator] },
      { signal: env.signal },
    );
    const extraInfo = {
      used_tool: toolCalls > 0 ? 1 : 0,
      tool_calls: toolCalls,
      bad_calls: badCalls,
      turns: turn,
    };
    if (res.stop_reason === 'max_tokens') return { reward: truncatedReward, extraInfo };
    messages.push({ role: 'assistant', content: res.content });
    const calls = res.content.filter((b) => b.type === 'tool_use');
    if (calls.length === 0) {
      const text = res.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
      return { reward: gsm8kReward(text, sample.label ?? ''), extraInfo };
    }
    const results: ToolResultBlockParam[] = calls.map((call) => {
      toolCalls++;
      const content = runCalculator(call.name, JSON.stringify(call.input));
      if (content.startsWith('error')) badCalls++;
      return { type: 'tool_result', tool_use_id: call.id, content };
    });
    messages.push({ role: 'user', content: results });
  }
  return {
    reward: 0,
    extraInfo: { used_tool: 1, tool_calls: toolCalls, bad_calls: badCalls, turns: maxTurns },
  };
}
