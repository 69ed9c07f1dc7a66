/**
 * How the dashboard presents a train_ppo job, sent with the run's report. Its metrics: reward
 * first, then the policy, timing and system groups, the key charts of each first, the step time
 * split as one chart with a line per phase. Its roles: what losing each one does to the run. The
 * dashboard knows no metric or role by name; these tables do.
 *
 * @module
 */
import type { JobReport } from '../../ops/metrics.ts';

/** train_ppo's chart layout (`report.charts`). */
export const trainPpoCharts: NonNullable<JobReport['charts']> = {
  groups: [
    {
      title: 'Reward',
      first: ['reward_mean', 'eval_accuracy', 'reward_std', 'zero_std_groups', 'pass_rate'],
      match: '^(reward|eval_|pass_rate|zero_std|info/)',
    },
    {
      title: 'Policy',
      first: [
        'kl',
        'policy_loss',
        'entropy',
        'clip_fraction',
        'grad_norm',
        'response_length',
        'response_length_max',
        'response_clip_ratio',
        'value_loss',
      ],
      match:
        '^(kl|policy_|value_|entropy|clip|grad|response_|staleness|version_span|loss|is_|importance|logprob|actor_lr|critic_lr)',
    },
    {
      title: 'Timing',
      first: ['step_time_split', 'step_s', 'tokens_per_s', 'samples_per_s', 'episodes_per_s'],
      match: '(_s|_per_s|_fraction)$|^step_time_split$',
    },
    {
      title: 'System',
      first: ['buffer_fill', 'samples', 'episodes', 'episodes_failed', 'groups_dropped'],
      // The gateway's bookkeeping of agent episodes (completions, trajectories, breaks).
      match: '^gateway/',
    },
  ],
  multi: {
    step_time_split: {
      title: 'step time split (s): generate / experience / train / sync',
      members: ['generate_s', 'experience_s', 'train_s', 'weight_sync_s'],
    },
  },
  neverFolded: ['reward_mean', 'eval_accuracy'],
  // The weights' version is the step again (sync), or the step less the staleness (async), which
  // has charts of its own.
  hidden: ['version'],
  // Generated tokens so far: the page's tokens x axis.
  tokens: 'tokens_total',
};

/** train_ppo's summary cards (`report.summary`): held-out accuracy, reward, failures. */
export const trainPpoSummary: NonNullable<JobReport['summary']> = [
  { id: 'eval', title: 'Held-out accuracy', metric: 'eval_accuracy', format: 'percent' },
  { id: 'reward', title: 'Reward (mean)', metric: 'reward_mean' },
  {
    id: 'failures',
    title: 'Failures',
    counts: [
      { metric: 'episodes_failed', one: 'episode failed', many: 'episodes failed' },
      { metric: 'groups_dropped', one: 'group dropped', many: 'groups dropped' },
      { metric: 'rollout_restarts', one: 'rollout restart', many: 'rollout restarts' },
    ],
  },
];

/** What losing each train_ppo role does to the run (`report.roles`, by actor class). */
export const trainPpoRoles: NonNullable<JobReport['roles']> = {
  Rollout: {
    fate: 'train_ppo restarts a rollout that dies (up to 3 times) and re-runs its in-flight groups, so the job goes on',
  },
  Trainer: { fate: 'train_ppo cannot go on without its trainer', fatal: true },
  Reference: { fate: 'train_ppo cannot go on without its reference model', fatal: true },
  Critic: { fate: 'train_ppo cannot go on without its critic', fatal: true },
};
