import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { expect } from 'vitest';

// strictRequired off: the bot/human rules of user-base.schema.json name properties inside `not`, where ajv cannot see them defined.
const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, allowUnionTypes: true });
// ajv-formats is CommonJS: its default export arrives as `.default` under NodeNext.
(addFormatsModule as unknown as typeof addFormatsModule.default)(ajv);

/** Compiled once per file: test files share this module (vitest `isolate: false`), and ajv refuses a second schema with the same `$id`. */
const compiled = new Map<string, ValidateFunction>();

/** ajv's validator of a JSON schema in test/support. */
export function compileSchema(file: string): ValidateFunction {
  let validate = compiled.get(file);
  if (!validate) {
    validate = ajv.compile(JSON.parse(readFileSync(new URL(`./${file}`, import.meta.url), 'utf8')) as object);
    compiled.set(file, validate);
  }
  return validate;
}

/** Asserts that a value passes a validator, showing all of ajv's errors when it does not. */
export function expectValid(validate: ValidateFunction, value: unknown): void {
  const ok = validate(value);
  expect(ok ? [] : validate.errors).toEqual([]);
}

/** An assertion that a value matches a JSON schema in test/support. */
export function matchesSchema(file: string): (value: unknown) => void {
  const validate = compileSchema(file);
  return (value) => expectValid(validate, value);
}
