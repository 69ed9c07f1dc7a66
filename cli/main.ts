import { Command } from 'commander';

const program = new Command('rtjob').description('A Ray-style actor runtime and RL trainer');
program.parse();
