/**
 * The `rtjob` command: start and stop a cluster, submit and follow jobs, read their metrics.
 * Each command lives in `commands/`; this file only declares flags and maps errors to exit codes
 * (1 a job failed or a request was refused, 2 bad usage, 3 no cluster reachable).
 *
 * @module
 */
import { diagnoseCommand } from './commands/diagnose.ts';
import { ledgerCommand } from './commands/ledger.ts';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import { Command, Option } from 'commander';

import { packageRoot, readEnv } from '../ops/index.ts';
import { defaultEngineKind, offeredEngineNames } from '../engines/registry.ts';
import { CliError } from './client.ts';
import { startCommand, statusCommand, stopCommand } from './commands/cluster.ts';
import { dashboardCommand } from './commands/dashboard.ts';
import {
  deleteJobCommand,
  listCommand,
  logsCommand,
  metricsCommand,
  samplesCommand,
  stopJobCommand,
  submitCommand,
} from './commands/jobs.ts';
import { serveCommand } from './commands/serve.ts';
import { mergeLoraCommand, type MergeLoraFlags } from './commands/merge-lora.ts';
import { buildCommand } from './commands/build.ts';
import { evalCommand } from './commands/eval.ts';

// `rtjob start --head | head -1`: a reader that goes away is not an error of ours. Later output
// is dropped and the command finishes its work (a private cluster is still stopped cleanly).
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (e: NodeJS.ErrnoException) => {
    if (e.code !== 'EPIPE') throw e;
    stream.write = (() => true) as typeof stream.write;
  });
}
const { version } = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as {
  version: string;
};

const program = new Command('rtjob')
  .description('A Ray-style actor runtime and RL trainer: clusters, jobs, logs and metrics')
  .version(version, '-V, --version', 'print the version')
  .option(
    '--verbose',
    "print stack traces with errors, also those of a submitted job's driver (also RTJOB_DEBUG=1)",
  )
  // A job inherits RTJOB_DEBUG, so its driver prints stacks too.
  .hook('preAction', (cmd) => {
    if (cmd.opts().verbose) process.env.RTJOB_DEBUG = '1';
  })
  .showHelpAfterError('(rtjob --help lists the commands; rtjob COMMAND --help its options)')
  .addHelpText(
    'after',
    `
Examples:
  rtjob start --head                              start a cluster here (dashboard on :8265)
  rtjob submit -- train_ppo --agent-func ./agent.ts
  ASYNC_NUM_TASKS=64 rtjob submit --working-dir . -- train_ppo --async-train
  rtjob list; rtjob logs -f JOB; rtjob metrics JOB --csv; rtjob stop-job JOB
  rtjob stop                                      stop what \`rtjob start\` started here`,
  );

const addressOptions = (c: Command) =>
  c
    .option(
      '--address <url>',
      "the head's HTTP address (default: RTJOB_HTTP_ADDRESS, else ~/.rtjob/cluster.json)",
    )
    .option('--token <token>', 'cluster token (default: RTJOB_TOKEN, else ~/.rtjob/cluster.json)')
    .option('--token-file <path>', 'read the cluster token from this file (mode 0600)');

program
  .command('start')
  .description('start a head (--head) or join a cluster (--address --token), in the background')
  .option('--head', 'start a head node and a node agent on this machine')
  .option('--address <host:port>', 'join the cluster whose head listens here')
  .option('--token <token>', 'cluster token (to join; or to fix the head token)')
  .option(
    '--token-file <path>',
    'read the token from this file (mode 0600), so it is not on a command line',
  )
  .option('--port <port>', 'runtime port of the head', '6380')
  .option('--dashboard-port <port>', 'HTTP API and dashboard port', '8265')
  .option('--host <host>', 'interface to bind; other machines need a non-loopback one', '127.0.0.1')
  .option('--num-cpus <n>', 'CPUs this node offers (default: all)')
  .option('--num-gpus <n>', 'GPUs this node offers (default: detected)')
  .option('--resources <json>', 'custom resources, e.g. \'{"TPU": 4}\'')
  .option('--warm-workers <n>', 'idle workers kept booted so new actors start at once (default 1)')
  .option('--block', 'stay in the foreground while the started processes run (batch job steps)')
  .option(
    '--memory-usage-threshold <share>',
    "memory in use (this node's cgroup, else the machine) past which the newest worker is killed with OutOfMemoryError; 1 turns it off (default 0.95)",
  )
  .option(
    '--object-store-memory <size>',
    "memory for large objects in each of this node's workers before they spill to disk, e.g. 2GiB (default 30% of RAM)",
  )
  .option(
    '--session-dir <dir>',
    'state, logs and packages (default: ~/.rtjob/session); reuse it to recover',
  )
  .addHelpText(
    'after',
    '\nExample:\n  rtjob start --head --num-gpus 8\n  rtjob start --address 10.0.0.1:6380 --token $T',
  )
  .action((o) => startCommand(o));

