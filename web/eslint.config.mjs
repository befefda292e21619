// ESLint for web/ (run by tests/test_lint_web.py, so by `./run test`): a small set of rules that
// catch real bugs (a name nothing defines, an import or variable nothing uses, a key given
// twice, code after a return) and the project's 100-column rule. Run it alone with
// `npx --prefix web eslint web` (from the repository root).
import globals from "globals";

export default [
  { ignores: ["node_modules/**"] },
  {
    files: ["**/*.js", "**/*.mjs"],
    languageOptions: {
      ecmaVersion: 2024,
      sourceType: "module",
      globals: { ...globals.browser },
    },
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      "no-undef": "error",
      "no-unused-vars": ["error", { args: "none", caughtErrors: "none" }],
      "no-dupe-keys": "error",
      "no-duplicate-imports": "error",
      "no-unreachable": "error",
      "no-self-assign": "error",
      "no-const-assign": "error",
      "no-import-assign": "error",
      "no-redeclare": "error",
      "no-shadow-restricted-names": "error",
      "max-len": ["error", { code: 100, ignoreUrls: true }],
    },
  },
  {  // the module worker: `self` is its global scope
    files: ["lib/worker.js"],
    languageOptions: { globals: { ...globals.worker } },
  },
];
