import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { compactToolTemplate, hermesCall, scriptedEngine, startGateway, tokenizerWith } from './helpers.ts';
const { Agent } = await import('/tmp/mastra-pkgs/node_modules/@mastra/core/dist/agent/index.js' as string);
const { createTool } = await import('/tmp/mastra-pkgs/node_modules/@mastra/core/dist/tools/index.js' as string);
const tok = tokenizerWith(compactToolTemplate);
const engine = scriptedEngine(tok, (prompt) => {
  const result = /<tool_response>([^<]*)<\/tool_response><\|assistant\|>$/.exec(prompt);
  if (result) return `The answer is ${result[1]}.`;
  return hermesCall('add', { a: 2, b: 3 });
});
const gw = await startGateway({ engine, tokenizer: tok });
const s = gw.openSession();
const add = createTool({ id: 'add', description: 'adds two numbers', inputSchema: z.object({ a: z.number(), b: z.number() }), execute: async (input: any) => { console.log('tool input', JSON.stringify(input)); const x = input.context ?? input; return { sum: x.a + x.b }; } });
const agent = new Agent({ name: 'calc', instructions: 'Use the tool.', model: createOpenAI({ baseURL: gw.baseURL, apiKey: s.apiKey }).chat('tiny'), tools: { add } });
const r = await agent.generate('What is 2+3?', { maxSteps: 3 });
console.log('TEXT', r.text, s.session.stats);
await gw.close();