program
  .command('stop')
  .description('stop the cluster processes started here (jobs, workers, node agent, head)')
  .action(() => stopCommand());

addressOptions(
  program
    .command('status')
    .description('nodes, resources used/total, actors by state, jobs')
    .option('--json', 'machine-readable output'),
).action((o) => statusCommand(o));

program
  .command('dashboard')
  .description(
    "print the running dashboard's login link; with no cluster running, serve the run history (every finished session) read-only",
  )
  .option('--session <dir>', 'serve this finished session dir read-only')
  .option('--port <port>', 'port for a finished session; 0 picks a free one', '8265')
  .option('--host <host>', 'interface to bind for a finished session', '127.0.0.1')
  .action((o) => dashboardCommand(o));

addressOptions(
  program
    .command('submit')
    .description('run a job on the cluster (starts a local one for it when none runs)')
    .argument('<entrypoint...>', 'train_ppo, train_sft, a script, or any command (after --)')
    .option('--working-dir <dir>', 'upload this directory and run the entrypoint inside it')
    .option(
      '--env <K=V>',
      'environment for the driver and every worker (repeatable)',
      (v: string, all: string[]) => [...all, v],
      [] as string[],
    )
    .option('--no-inherit-env', "do not forward the caller's own environment variables")
    .option('--job-id <id>', 'job id (default: generated)')
    .option('--no-wait', 'print the job id and return instead of streaming logs')
    .option('--entrypoint-num-cpus <n>', 'CPUs reserved for the driver itself')
    .option('--entrypoint-num-gpus <n>', 'GPUs reserved for the driver itself')
    .option('--metadata <json>', 'string labels shown with the job')
    .option(
      '--auto-resume',
      'start from the latest checkpoint when there is one (a requeued or restarted job goes on where its save on notice left it)',
    )
    .addHelpText(
      'after',
      "\nExamples:\n  rtjob submit -- train_ppo --agent-func ./agent.ts\n  rtjob submit --working-dir . --env ASYNC_NUM_TASKS=64 --no-wait -- node train.ts\n\n--working-dir brings the dir's npm dependencies: its own node_modules on this machine, npm install of its package.json elsewhere.",
    )
    .showHelpAfterError(
      "(the entrypoint's own flags go after --: rtjob submit -- train_ppo --agent-func ./agent.ts)",
    ),
).action(async (entrypoint: string[], o) => {
  process.exitCode = await submitCommand(entrypoint, o);
});

/** `--session DIR`: read a finished session from disk (the latest one is read when no cluster runs). */
const sessionOption = (c: Command) =>
  addressOptions(c).option(
    '--session <dir>',
    'read this finished session dir from disk (default, when no cluster runs: every session under ~/.rtjob)',
  );

sessionOption(
  program
    .command('list')
    .description('jobs, newest first')
    .option('--json', 'machine-readable output'),
).action((o) => listCommand(o));

sessionOption(
  program
    .command('logs')
    .description("a job's driver log (or an actor's with --actor)")
    .argument('<job>', 'job id')
    .option('-f, --follow', 'keep streaming until the job ends')
    .option(
      '--actor <name>',
      "this actor's worker log instead: its name as the dashboard shows it (trainer, rollout-0) or its id",
    ),
).action((job: string, o) => logsCommand(job, o));

