// Lint for the whole tree, run by `npm test` (the `lint` job of scripts/run-tests.mjs).
// Few rules on purpose: the ones that catch bugs the type checker lets through. The main one is
// type-aware `no-floating-promises`: a promise nobody awaits loses its rejection. Where
// fire-and-forget is intended, mark it `void` with a comment saying why.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      'node_modules/**',
      'ops/dashboard/dist/**',
      'dist/**',
      'ops/dashboard/static/**',
      'bench/results/**',
      'ckpt/**',
      'tmp/**',
      'test/fixtures/agents/broken-syntax.mjs',
      // A user's project, type-checked against the packed tarball by test/package (not the tree).
      'test/package/consumer/**',
    ],
  },
  {
    files: ['**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: false }],
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/consistent-type-imports': ['error', { disallowTypeAnnotations: false }],
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' },
      ],
      // `catch {}` that swallows on purpose is common in cleanup paths; keep them allowed.
      'no-empty': ['error', { allowEmptyCatch: true }],
      // A `let` that a callback reads before its one assignment cannot be a `const`.
      'prefer-const': ['error', { ignoreReadBeforeAssign: true }],
      // Terminal output is matched for ANSI escapes on purpose.
      'no-control-regex': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
  {
    files: ['**/*.js', '**/*.mjs'],
    extends: [js.configs.recommended],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        URL: 'readonly',
        Buffer: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
      },
    },
    rules: { 'no-empty': ['error', { allowEmptyCatch: true }], 'no-control-regex': 'off' },
  },
);