addressOptions(
  program
    .command('stop-job')
    .description('stop a job: SIGTERM its driver, SIGKILL after a grace period')
    .argument('<job>', 'job id'),
).action((job: string, o) => stopJobCommand(job, o));

addressOptions(
  program
    .command('delete-job')
    .description('forget a finished job (its log file is kept)')
    .argument('<job>', 'job id'),
).action((job: string, o) => deleteJobCommand(job, o));

sessionOption(
  program
    .command('metrics')
    .description('training metrics a job logged (metrics.log)')
    .argument('<job>', 'job id')
    .option('--csv', 'every step as CSV')
    .option('--json', 'columns and rows as JSON')
    .option(
      '--plot <file>',
      'draw reward and held-out accuracy per step (and the --keys metrics) to an .svg, or a .png with ImageMagick',
    )
    .addOption(new Option('--last <n>', 'steps to show in the table').default('20'))
    .option(
      '--keys <names>',
      'table columns: comma-separated names or prefixes, e.g. reward_mean,kl,info/ (default: the key metrics first, as many as fit)',
    ),
).action((job: string, o) => metricsCommand(job, o));

sessionOption(
  program
    .command('diagnose')
    .description(
      'which side limits a train_ppo run (rollout, trainer, weight sync, the agent, the queue), by how much, and the setting to change first',
    )
    .argument('<job>', 'job id')
    .option('--json', 'the verdict as JSON'),
).action((job: string, o) => diagnoseCommand(job, o));

sessionOption(
  program
    .command('ledger')
    .description(
      "a job's ledger: train_ppo's every episode sampled, trained (which step) or dropped (why), and whether the books balance",
    )
    .argument('<job>', 'job id')
    .option('--json', 'one object: the verdict and every entry (id, status, step, reason)'),
).action((job: string, o) => ledgerCommand(job, o));

sessionOption(
  program
    .command('samples')
    .description(
      'sample episodes a job kept per step (train_ppo --log-samples): prompt, turns, score (train_ppo: the reward), extraInfo',
    )
    .argument('<job>', 'job id')
    .option('--step <n>', 'this step (default: the latest with samples)')
    .option('--prompt <key>', 'one prompt (its dataset index) across every step')
    .option('--min-score <r>', "only samples scored >= r (train_ppo's score is the reward)")
    .option('--max-score <r>', 'only samples scored <= r')
    .addOption(new Option('--min-reward <r>').hideHelp())
    .addOption(new Option('--max-reward <r>').hideHelp())
    .option('--full', 'print whole texts (default: 400 characters per turn)')
    .option('--json', 'the samples as JSON'),
).action((job: string, o) => samplesCommand(job, o));

program
  .command('serve')
  .description(
    'serve a checkpoint as an OpenAI- and Anthropic-compatible endpoint (/v1/chat/completions, /v1/responses, /v1/messages)',
  )
  .option('--pretrain <dir>', 'HF model directory (default: the shipped warm-start model)')
  .option(
    '--reward-model <dir>',
    "serve a reward model (train_rm's output) instead: POST /get_reward {query: [text]} -> {rewards: [number]}, OpenRLHF's serve_rm protocol, for train_ppo --remote-rm-url",
  )
  .option('--host <host>', 'interface to bind', '127.0.0.1')
  .option('--port <port>', 'port; 0 picks a free one', '8000')
  .option(
    '--api-key <key>',
    'the key clients send (default: RTJOB_SERVE_API_KEY, else a random one, printed)',
  )
  .option('--model <name>', "the model name clients request (default: the directory's name)")
  .option(
    '--tool-call-parser <name>',
    'tool-call format in generated text: hermes, qwen, none',
    'hermes',
  )
  .option('--max-tokens <n>', 'completion cap and default max_tokens (default: the context length)')
  .option('--engine <name>', `what generates: ${offeredEngineNames()}`, defaultEngineKind)
  .option(
    '--rollout-dtype <type>',
    'GGUF element type for --engine llamacpp: f32, f16, bf16, q8_0',
    'f32',
  )
  .option(
    '--llamacpp-gpu <device>',
    'device of --engine llamacpp: off (the CPU build), auto (CUDA, else Vulkan), cuda, vulkan',
    'off',
  )
  .option(
    '--engine-url <urls>',
    'comma-separated SGLang/vLLM servers already serving --pretrain (for --engine sglang|vllm)',
  )
  .option(
    '--lora <dir>',
    'a PEFT LoRA adapter directory (e.g. what train_ppo --lora-rank saved) served over --pretrain, its base',
  )
  .addHelpText(
    'after',
    '\nExamples:\n  rtjob serve --pretrain ./ckpt/JOB --port 8000\n  rtjob serve --reward-model ./ckpt/rm --port 5000\n  rtjob serve --pretrain model/pretrained/rtjob-tiny-tool --lora ./ckpt/JOB\n  rtjob serve --pretrain ./ckpt/JOB --engine llamacpp --rollout-dtype bf16\n  rtjob serve --pretrain /shared/policy --engine sglang --engine-url http://gpu-host:30000',
  )
  .action((o) => serveCommand(o));

program
  .command('eval')
  .description(
    "held-out accuracy of a saved policy with your agent, greedy, as train_ppo's eval measures it (rtjob eval --help lists its flags)",
  )
  .usage(
    '<model-dir> --agent-func ./agent.ts [--eval-dataset FILE.jsonl --input-key K --label-key K] [--prompts N] [--samples K] [--engine llamacpp] [--json]',
  )
  .argument('[args...]')
  .helpOption(false)
  .allowUnknownOption()
  .allowExcessArguments()
  .action(async (args: string[]) => {
    process.exitCode = await evalCommand(args);
  });

program
  .command('merge-lora')
  .description(
    'merge a PEFT LoRA adapter into its base: writes a full HF model directory with W + (alpha/r)·B·A',
  )
  .argument('<adapter>', 'PEFT adapter directory (adapter_config.json, adapter_model.safetensors)')
  .requiredOption('--save-path <dir>', 'where the merged HF model directory is written')
  .option(
    '--pretrain <dir>',
    "the base model directory (default: the adapter config's base_model_name_or_path)",
  )
  .option('--save-dtype <type>', 'tensor dtype of the merged model: float32, bfloat16', 'float32')
  .addHelpText(
    'after',
    '\nExample:\n  rtjob merge-lora ./ckpt/JOB --pretrain model/pretrained/rtjob-tiny-tool --save-path ./merged',
  )
  .action((adapter: string, o: MergeLoraFlags) => mergeLoraCommand(adapter, o));

program
  .command('build')
  .description(
    "build a native part now instead of at first use: 'torch' (the libtorch TF.js backend addon)",
  )
  .argument('<what>', 'torch')
  .option('--force', 'rebuild even when an up-to-date build exists')
  .action((what: string, o: { force?: boolean }) => buildCommand(what, o));

try {
  await program.parseAsync();
} catch (err) {
  process.exitCode = reportError(
    err,
    Boolean(program.opts().verbose) || readEnv('RTJOB_DEBUG') === true,
  );
}

/**
 * Prints an error once: bad input (a {@link CliError} with exit code 2) as written, any other as
 * one line (the first line of its message) plus a hint; the stack and the rest only with `--verbose` or `RTJOB_DEBUG=1`.
 * Returns the exit code.
 */
function reportError(err: unknown, verbose: boolean): number {
  const e = err instanceof Error ? err : new Error(String(err));
  if (verbose) {
    process.stderr.write(`rtjob: ${e.stack ?? e.message}\n`);
  } else if (err instanceof CliError && err.exitCode === 2) {
    // Bad input, written for the user: whole (several unknown flags are a line each).
    process.stderr.write(`rtjob: ${e.message}\n`);
  } else {
    const [first, ...rest] = e.message.split('\n');
    process.stderr.write(`rtjob: ${first}\n`);
    if (!(err instanceof CliError) || rest.length)
      process.stderr.write('(run with --verbose or RTJOB_DEBUG=1 for details)\n');
  }
  return err instanceof CliError ? err.exitCode : 1;
}
